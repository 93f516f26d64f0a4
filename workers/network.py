"""How pods find each other: host names and ports as a backend makes them reachable."""

from __future__ import annotations

import socket
from typing import Protocol


class Network(Protocol):
    def host(self, service: str, namespace: str, *, qualified: bool = False) -> str:
        """The address of a replica's headless service."""

    def port(self, service: str, port: int) -> int:
        """The port on which that service's `port` is reachable."""


class ClusterNetwork:
    """Kubernetes DNS: services resolve by name, ports are what the pods declare."""

    def host(self, service: str, namespace: str, *, qualified: bool = False) -> str:
        return f"{service}.{namespace}.svc" if qualified else service

    def port(self, service: str, port: int) -> int:
        return port


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class LoopbackNetwork:
    """Every service is 127.0.0.1; each (service, port) gets its own free local port, so two
    jobs using the same default port never collide on one machine."""

    def __init__(self) -> None:
        self.ports: dict[tuple[str, int], int] = {}

    def host(self, service: str, namespace: str, *, qualified: bool = False) -> str:
        return "127.0.0.1"

    def port(self, service: str, port: int) -> int:
        key = (service, port)
        if key not in self.ports:
            self.ports[key] = free_port()
        return self.ports[key]
