"""Give a typer command one flag per setting it uses, named as the setting (`--topic-prefix`).

A command lists only the settings it reads (`with_settings(*READ_BUS, "max_heartbeat_age")`);
the others still load from `TRAINHUB_*` variables and --config, unused."""

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

KAFKA: tuple[str, ...] = (
    "bootstrap",
    "security_protocol",
    "sasl_mechanism",
    "sasl_username",
    "sasl_password",
    "ssl_cafile",
    "ssl_certfile",
    "ssl_keyfile",
)
"""Reaching the broker."""
READ_BUS: tuple[str, ...] = (*KAFKA, "topic_prefix")
"""Commands that use topics that exist (a client that creates none)."""
CREATE_TOPICS: tuple[str, ...] = (*READ_BUS, "partitions", "replication")
"""Commands that create trainhub's topics where they are missing."""
HUB: tuple[str, ...] = (
    "metrics_port",
    "max_heartbeat_age",
    "exclusion_seconds",
    "unavailable_cluster_wait",
    "waiting_status_interval",
    "finished_retention",
)
"""The hub's own settings (HubConfig's, and its metrics endpoint)."""
WORKER: tuple[str, ...] = (
    "metrics_port",
    "heartbeat_interval",
    "unschedulable_timeout",
    "run_retention",
    "heartbeat_overdue_after",
    "gang_scheduler",
    "gang_scheduler_name",
    "mode",
    "delegate_managed_by",
    "local_pvc_dir",
)
"""A worker's own settings (WorkerConfig's, and its metrics endpoint)."""
SUBMIT: tuple[str, ...] = ("default_managed_by",)
"""What submitting a job document reads."""


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


def with_settings(*uses: str) -> Callable[[_F], _F]:
    """Replace the command's `settings` parameter with --config and a flag for each setting
    in `uses` (in the order of TrainhubSettings; a name given twice is one flag)."""
    unknown = sorted(set(uses) - set(TrainhubSettings.model_fields))
    if unknown:
        raise ValueError(f"no such settings: {', '.join(unknown)}")
    # Structured settings (placement) come from the YAML file or the variable only.
    names = [n for n in TrainhubSettings.model_fields if n in uses and n != "placement"]

    def decorate(func: _F) -> _F:
        return _with_flags(func, names)

    return decorate


def _with_flags(func: _F, names: list[str]) -> _F:
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
