"""Retries and permanent errors of the kube client, against a local HTTP server that answers
the way an overloaded or strict apiserver does (429 with Retry-After, 503, 403), and against a
port where nothing listens. No sandbox needed: the real apiservers never throttle on cue."""

from __future__ import annotations

import asyncio
import json
import socket
import time
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from pathlib import Path

import pytest
import yaml
from aiohttp import web

from workers.backends.kube_client import (
    KubeApi,
    KubeError,
    KubeForbidden,
    KubeRetryPolicy,
    KubeUnavailable,
    connect,
    retry_after_seconds,
)

_FAST = KubeRetryPolicy(attempts=3, initial_wait=0.01, max_wait=0.05, max_retry_after=2.0)
_POD = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}}
Answer = Callable[[int], web.Response]
"""The server's reply to its n-th request (0-based)."""


def _status(code: int, reason: str, message: str, **headers: str) -> web.Response:
    body = {"kind": "Status", "status": "Failure", "reason": reason, "message": message}
    return web.json_response(body, status=code, headers=headers)


def _kubeconfig(path: Path, port: int) -> Path:
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "scripted", "cluster": {"server": f"http://127.0.0.1:{port}"}}],
        "users": [{"name": "tester", "user": {"token": "t"}}],
        "contexts": [{"name": "scripted", "context": {"cluster": "scripted", "user": "tester"}}],
        "current-context": "scripted",
    }
    path.write_text(yaml.safe_dump(config))
    return path


class ScriptedServer:
    def __init__(self) -> None:
        self.answer: Answer = lambda n: web.json_response(_POD, status=201)
        self.drop: set[int] = set()
        """Requests (0-based) whose connection is closed without an answer."""
        self.requests = 0
        self.port = 0

    async def handle(self, request: web.Request) -> web.Response:
        n, self.requests = self.requests, self.requests + 1
        if n in self.drop and request.transport is not None:
            request.transport.close()
        return self.answer(n)


@pytest.fixture
async def server() -> AsyncIterator[ScriptedServer]:
    scripted = ScriptedServer()
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", scripted.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    scripted.port = sock.getsockname()[1]
    await web.SockSite(runner, sock).start()
    try:
        yield scripted
    finally:
        await runner.cleanup()


async def _api(tmp_path: Path, port: int, retry: KubeRetryPolicy = _FAST) -> KubeApi:
    client, identity = await connect(_kubeconfig(tmp_path / "kubeconfig", port), "scripted")
    return KubeApi(client, cluster="scripted", identity=identity, retry=retry)


async def _create_pod(api: KubeApi) -> dict[str, object]:
    return await api.call(
        "create", "pods", "default", api.core.create_namespaced_pod, "default", _POD
    )


async def test_throttling_waits_as_long_as_retry_after_says(
    tmp_path: Path, server: ScriptedServer
) -> None:
    server.answer = lambda n: (
        _status(429, "TooManyRequests", "slow down", **{"Retry-After": "1"})
        if n == 0
        else web.json_response(_POD, status=201)
    )
    api = await _api(tmp_path, server.port)
    try:
        started = time.monotonic()
        assert (await _create_pod(api))["metadata"] == {"name": "p"}
        assert 0.9 <= time.monotonic() - started < 1.9
        assert (api.requests, api.retries) == (2, 1)
    finally:
        await api.close()


async def test_server_errors_are_retried_a_bounded_number_of_times(
    tmp_path: Path, server: ScriptedServer
) -> None:
    server.answer = lambda n: _status(503, "ServiceUnavailable", "etcd is busy")
    api = await _api(tmp_path, server.port)
    try:
        with pytest.raises(KubeUnavailable, match="503 ServiceUnavailable: etcd is busy"):
            await _create_pod(api)
        assert server.requests == _FAST.attempts
    finally:
        await api.close()


async def test_a_retry_after_beyond_the_cap_is_capped(
    tmp_path: Path, server: ScriptedServer
) -> None:
    server.answer = lambda n: (
        _status(503, "ServiceUnavailable", "later", **{"Retry-After": "3600"})
        if n == 0
        else web.json_response(_POD, status=201)
    )
    capped = KubeRetryPolicy(attempts=2, max_retry_after=0.2)
    api = await _api(tmp_path, server.port, capped)
    try:
        started = time.monotonic()
        await _create_pod(api)
        assert 0.2 <= time.monotonic() - started < 1.0
    finally:
        await api.close()


async def test_forbidden_is_permanent_and_names_verb_resource_and_namespace(
    tmp_path: Path, server: ScriptedServer
) -> None:
    message = 'pods is forbidden: User "robot" cannot create resource "pods" in "kube-system"'
    server.answer = lambda n: _status(403, "Forbidden", message)
    api = await _api(tmp_path, server.port)
    try:
        with pytest.raises(KubeForbidden) as raised:
            await api.call(
                "create", "pods", "kube-system", api.core.create_namespaced_pod, "kube-system", _POD
            )
        assert str(raised.value) == f"robot may not create pods in namespace kube-system: {message}"
        assert server.requests == 1
    finally:
        await api.close()


async def test_a_403_just_after_an_outage_is_retried_as_the_apiserver_warms_up(
    tmp_path: Path, server: ScriptedServer
) -> None:
    """A restarting apiserver answers before its RBAC authorizer has loaded the roles."""
    warming = 'nodes is forbidden: User "robot" cannot list resource "nodes"'
    server.answer = lambda n: (
        _status(503, "ServiceUnavailable", "starting")
        if n == 0
        else _status(403, "Forbidden", warming)
        if n in (1, 2)
        else web.json_response({"items": []})
    )
    policy = KubeRetryPolicy(attempts=5, initial_wait=0.01, max_wait=0.05)
    api = await _api(tmp_path, server.port, policy)
    try:
        assert await api.call("list", "nodes", None, api.core.list_node) == {"items": []}
        assert (server.requests, api.retries) == (4, 3)
    finally:
        await api.close()


async def test_a_403_that_outlasts_the_retries_after_an_outage_is_transient_then_permanent(
    tmp_path: Path, server: ScriptedServer
) -> None:
    server.answer = lambda n: (
        _status(503, "ServiceUnavailable", "starting")
        if n == 0
        else _status(403, "Forbidden", "no")
    )
    policy = KubeRetryPolicy(attempts=3, initial_wait=0.01, max_wait=0.05, forbidden_grace=0.5)
    api = await _api(tmp_path, server.port, policy)
    try:
        with pytest.raises(KubeUnavailable, match=r"^tester may not list nodes") as raised:
            await api.call("list", "nodes", None, api.core.list_node)
        assert "may still be loading its authorizer" in str(raised.value)
        assert raised.value.status == 403
        await asyncio.sleep(0.5)  # past the grace: a refusal is a refusal again
        before = server.requests
        with pytest.raises(KubeForbidden, match=r"^tester may not list nodes"):
            await api.call("list", "nodes", None, api.core.list_node)
        assert server.requests == before + 1
    finally:
        await api.close()


async def test_a_dropped_connection_starts_the_grace_too(
    tmp_path: Path, server: ScriptedServer
) -> None:
    server.drop = {0}
    server.answer = lambda n: (
        _status(403, "Forbidden", "no") if n == 1 else web.json_response(_POD, status=201)
    )
    api = await _api(tmp_path, server.port)
    try:
        assert (await _create_pod(api))["metadata"] == {"name": "p"}
        assert (server.requests, api.retries) == (3, 2)
    finally:
        await api.close()


async def test_forbidden_without_a_user_in_the_message_names_the_kubeconfig_user(
    tmp_path: Path, server: ScriptedServer
) -> None:
    server.answer = lambda n: _status(403, "Forbidden", "no")
    api = await _api(tmp_path, server.port)
    try:
        with pytest.raises(KubeForbidden, match=r"^tester may not list nodes"):
            await api.call("list", "nodes", None, api.core.list_node)
    finally:
        await api.close()


async def test_a_dead_endpoint_is_retried_then_unavailable(tmp_path: Path) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # closed again: nothing listens there
    api = await _api(tmp_path, port)
    try:
        with pytest.raises(KubeUnavailable, match="create pods in namespace default"):
            await _create_pod(api)
        assert (api.requests, api.retries) == (_FAST.attempts, _FAST.attempts - 1)
    finally:
        await api.close()


def test_retry_after_reads_seconds_and_http_dates() -> None:
    assert retry_after_seconds("7") == 7.0
    assert retry_after_seconds(None) is None
    assert retry_after_seconds("soon") is None
    later = format_datetime(datetime.now(UTC) + timedelta(seconds=30), usegmt=True)
    assert 25 <= (retry_after_seconds(later) or 0) <= 30
    assert json.dumps(retry_after_seconds("-3")) == "0.0"


async def test_an_unknown_context_is_a_clear_error(tmp_path: Path) -> None:
    kubeconfig = _kubeconfig(tmp_path / "kubeconfig", 1)
    with pytest.raises(KubeError, match=r"cannot load context 'elsewhere' from kubeconfig"):
        await connect(kubeconfig, "elsewhere")


async def test_a_proxy_from_the_environment_is_looked_up_once_and_used(
    tmp_path: Path, server: ScriptedServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The apiserver's name resolves nowhere: only the proxy (the scripted server) can answer.
    config = yaml.safe_load(_kubeconfig(tmp_path / "kubeconfig", server.port).read_text())
    config["clusters"][0]["cluster"]["server"] = "http://apiserver.invalid:6443"
    (tmp_path / "kubeconfig").write_text(yaml.safe_dump(config))
    monkeypatch.setenv("http_proxy", f"http://127.0.0.1:{server.port}")
    monkeypatch.delenv("no_proxy", raising=False)
    monkeypatch.delenv("NO_PROXY", raising=False)
    client, identity = await connect(tmp_path / "kubeconfig", "scripted")
    api = KubeApi(client, cluster="scripted", identity=identity, retry=_FAST)
    try:
        rest = client.rest_client
        assert rest.proxy == f"http://127.0.0.1:{server.port}"
        assert rest.pool_manager.trust_env is False  # no lookup per request
        await _create_pod(api)
        assert server.requests == 1
    finally:
        await api.close()


async def test_no_proxy_for_an_apiserver_that_no_proxy_names(
    tmp_path: Path, server: ScriptedServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("http_proxy", "http://proxy.invalid:3128")
    monkeypatch.setenv("no_proxy", "127.0.0.1")
    api = await _api(tmp_path, server.port)
    try:
        assert not api.api_client.rest_client.proxy
        await _create_pod(api)
        assert server.requests == 1
    finally:
        await api.close()
