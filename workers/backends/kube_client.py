"""One cluster's apiserver as the `kube` backend sees it: a kubernetes_asyncio client built from
a kubeconfig context, calls that return plain JSON, bounded retries and permanent errors."""

from __future__ import annotations

import asyncio
import json
import logging
import re
import ssl
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from pathlib import Path
from typing import Any, TypeVar

import aiohttp
from aiohttp.helpers import get_env_proxy_for_url
from kubernetes_asyncio import client as k8s
from kubernetes_asyncio import config as k8s_config
from yarl import URL

from bus.retry import RetryPolicy, retry_transient
from workers.backends.base import BackendError
from workers.metrics import KUBE_API, KubeApiMetrics

log = logging.getLogger(__name__)

_Answer = TypeVar("_Answer")

# The apiserver names the authenticated user in its 403 messages: `User "x" cannot ...`.
_USER_IN_MESSAGE = re.compile(r'User "([^"]+)"')
# Connection-level failures worth another try; HTTP statuses are classified separately.
CONNECTION_ERRORS: tuple[type[BaseException], ...] = (
    aiohttp.ClientConnectionError,
    aiohttp.ClientPayloadError,
    TimeoutError,
)


class KubeError(BackendError):
    """A request the apiserver refused for good (or that kept failing past the retries)."""

    def __init__(self, message: str, status: int = 0, reason: str = "") -> None:
        super().__init__(message)
        self.status = status
        self.reason = reason


class KubeForbidden(KubeError):
    """403: the identity lacks the RBAC permission; retrying cannot help (unless the apiserver
    is just back from an outage: see `KubeRetryPolicy.forbidden_grace`)."""


class KubeNotFound(KubeError):
    """404: the object (or the namespace) does not exist."""


class KubeConflict(KubeError):
    """409: the object exists already (on create) or changed underneath (on update)."""


class KubeGone(KubeError):
    """410: a watch's resourceVersion is too old; list again."""


class KubeUnavailable(KubeError):
    """429, 5xx or a connection failure: retried with backoff, raised once retries run out."""

    transient = True

    def __init__(
        self, message: str, status: int = 0, reason: str = "", retry_after: float | None = None
    ) -> None:
        super().__init__(message, status, reason)
        self.retry_after = retry_after


@dataclass(frozen=True)
class KubeRetryPolicy(RetryPolicy):
    """The house's retry policy (`bus.retry`) with the apiserver's own limits: six tries in
    all, and up to one initial wait of jitter."""

    attempts: int = 6
    jitter: float = 1.0
    max_retry_after: float = 30.0
    """The longest Retry-After we honour; a server asking for more gets this."""
    request_timeout: float = 30.0
    forbidden_grace: float = 10.0
    """Seconds after a connection failure or a 5xx during which a 403 counts as transient."""


async def connect(kubeconfig: Path, context: str | None) -> tuple[Any, str]:
    """A kubernetes_asyncio ApiClient for one kubeconfig context (never the global default),
    and the context's user name (for messages until the apiserver names us itself)."""
    configuration = k8s.Configuration()
    try:
        loader = await k8s_config.load_kube_config(
            config_file=str(kubeconfig),
            context=context,
            client_configuration=configuration,
            persist_config=False,
        )
    except (OSError, ValueError, k8s_config.ConfigException) as exc:
        which = f"context {context!r}" if context else "the current context"
        raise KubeError(f"cannot load {which} from kubeconfig {kubeconfig}: {exc}") from exc
    current = loader.current_context or {}
    user = str(current.get("context", {}).get("user") or "this worker's identity")
    api_client = k8s.ApiClient(configuration)
    try:
        await _look_up_environment_once(api_client.rest_client, configuration)
    except BaseException:
        await api_client.close()
        raise
    return api_client, user


async def _look_up_environment_once(rest: Any, configuration: Any) -> None:
    """kubernetes_asyncio's aiohttp session trusts the environment, so aiohttp looks up the
    proxy variables and ~/.netrc again for every request, in two thread-pool round trips: a
    cost that shows once pods are created by the hundred. For the one apiserver a client
    talks to the answer never changes: look it up here, pass it with every request (as
    kubernetes_asyncio does a kubeconfig's proxy-url), and give the client a session that
    looks nothing up (built as kubernetes_asyncio builds its own)."""
    if not rest.proxy:
        try:
            proxy, auth = await asyncio.to_thread(get_env_proxy_for_url, URL(configuration.host))
        except LookupError:
            pass  # no proxy for the apiserver (none set, or no_proxy names it)
        else:
            rest.proxy = str(proxy)
            if auth is not None:
                rest.proxy_headers = {
                    **(rest.proxy_headers or {}),
                    "Proxy-Authorization": auth.encode(),
                }
    context = await asyncio.to_thread(_ssl_context, configuration)
    trusting = rest.pool_manager
    rest.pool_manager = aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=configuration.connection_pool_maxsize, ssl=context),
        trust_env=False,
        # As kubernetes_asyncio: watch events of large objects outgrow aiohttp's default.
        read_bufsize=2**21,
    )
    await trusting.close()


def _ssl_context(configuration: Any) -> ssl.SSLContext:
    """The TLS settings of a kubeconfig context, as kubernetes_asyncio's RESTClientObject
    makes them (reads the CA and client certificate files)."""
    context = ssl.create_default_context(cafile=configuration.ssl_ca_cert)
    if configuration.cert_file:
        context.load_cert_chain(configuration.cert_file, keyfile=configuration.key_file)
    if not configuration.verify_ssl:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    if configuration.disable_strict_ssl_verification:
        context.verify_flags &= ~ssl.VERIFY_X509_STRICT
    return context


def retry_after_seconds(value: str | None) -> float | None:
    """Retry-After as seconds: delta-seconds or an HTTP date; None when absent or unreadable."""
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - datetime.now(UTC)).total_seconds())


def status_message(body: bytes) -> tuple[str, str]:
    """(reason, message) of a Kubernetes Status body, or the raw text when it is not one."""
    try:
        status = json.loads(body) if body else {}
    except ValueError:
        return "", body.decode(errors="replace")[:300]
    if not isinstance(status, dict):
        return "", str(status)[:300]
    return str(status.get("reason") or ""), str(status.get("message") or "")


def _target(resource: str, namespace: str | None) -> str:
    return f"{resource} in namespace {namespace}" if namespace else f"{resource} (all namespaces)"


def classify(
    status: int,
    body: bytes,
    *,
    who: str,
    verb: str,
    resource: str,
    namespace: str | None,
    retry_after: str | None = None,
) -> KubeError:
    """The error for a non-2xx answer, with a message that names who did what where."""
    reason, message = status_message(body)
    target = _target(resource, namespace)
    if status == 403:
        named = _USER_IN_MESSAGE.search(message)
        who = named.group(1) if named else who
        return KubeForbidden(f"{who} may not {verb} {target}: {message}", status, reason)
    text = f"{verb} {target}: {status} {reason or 'error'}: {message}".rstrip(": ")
    if status == 404:
        return KubeNotFound(text, status, reason)
    if status == 409:
        return KubeConflict(text, status, reason)
    if status == 410:
        return KubeGone(text, status, reason)
    if status == 429 or status >= 500:
        return KubeUnavailable(text, status, reason, retry_after_seconds(retry_after))
    return KubeError(text, status, reason)


class KubeApi:
    """CoreV1, RBAC, scheduling and custom-object (PodGroup) calls that answer JSON dicts,
    retried on throttling, outages and lost connections.

    Every call names its verb, resource and namespace so that a refusal explains itself.
    """

    def __init__(
        self,
        api_client: Any,
        *,
        cluster: str,
        identity: str = "this worker's identity",
        retry: KubeRetryPolicy | None = None,
        metrics: KubeApiMetrics | None = None,
    ) -> None:
        self.api_client = api_client
        self.core: Any = k8s.CoreV1Api(api_client)
        self.rbac: Any = k8s.RbacAuthorizationV1Api(api_client)
        self.custom: Any = k8s.CustomObjectsApi(api_client)
        self.scheduling: Any = k8s.SchedulingV1Api(api_client)
        self.cluster = cluster
        self.identity = identity
        self.retry = retry or KubeRetryPolicy()
        self.requests = 0
        """Requests sent, retries included (benchmarks report API requests per job)."""
        self.retries = 0
        self._outage_at: float | None = None
        """Monotonic time of the last connection failure or 5xx answer."""
        self.metrics = metrics or KUBE_API
        self.metrics.retries.labels(cluster)  # from zero, so that increase() sees the first

    async def close(self) -> None:
        await self.api_client.close()

    async def call(
        self,
        verb: str,
        resource: str,
        namespace: str | None,
        method: Callable[..., Awaitable[Any]],
        *args: Any,
        **kwargs: Any,
    ) -> dict[str, Any]:
        """Call an API method; return its JSON body or raise a KubeError."""
        return await self._retried(self.once, verb, resource, namespace, method, *args, **kwargs)

    async def send(
        self,
        verb: str,
        resource: str,
        namespace: str | None,
        method: Callable[..., Awaitable[Any]],
        *args: Any,
        **kwargs: Any,
    ) -> None:
        """Like `call`, for requests whose answer is not needed (creates): its body is read
        but not decoded (a pod comes back whole, and decoding it costs more than sending)."""
        await self._retried(self._body, verb, resource, namespace, method, *args, **kwargs)

    async def _retried(
        self,
        request: Callable[..., Awaitable[_Answer]],
        verb: str,
        resource: str,
        namespace: str | None,
        method: Callable[..., Awaitable[Any]],
        *args: Any,
        **kwargs: Any,
    ) -> _Answer:
        """`request`, tried again after a KubeUnavailable up to `retry.attempts` in all."""
        return await retry_transient(
            lambda: request(verb, resource, namespace, method, *args, **kwargs),
            self.retry,
            transient=lambda error: isinstance(error, KubeUnavailable),
            wait=self._wait,
            on_retry=self._note_retry,
        )

    async def once(
        self,
        verb: str,
        resource: str,
        namespace: str | None,
        method: Callable[..., Awaitable[Any]],
        *args: Any,
        **kwargs: Any,
    ) -> dict[str, Any]:
        """One request, no retry."""
        body = await self._body(verb, resource, namespace, method, *args, **kwargs)
        try:
            decoded = json.loads(body) if body else {}
        except ValueError:
            return {"text": body.decode(errors="replace")}
        return decoded if isinstance(decoded, dict) else {"items": decoded}

    async def text(
        self,
        verb: str,
        resource: str,
        namespace: str | None,
        method: Callable[..., Awaitable[Any]],
        *args: Any,
        **kwargs: Any,
    ) -> str:
        """One request whose answer is text (logs), no retry."""
        body = await self._body(verb, resource, namespace, method, *args, **kwargs)
        return body.decode(errors="replace")

    async def _body(
        self,
        verb: str,
        resource: str,
        namespace: str | None,
        method: Callable[..., Awaitable[Any]],
        *args: Any,
        **kwargs: Any,
    ) -> bytes:
        response = await self.open(verb, resource, namespace, method, *args, **kwargs)
        try:
            return await response.read()
        except CONNECTION_ERRORS as exc:
            self.note_outage()
            raise self._unavailable(verb, resource, namespace, exc) from exc
        finally:
            response.release()

    async def open(
        self,
        verb: str,
        resource: str,
        namespace: str | None,
        method: Callable[..., Awaitable[Any]],
        *args: Any,
        **kwargs: Any,
    ) -> aiohttp.ClientResponse:
        """Send one request and return the open 2xx response (for streams); raise otherwise."""
        kwargs.setdefault("_request_timeout", self.retry.request_timeout)
        self.requests += 1
        started = time.monotonic()
        try:
            response: aiohttp.ClientResponse = await method(*args, _preload_content=False, **kwargs)
        except CONNECTION_ERRORS as exc:
            self._observe(verb, resource, "error", started)
            self.note_outage()
            raise self._unavailable(verb, resource, namespace, exc) from exc
        self._observe(verb, resource, str(response.status), started)
        if 200 <= response.status < 300:
            return response
        try:
            body = await response.read()
        except CONNECTION_ERRORS:
            body = b""
        finally:
            response.release()
        error = classify(
            response.status,
            body,
            who=self.identity,
            verb=verb,
            resource=resource,
            namespace=namespace,
            retry_after=response.headers.get("Retry-After"),
        )
        if response.status >= 500:
            self.note_outage()
        elif isinstance(error, KubeForbidden) and self._recovering():
            raise self._not_ready_yet(error) from error
        raise error

    def note_outage(self) -> None:
        """The apiserver went away (or failed): 403s for a while may be its restart's."""
        self._outage_at = time.monotonic()

    def _recovering(self) -> bool:
        since = self._outage_at
        return since is not None and time.monotonic() - since < self.retry.forbidden_grace

    def _not_ready_yet(self, forbidden: KubeForbidden) -> KubeUnavailable:
        # A restarting kube-apiserver accepts requests before its RBAC authorizer has read
        # the roles, and until then it refuses everything with a 403. Only an apiserver that
        # was just away can be in that state, so a 403 counts as transient only for a short
        # grace after an outage: a genuine refusal from a healthy apiserver still fails at
        # once (one request, a clear reason) instead of after a round of retries, and one
        # right after an outage fails once the grace is over.
        grace = self.retry.forbidden_grace
        return KubeUnavailable(
            f"{forbidden} (within {grace:g}s of an outage: the apiserver may still be loading "
            "its authorizer)",
            forbidden.status,
            forbidden.reason,
        )

    def _observe(self, verb: str, resource: str, code: str, started: float) -> None:
        self.metrics.observe(self.cluster, verb, resource, code, time.monotonic() - started)

    def _unavailable(
        self, verb: str, resource: str, namespace: str | None, exc: BaseException
    ) -> KubeUnavailable:
        detail = str(exc) or type(exc).__name__
        return KubeUnavailable(f"{verb} {_target(resource, namespace)}: {detail}")

    def _wait(self, error: BaseException, failures: int) -> float:
        """The pause after the `failures`-th failure: what Retry-After asks (bounded), else
        the policy's backoff."""
        if isinstance(error, KubeUnavailable) and error.retry_after is not None:
            return min(error.retry_after, self.retry.max_retry_after)
        return self.retry.wait(failures)

    def _note_retry(self, error: BaseException, attempt: int, wait: float) -> None:
        self.retries += 1
        self.metrics.retries.labels(self.cluster).inc()
        log.warning(
            "retrying in %.2fs (attempt %d): %s",
            wait,
            attempt,
            error,
            extra={"cluster": self.cluster},
        )
