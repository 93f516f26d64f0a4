"""Every command's `--help` ends with examples that the command really accepts."""

from __future__ import annotations

import re
import shlex
from collections.abc import Awaitable
from pathlib import Path

import pytest
import typer
from typer._click.core import Command

# typer bundles its own click; a parse error is its UsageError (no public name for it).
from typer._click.exceptions import UsageError
from typer.core import TyperCommand, TyperGroup
from typer.testing import CliRunner

from trainhub import cli_submit
from trainhub.cli import app
from trainhub.settings import TrainhubSettings


def command_paths(command: Command, path: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """Every group and command under `command`, as the words that name it."""
    found = [path]
    if isinstance(command, TyperGroup):
        for name, sub in sorted(command.commands.items()):
            if not sub.hidden:
                found += command_paths(sub, (*path, name))
    return found


def resolve(words: list[str]) -> tuple[str, ...]:
    """Parse `trainhub WORDS` as the CLI would, without running it; the command path it
    names. A UsageError (unknown option, missing argument, bad value) fails the test."""
    command = typer.main.get_command(app)
    context = command.make_context("trainhub", list(words))
    path: list[str] = []
    while isinstance(command, TyperGroup):
        rest = [*context._protected_args, *context.args]
        name, sub, args = command.resolve_command(context, rest)
        assert name is not None and sub is not None
        path.append(name)
        command, context = sub, sub.make_context(name, args, parent=context)
    assert isinstance(command, TyperCommand)
    return tuple(path)


def help_text(path: tuple[str, ...]) -> str:
    """`trainhub PATH --help` as a user sees it in a pipe (80 columns, no colour)."""
    result = CliRunner().invoke(app, [*path, "--help"], env={"NO_COLOR": "1"})
    assert result.exit_code == 0, result.output
    return result.output


def examples_of(text: str) -> list[str]:
    """The lines of the Examples section (up to the end of the help)."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip() == "Examples:")
    return [line.strip() for line in lines[start + 1 :] if line.strip()]


def test_every_command_has_runnable_examples() -> None:
    paths = command_paths(typer.main.get_command(app))
    assert ("get", "jobs") in paths and ("sandbox", "up") in paths and ("plan",) in paths
    for path in paths:
        text = help_text(path)
        shown = " ".join(("trainhub", *path))
        assert "Examples:" in text, f"`{shown} --help` has no Examples section"
        lines = examples_of(text)
        # At 80 columns no example may be wrapped: every line is a whole command.
        assert lines and all(line.startswith("trainhub ") for line in lines), (shown, lines)
        runnable = [line for line in lines if "COMMAND" not in line]
        assert runnable, shown
        for line in runnable:
            words = shlex.split(line)[1:]
            try:
                named = resolve(words)
            except UsageError as exc:
                raise AssertionError(f"`{line}` (in `{shown} --help`): {exc}") from exc
            assert named[: len(path)] == path, f"`{line}` is not an example of `{shown}`"


def test_resolve_refuses_what_the_cli_refuses() -> None:
    assert resolve(["get", "jobs", "-o", "wide"]) == ("get", "jobs")
    for words in (["get", "jobs", "-o", "tall"], ["plan"], ["up", "--frobnicate"]):
        try:
            resolve(words)
        except UsageError:
            continue
        raise AssertionError(f"{words} parsed")


def flags_of(text: str) -> set[str]:
    """The long options a help text lists (`--no-x` of a pair included)."""
    return set(re.findall(r"(?<![\w-])--[a-z][a-z-]*[a-z]", text))


HUB_ONLY = {"--exclusion-seconds", "--unavailable-cluster-wait", "--finished-retention"}
WORKER_ONLY = {"--heartbeat-interval", "--unschedulable-timeout", "--run-retention"}
WORKER_ONLY |= {"--heartbeat-overdue-after", "--gang-scheduler", "--gang-scheduler-name"}
WORKER_ONLY |= {"--delegate-managed-by"}


def test_each_command_lists_only_the_settings_it_uses() -> None:
    # A wide terminal: no flag name is cut short in its column.
    wide = {"NO_COLOR": "1", "COLUMNS": "200"}

    def flags(*path: str) -> set[str]:
        result = CliRunner().invoke(app, [*path, "--help"], env=wide)
        assert result.exit_code == 0, result.output
        return flags_of(result.output)

    submit = flags("submit")
    assert {"--bootstrap", "--topic-prefix", "--config", "--default-managed-by"} <= submit
    assert {"--partitions", "--no-validate", "--max-heartbeat-age"} <= submit
    assert not submit & (HUB_ONLY | WORKER_ONLY | {"--metrics-port", "--waiting-status-interval"})

    hub = flags("hub")
    assert HUB_ONLY | {"--metrics-port", "--max-heartbeat-age", "--partitions"} <= hub
    assert not hub & (WORKER_ONLY | {"--default-managed-by"})

    worker = flags("worker")
    assert WORKER_ONLY | {"--metrics-port", "--cluster", "--bootstrap"} <= worker
    assert not worker & (HUB_ONLY | {"--default-managed-by", "--max-heartbeat-age"})

    # `up` runs a hub and its workers and submits: it takes every setting.
    assert HUB_ONLY | WORKER_ONLY | {"--default-managed-by"} <= flags("up")

    # Readers create no topics and run nothing: the connection and the topic prefix only.
    for path in (("get", "jobs"), ("describe", "job"), ("logs",), ("status",), ("delete",)):
        shown = flags(*path)
        assert {"--bootstrap", "--topic-prefix", "--sasl-password", "--config"} <= shown, path
        assert not shown & (HUB_ONLY | WORKER_ONLY | {"--partitions", "--metrics-port"}), path
    assert "--max-heartbeat-age" in flags("get", "clusters")


def test_a_setting_without_a_flag_still_comes_from_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    seen: list[TrainhubSettings] = []

    def fake_submit(
        settings: TrainhubSettings, documents: list[dict[str, object]], *rest: object
    ) -> Awaitable[int]:
        seen.append(settings)

        async def done() -> int:
            return 0

        return done()

    monkeypatch.setattr(cli_submit, "_submit", fake_submit)
    env = {"TRAINHUB_EXCLUSION_SECONDS": "42", "TRAINHUB_BOOTSTRAP": "127.0.0.1:1"}
    job = Path(__file__).parents[2] / "examples" / "jax-mnist-spmd" / "jaxjob.yaml"
    result = CliRunner().invoke(app, ["submit", str(job)], env=env)
    assert result.exit_code == 0, result.output
    assert seen[0].exclusion_seconds == 42.0
    refused = CliRunner().invoke(app, ["submit", str(job), "--exclusion-seconds", "42"], env=env)
    assert refused.exit_code == 2 and "No such option" in refused.output
