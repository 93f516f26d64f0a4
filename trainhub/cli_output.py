"""What the `trainhub` commands print with and how they fail: the consoles, the output
formats, and the error exits (1 by default, 2 for usage errors)."""

from __future__ import annotations

from enum import StrEnum

import typer
from rich.console import Console

from trainhub.console_view import error_text
from trainhub.job_checks import JobFiles
from trainhub.settings import TrainhubSettings

# No markup: job names, pod output and messages are the users' text, and brackets in them
# must print as written (styles are given as Text).
console = Console(soft_wrap=True, markup=False)
err_console = Console(stderr=True, soft_wrap=True, markup=False)


class Output(StrEnum):
    text = "text"
    json = "json"
    yaml = "yaml"


def fail(message: str, code: int = 1) -> typer.Exit:
    err_console.print(error_text(message), highlight=False)
    return typer.Exit(code)


def exit_on_problems(found: JobFiles) -> None:
    """Name every bad document on stderr, then exit 1; return when there is none."""
    for problem in found.problems:
        err_console.print(error_text(problem), highlight=False)
    if found.problems:
        raise typer.Exit(1)


def require_bootstrap(settings: TrainhubSettings) -> None:
    if not settings.bootstrap:
        raise fail(
            "this command needs Kafka: pass --bootstrap HOST:PORT or set TRAINHUB_BOOTSTRAP "
            "(`trainhub sandbox up` starts a local broker)",
            code=2,
        )
