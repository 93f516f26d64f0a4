"""An HTTP server on 127.0.0.1 in a thread, answering from a table of paths: what a test
serves itself in place of a dataset server or the Hugging Face Hub inside a cluster."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass
class ServedFiles:
    files: dict[str, bytes]
    """URL path (with its query, if any) -> body; anything else is 404."""
    statuses: dict[str, list[int]] = field(default_factory=dict)
    """URL path -> statuses to answer first, one a request, before the body."""
    requests: list[tuple[str, str | None]] = field(default_factory=list)
    """(path, Authorization header) of every request, in order."""
    url: str = ""


@contextmanager
def serve_files(
    files: dict[str, bytes], statuses: dict[str, list[int]] | None = None
) -> Iterator[ServedFiles]:
    served = ServedFiles(dict(files), dict(statuses or {}))

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            served.requests.append((self.path, self.headers.get("Authorization")))
            pending = served.statuses.get(self.path)
            if pending:
                self.send_error(pending.pop(0))
                return
            body = served.files.get(self.path)
            if body is None:
                self.send_error(404)
                return
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    served.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield served
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def closed_port_url() -> str:
    """A URL on 127.0.0.1 where nothing listens: a host the network cannot reach, fast."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}"
