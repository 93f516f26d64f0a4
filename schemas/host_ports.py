"""Host ports a pod holds on its node, as kube-scheduler counts them (its NodePorts filter):
no two pods on one node may hold the same protocol and port.

A port is held when it has a `hostPort`; on a `hostNetwork: true` pod the apiserver sets
`hostPort` to `containerPort` where it is missing, so there every port is held. Only
containers and sidecars (init containers with restartPolicy Always) count: the other init
containers have ended before the pod runs. Ports are written `PROTOCOL/PORT` (`TCP/23456`).
The `hostIP` a port may bind is not told apart: two pods binding one port on different
addresses of a node may share it, trainhub keeps them apart (rare, and safe).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

DEFAULT_PROTOCOL = "TCP"


PROTOCOL = re.compile(r"[A-Za-z0-9]{1,16}")
"""What a protocol in a port key may be written as (upper-cased in the key)."""


def port_key(protocol: object, port: int) -> str:
    # The apiserver takes TCP, UDP and SCTP; anything else here is a document it would
    # refuse, so keeping it apart from TCP matters less than writing a valid key.
    name = protocol if isinstance(protocol, str) and PROTOCOL.fullmatch(protocol) else None
    return f"{(name or DEFAULT_PROTOCOL).upper()}/{port}"


def _port_number(value: object) -> int | None:
    # JSON documents may carry ints as floats or strings; anything else holds nothing.
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float) and value == int(value):
        number = int(value)
    elif isinstance(value, str) and value.isdigit():
        number = int(value)
    else:
        return None
    return number if 0 < number <= 65535 else None


def _running_containers(spec: Mapping[str, Any]) -> Iterable[Mapping[str, Any]]:
    for container in spec.get("initContainers") or ():
        if isinstance(container, Mapping) and container.get("restartPolicy") == "Always":
            yield container
    for container in spec.get("containers") or ():
        if isinstance(container, Mapping):
            yield container


def pod_host_ports(spec: Mapping[str, Any]) -> frozenset[str]:
    """The host ports of a pod spec written as the apiserver takes it (a dict)."""
    host_network = spec.get("hostNetwork") is True
    held: set[str] = set()
    for container in _running_containers(spec):
        for port in container.get("ports") or ():
            if not isinstance(port, Mapping):
                continue
            number = _port_number(port.get("hostPort"))
            if number is None and host_network:
                number = _port_number(port.get("containerPort"))
            if number is not None:
                held.add(port_key(port.get("protocol"), number))
    return frozenset(held)
