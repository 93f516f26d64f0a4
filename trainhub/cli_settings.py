"""Give a typer command one flag per setting, named as the setting (`--topic-prefix`)."""

from __future__ import annotations

import functools
import inspect
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer

from trainhub.settings import TrainhubSettings, load_settings

_F = TypeVar("_F", bound=Callable[..., Any])
_PANEL = "Connection and settings (also TRAINHUB_* variables or --config FILE)"


def _flag_type(annotation: Any) -> type:
    """The flag's type from the setting's (`float | None` -> float; a bool is a
    `--x/--no-x` pair); str for the rest
    (strings and Literal choices, which the settings model then checks)."""
    members = typing.get_args(annotation) if typing.get_origin(annotation) else (annotation,)
    for kind in (bool, int, float):
        if kind in members:
            return kind
    return str


def _flag(name: str) -> inspect.Parameter:
    field = TrainhubSettings.model_fields[name]
    flag_type: Any = _flag_type(field.annotation)
    flag = f"--{name.replace('_', '-')}"
    if flag_type is bool:
        flag = f"{flag}/--no-{flag.removeprefix('--')}"
    option = typer.Option(flag, help=field.description, rich_help_panel=_PANEL)
    return inspect.Parameter(
        name,
        inspect.Parameter.KEYWORD_ONLY,
        default=None,
        annotation=Annotated[flag_type | None, option],
    )


def with_settings(func: _F) -> _F:
    """Replace the command's `settings` parameter with every settings flag plus --config."""
    # Structured settings (placement) come from the YAML file or the variable only.
    names = [n for n in TrainhubSettings.model_fields if n != "placement"]
    config = inspect.Parameter(
        "config",
        inspect.Parameter.KEYWORD_ONLY,
        default=None,
        annotation=Annotated[
            Path | None,
            typer.Option(
                "--config",
                envvar="TRAINHUB_CONFIG",
                help="YAML settings file.",
                rich_help_panel=_PANEL,
            ),
        ],
    )
    signature = inspect.signature(func)
    # The commands use postponed annotations: resolve them in their own module, since
    # typer would look them up in this one.
    hints = typing.get_type_hints(func, include_extras=True)
    own = [
        p.replace(annotation=hints[p.name])
        for p in signature.parameters.values()
        if p.name != "settings"
    ]

    @functools.wraps(func)
    def wrapper(**kwargs: Any) -> Any:
        flags = {n: kwargs.pop(n) for n in names}
        try:
            settings = load_settings(kwargs.pop("config"), **flags)
        except (ValueError, OSError) as exc:
            typer.echo(f"error: invalid settings: {exc}", err=True)
            raise typer.Exit(2) from None
        return func(settings=settings, **kwargs)

    parameters = [*own, config, *(_flag(n) for n in names)]
    wrapper.__signature__ = signature.replace(  # type: ignore[attr-defined]
        parameters=parameters, return_annotation=hints.get("return")
    )
    wrapper.__annotations__ = {p.name: p.annotation for p in parameters}
    return wrapper  # type: ignore[return-value]
