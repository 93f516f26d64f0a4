"""Builds helm before the chart tests run, when they are selected and none is installed: the
first build takes longer than the per-test timeout (like the Kubernetes sandbox binaries)."""

from __future__ import annotations

import subprocess
import time

import pytest

from tests.deploy.helm_chart import helm_binary, install_helm


def pytest_collection_finish(session: pytest.Session) -> None:
    wanted = any("helm" in getattr(item, "fixturenames", ()) for item in session.items)
    if not wanted or session.config.option.collectonly or helm_binary() is not None:
        return
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_line("building helm for the chart tests (first time: a few minutes)")
    started = time.monotonic()
    try:
        built = install_helm()
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as error:
        detail = getattr(error, "stderr", "") or str(error)
        if reporter is not None:
            reporter.write_line(f"building helm failed; the chart tests will skip: {detail}")
        return
    if reporter is not None and built is not None:
        reporter.write_line(f"helm built in {time.monotonic() - started:.0f}s")
