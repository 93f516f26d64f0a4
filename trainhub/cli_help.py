"""What `--help` shows beyond the options: an Examples section on every command, and prose
that the terminal wraps (typer keeps the line breaks of a docstring's later paragraphs)."""

from __future__ import annotations

import inspect

import typer
from rich.markup import escape


def examples(*commands: str) -> str:
    """A help epilog listing `commands`, one runnable command line each.

    Help is rendered with rich markup, which keeps single line breaks; brackets are escaped
    so that they print as typed. Keep each line within 76 characters, so that it is not
    wrapped on an 80-column terminal."""
    return "Examples:\n" + "\n".join(f"  {escape(command)}" for command in commands)


def unwrap(doc: str) -> str:
    """Join the lines of each paragraph of a docstring."""
    paragraphs = inspect.cleandoc(doc).split("\n\n")
    return "\n\n".join(" ".join(line.strip() for line in p.splitlines()) for p in paragraphs)


def tidy_help(app: typer.Typer) -> None:
    """Give every command of `app` (and of its groups) its docstring with paragraphs unwrapped."""
    for info in app.registered_commands:
        doc = info.help or (info.callback.__doc__ if info.callback else None)
        if doc:
            info.help = unwrap(doc)
    for group in app.registered_groups:
        if group.typer_instance is not None:
            tidy_help(group.typer_instance)
