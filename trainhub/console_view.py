"""How status updates and placement decisions look in a terminal."""

from __future__ import annotations

from datetime import datetime

from rich.console import Console
from rich.table import Table
from rich.text import Text

from schemas.events import JobStatusUpdate, PlacementDecision

_STYLE = {
    "Succeeded": "bold green",
    "Failed": "bold red",
    "Rejected": "bold red",
    "Running": "cyan",
    "Assigned": "magenta",
    "Skipped": "yellow",
}


def decision_table(decision: PlacementDecision, title: str = "placement") -> Table:
    """The clusters the decision lists, with its counts of the others as the caption."""
    table = Table(title=title, title_justify="left", caption=decision.summary())
    table.add_column("cluster")
    table.add_column("feasible")
    table.add_column("score", justify="right")
    table.add_column("reason")
    for row in decision.clusters:
        chosen = " (chosen)" if row.name == decision.chosen else ""
        table.add_row(
            row.name + chosen,
            "yes" if row.feasible else "no",
            "" if row.score is None else f"{row.score:.1f}",
            row.reason or "",
        )
    return table


class StatusPrinter:
    def __init__(self, console: Console) -> None:
        self.console = console

    def __call__(self, update: JobStatusUpdate, at: datetime | None = None) -> None:
        """`at`: when the update was published (default: now, for updates as they come)."""
        stamp = (at.astimezone() if at is not None else datetime.now()).strftime("%H:%M:%S")
        name = f"{update.namespace}/{update.name}" if update.name else update.uid
        where = f" on {update.cluster}" if update.cluster else ""
        line = Text(f"{stamp} {name} ")
        line.append(update.phase.value, style=_STYLE.get(update.phase.value, ""))
        line.append(where + (f" - {update.message}" if update.message else ""))
        self.console.print(line, highlight=False)
        if update.phase.value == "Assigned" and update.placement is not None:
            self.console.print(decision_table(update.placement, f"placement of {name}"))


def error_text(message: str) -> Text:
    """`error: message`, the message printed as written (brackets and all)."""
    return Text.assemble(("error:", "bold red"), " ", message)
