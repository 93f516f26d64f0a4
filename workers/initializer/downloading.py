"""HTTP(S) downloads for the initializer: bounded timeouts, a few retries on what may pass
(connection failures, timeouts, 408, 429 and 5xx), and a file that appears whole or not at
all. The initializer is a process of its own, so these calls block."""

from __future__ import annotations

import json
import logging
import os
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, TypeVar
from urllib.parse import unquote, urlparse

from workers.initializer.storage_uri import StorageUriError

log = logging.getLogger(__name__)
_T = TypeVar("_T")

TIMEOUT_S = 30.0
"""Per connect and per read: a silent server fails the try rather than hang it."""
ATTEMPTS = 3
BACKOFF_S = 0.5
"""Before the second try; doubled before each next one."""
_CHUNK = 1 << 20
_RETRIED_STATUSES = frozenset({408, 429, 500, 502, 503, 504})


@dataclass(frozen=True)
class Retries:
    timeout: float = TIMEOUT_S
    attempts: int = ATTEMPTS
    backoff: float = BACKOFF_S


def _request(url: str, headers: Mapping[str, str]) -> urllib.request.Request:
    return urllib.request.Request(url, headers={"User-Agent": "trainhub-initializer", **headers})


def _retrying(uri: str, url: str, retries: Retries, attempt_once: Callable[[], _T]) -> _T:
    """`attempt_once()`'s result, tried up to `retries.attempts` times; StorageUriError naming
    `uri` (and `url` where it differs) with the last failure."""
    where = "" if url == uri else f" ({url})"
    delay = retries.backoff
    for attempt in range(1, retries.attempts + 1):
        try:
            return attempt_once()
        except urllib.error.HTTPError as exc:
            reason = f"HTTP {exc.code} {exc.reason}"
            if exc.code not in _RETRIED_STATUSES:
                raise StorageUriError(f"cannot fetch {uri}{where}: {reason}") from None
        except (urllib.error.URLError, OSError) as exc:
            cause = exc.reason if isinstance(exc, urllib.error.URLError) else exc
            reason = str(cause) or type(cause).__name__
        if attempt < retries.attempts:
            log.warning("try %d of %s failed: %s; again in %gs", attempt, url, reason, delay)
            time.sleep(delay)
            delay *= 2
    raise StorageUriError(
        f"cannot fetch {uri}{where}: {reason} (after {retries.attempts} tries, "
        f"{retries.timeout:g}s timeout each)"
    )


def download_file(
    url: str,
    destination: Path,
    *,
    uri: str | None = None,
    headers: Mapping[str, str] | None = None,
    retries: Retries | None = None,
) -> Path:
    """GET `url` into the file `destination` (its directory made if missing)."""
    retries = retries or Retries()
    destination.parent.mkdir(parents=True, exist_ok=True)
    partial = destination.with_name(f".{destination.name}.part")

    def once() -> Path:
        with (
            urllib.request.urlopen(
                _request(url, headers or {}), timeout=retries.timeout
            ) as response,
            partial.open("wb") as out,
        ):
            while chunk := response.read(_CHUNK):
                out.write(chunk)
        os.replace(partial, destination)
        return destination

    try:
        placed = _retrying(uri or url, url, retries, once)
    finally:
        partial.unlink(missing_ok=True)
    return placed


def get_json(
    url: str,
    *,
    uri: str,
    headers: Mapping[str, str] | None = None,
    retries: Retries | None = None,
) -> Any:
    """GET `url` and decode its JSON body."""
    retries = retries or Retries()

    def once() -> Any:
        with urllib.request.urlopen(
            _request(url, {"Accept": "application/json", **(headers or {})}),
            timeout=retries.timeout,
        ) as response:
            return json.loads(response.read())

    try:
        return _retrying(uri, url, retries, once)
    except json.JSONDecodeError as exc:
        raise StorageUriError(f"cannot fetch {uri} ({url}): not JSON: {exc}") from None


def file_name(url: str) -> str:
    """The name a downloaded file keeps: the URL path's last segment (`download` if none)."""
    name = PurePosixPath(unquote(urlparse(url).path)).name
    return name if name not in ("", ".", "..") else "download"
