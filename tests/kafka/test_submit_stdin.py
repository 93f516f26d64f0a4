"""`trainhub submit -` on a real broker: stock Kubeflow documents (no runPolicy.managedBy)
read from stdin run as the SDK would run them; without `default_managed_by` they are warned
of, Skipped by the hub, and `--watch` exits 1 naming them (issue 29)."""

from __future__ import annotations

import asyncio
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from bus.kafka_settings import KafkaSettings
from bus.topics import Topics
from tests.cli import run_trainhub
from tests.helpers import jax_job
from tests.kafka.processes import Process, sim_worker

pytestmark = pytest.mark.kafka


def _stock(name: str) -> dict[str, Any]:
    document = jax_job(name, workers=1, managed=False, duration="0.3s")
    del document["spec"]["runPolicy"]
    return document


def _submit(stdin: str, *args: str) -> subprocess.CompletedProcess[str]:
    return run_trainhub("submit", "-", "--watch", "--no-live", *args, stdin=stdin)


async def test_stock_documents_from_stdin_run_unless_the_default_is_off(
    kafka_settings: KafkaSettings, topics: Topics, tmp_path: Path
) -> None:
    common = ["--bootstrap", kafka_settings.bootstrap, "--topic-prefix", topics.prefix]
    hub = Process("hub", ["hub", *common], tmp_path)
    worker = sim_worker("solo", common, tmp_path)
    try:
        both = yaml.safe_dump_all([_stock("piped-a"), _stock("piped-b")])
        ran = await asyncio.to_thread(_submit, both, *common)
        assert ran.returncode == 0, ran.stdout + ran.stderr + hub.log()[-3000:]
        assert "submitted default/piped-a" in ran.stdout
        assert "submitted default/piped-b" in ran.stdout
        assert "Skipped" not in ran.stdout and "warning" not in ran.stdout
        left = await asyncio.to_thread(
            _submit, yaml.safe_dump(_stock("left-alone")), *common, "--no-default-managed-by"
        )
        out = " ".join(left.stdout.split())
        assert left.returncode == 1, out + left.stderr
        assert "warning: default/left-alone: runPolicy.managedBy is unset" in out
        assert "default/left-alone: Skipped (" in out
    finally:
        for process in (worker, hub):
            assert process.terminate() in (0, -15), process.log()[-2000:]
