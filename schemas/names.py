"""Kubernetes' DNS-1123 label, the name rule of namespaces, container names, port names (with
more rules of their own) and trainhub's cluster names, and the rules of label keys and
values: one definition for all of them."""

from __future__ import annotations

import re

DNS1123_LABEL_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
"""Lowercase letters, digits and '-', starting and ending with a letter or digit (the 63
characters at most are checked beside it)."""
DNS1123_LABEL = re.compile(DNS1123_LABEL_PATTERN)

LABEL_KEY_PATTERN = (
    r"(?:[A-Za-z0-9](?:[-A-Za-z0-9_.]*[A-Za-z0-9])?/)?[A-Za-z0-9](?:[-A-Za-z0-9_.]*[A-Za-z0-9])?"
)
"""A label key: an optional `prefix/` (a DNS subdomain) and a name (letters, digits, '-', '_',
'.', alphanumeric at both ends); lengths are checked beside it."""
LABEL_VALUE_PATTERN = r"(?:[A-Za-z0-9](?:[-A-Za-z0-9_.]*[A-Za-z0-9])?)?"
"""A label value: empty, or a label key's name (63 characters at most)."""
_LABEL_KEY = re.compile(LABEL_KEY_PATTERN)
_LABEL_VALUE = re.compile(LABEL_VALUE_PATTERN)


def label_problem(key: str, value: str) -> str | None:
    """Why `key=value` cannot be a Kubernetes label, or None."""
    prefix, _, name = key.rpartition("/")
    if not _LABEL_KEY.fullmatch(key) or len(name) > 63 or len(prefix) > 253:
        return f"label key {key!r} is not a Kubernetes label key"
    if not _LABEL_VALUE.fullmatch(value) or len(value) > 63:
        return f"label value {value!r} of {key} is not a Kubernetes label value"
    return None
