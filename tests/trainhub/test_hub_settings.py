"""The hub's timings are settings like any other: flag, TRAINHUB_* variable or YAML key."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from dispatcher.hub import HubConfig
from trainhub import cli, cli_operate
from trainhub.processes import hub_config
from trainhub.settings import TrainhubSettings, load_settings


def test_flags_variables_and_the_file_reach_the_hub(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "hub.yaml"
    config.write_text(
        "exclusion_seconds: 45\nwaiting_status_interval: 7\nplacement: {queue_limits: {a: 2}}\n"
    )
    built = hub_config(load_settings(config))
    assert (built.exclusion_seconds, built.waiting_status_interval) == (45.0, 7.0)
    assert built.placement.queue_limits == {"a": 2}

    defaults = hub_config(TrainhubSettings())
    assert defaults.exclusion_seconds == HubConfig().exclusion_seconds
    assert defaults.waiting_status_interval == HubConfig().waiting_status_interval

    monkeypatch.setenv("TRAINHUB_WAITING_STATUS_INTERVAL", "0")  # every change, at once
    built = hub_config(load_settings(config, exclusion_seconds=600.0))
    assert (built.exclusion_seconds, built.waiting_status_interval) == (600.0, 0.0)


def test_trainhub_hub_takes_them_as_flags(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[HubConfig] = []

    async def run_hub(settings: TrainhubSettings) -> None:
        seen.append(hub_config(settings))

    monkeypatch.setattr(cli_operate, "run_hub", run_hub)
    args = ["hub", "--bootstrap", "127.0.0.1:1", "--exclusion-seconds", "12.5"]
    result = CliRunner().invoke(cli.app, [*args, "--waiting-status-interval", "3"])
    assert result.exit_code == 0, result.output
    assert (seen[0].exclusion_seconds, seen[0].waiting_status_interval) == (12.5, 3.0)

    refused = CliRunner().invoke(cli.app, [*args[:3], "--exclusion-seconds", "0"])
    assert refused.exit_code == 2
    assert "exclusion_seconds" in refused.output


def test_numeric_flags_arrive_as_numbers(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[TrainhubSettings] = []

    async def run_hub(settings: TrainhubSettings) -> None:
        seen.append(settings)

    monkeypatch.setattr(cli_operate, "run_hub", run_hub)
    args = ["hub", "--bootstrap", "127.0.0.1:1", "--metrics-port", "9100", "--partitions", "6"]
    args += ["--finished-retention", "1.5", "--max-heartbeat-age", "20"]
    result = CliRunner().invoke(cli.app, args)
    assert result.exit_code == 0, result.output
    settings = seen[0]
    assert (settings.metrics_port, settings.partitions) == (9100, 6)
    assert (settings.finished_retention, settings.max_heartbeat_age) == (1.5, 20.0)
    not_a_number = CliRunner().invoke(cli.app, [*args[:3], "--partitions", "1.5"])
    assert not_a_number.exit_code == 2
