"""The annotations that script a pod on the `sim` backend and on KWOK nodes: how long it runs
(`trainhub.io/sim-duration`, a Go-style duration: `2s`, `1m30s`, `500ms`) and how it ends
(`trainhub.io/sim-exit-code`, 0 by default). Checked when a job is submitted, so a typo fails
the submission, not a pod task long after."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping

SIM_DURATION = "trainhub.io/sim-duration"
SIM_EXIT_CODE = "trainhub.io/sim-exit-code"

_PART = re.compile(r"(\d+(?:\.\d+)?)(ns|us|µs|ms|s|m|h)")
_SECONDS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
_LONGEST = 10 * 365 * 86400.0
"""Ten years: longer is a typo, and would overflow the timers."""


def parse_duration(text: str) -> float:
    """Seconds in a Go duration string; a bare number means seconds. ValueError otherwise
    (also for a negative, infinite or NaN one, or one over ten years)."""
    text = text.strip()
    try:
        seconds = float(text)
    except ValueError:
        parts = _PART.findall(text)
        if not parts or "".join(n + u for n, u in parts) != text:
            raise ValueError(
                f"not a duration: {text!r} (use e.g. '2s', '500ms', '1m30s')"
            ) from None
        seconds = sum(float(n) * _SECONDS[u] for n, u in parts)
    if not (math.isfinite(seconds) and 0 <= seconds <= _LONGEST):
        raise ValueError(f"not a duration between 0 and ten years: {text!r}")
    return seconds


def parse_exit_code(text: str) -> int:
    """A container's exit code, 0..255 (ValueError otherwise)."""
    text = text.strip()
    if not text.isdigit() or int(text) > 255:
        raise ValueError(f"not an exit code 0..255: {text!r}")
    return int(text)


def sim_annotation_problem(annotations: Mapping[str, str]) -> str | None:
    """What is wrong with a pod template's sim annotations (`[name]: why`), if anything."""
    for name, parse in ((SIM_DURATION, parse_duration), (SIM_EXIT_CODE, parse_exit_code)):
        if name in annotations:
            try:
                parse(annotations[name])
            except ValueError as exc:
                return f"[{name}]: {exc}"
    return None
