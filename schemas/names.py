"""Kubernetes' DNS-1123 label, the name rule of namespaces, container names, port names (with
more rules of their own) and trainhub's cluster names: one definition for all of them."""

from __future__ import annotations

import re

DNS1123_LABEL_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
"""Lowercase letters, digits and '-', starting and ending with a letter or digit (the 63
characters at most are checked beside it)."""
DNS1123_LABEL = re.compile(DNS1123_LABEL_PATTERN)
