"""Where the sandbox keeps what it builds and resolves, outside the repository."""

from __future__ import annotations

import os
from pathlib import Path


def default_cache_dir() -> Path:
    """The sandbox cache root: `$TRAINHUB_CACHE_DIR/sandbox` (default `~/.cache/trainhub`)."""
    base = os.environ.get("TRAINHUB_CACHE_DIR") or str(Path.home() / ".cache" / "trainhub")
    return Path(base).expanduser() / "sandbox"
