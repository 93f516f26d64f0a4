"""Go-style durations (`2s`, `1m30s`, `500ms`), as the sim annotations and KWOK stages use."""

from __future__ import annotations

import re

_PART = re.compile(r"(\d+(?:\.\d+)?)(ns|us|µs|ms|s|m|h)")
_SECONDS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_duration(text: str) -> float:
    """Seconds in a Go duration string; a bare number means seconds."""
    text = text.strip()
    try:
        return float(text)
    except ValueError:
        pass
    parts = _PART.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text:
        raise ValueError(f"not a duration: {text!r} (use e.g. '2s', '500ms', '1m30s')")
    return sum(float(n) * _SECONDS[u] for n, u in parts)
