"""A minimal JSON-over-HTTPS client for a sandbox apiserver (stdlib only, no kubectl), used
to bootstrap the member clusters and to wait for them."""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.request
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from trainhub_sandbox.errors import SandboxError
from trainhub_sandbox.kube_model import MemberCluster


class ApiClient:
    """Minimal JSON-over-HTTPS client for one apiserver and one bearer token."""

    def __init__(self, server: str, token: str, ca_file: Path | None) -> None:
        self.server = server
        self._token = token
        self._ca_file = ca_file
        self._ssl: ssl.SSLContext | None = None

    def _context(self) -> ssl.SSLContext:
        """Built on first use: the apiserver writes its self-signed CA only once it starts."""
        if self._ssl is None:
            if self._ca_file is None:
                self._ssl = ssl.create_default_context()
                self._ssl.check_hostname = False
                self._ssl.verify_mode = ssl.CERT_NONE
            else:
                self._ssl = ssl.create_default_context(cafile=str(self._ca_file))
        return self._ssl

    @classmethod
    def for_cluster(cls, cluster: MemberCluster, *, worker: bool = False) -> ApiClient:
        token = cluster.worker_token if worker else cluster.admin_token
        return cls(cluster.server, token, cluster.ca_file)

    def request(
        self, method: str, path: str, body: Mapping[str, Any] | None = None
    ) -> tuple[int, dict[str, Any]]:
        """Send one request; return the status code and the decoded JSON (or {})."""
        data = json.dumps(body).encode() if body is not None else None
        content_type = "application/merge-patch+json" if method == "PATCH" else "application/json"
        headers = {"Authorization": f"Bearer {self._token}", "Accept": "application/json"}
        if data is not None:
            headers["Content-Type"] = content_type
        request = urllib.request.Request(self.server + path, data, headers, method=method)
        try:
            with urllib.request.urlopen(request, context=self._context(), timeout=10) as response:
                return response.status, _decode(response.read())
        except urllib.error.HTTPError as error:
            return error.code, _decode(error.read())

    def ensure(self, path: str, body: Mapping[str, Any]) -> None:
        """POST `body` to the collection `path`; an existing object is fine."""
        status, reply = self.request("POST", path, body)
        if status not in (200, 201, 409):
            name = body.get("metadata", {}).get("name")
            raise SandboxError(f"POST {self.server}{path} ({name}): {status} {reply}")


def _decode(raw: bytes) -> dict[str, Any]:
    try:
        decoded = json.loads(raw) if raw else {}
    except ValueError:
        return {"raw": raw.decode(errors="replace")}
    return decoded if isinstance(decoded, dict) else {"items": decoded}
