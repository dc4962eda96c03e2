"""`ole report --serve`: the report folder over HTTP on loopback only.

The pages need no server (they open from disk); serving is for a browser on another
tab of a remote shell through an SSH tunnel. The stdlib file server is enough for a
folder of static pages; it binds 127.0.0.1 only and serves nothing outside the folder.
"""
from __future__ import annotations

import functools
import threading
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

LOOPBACK = "127.0.0.1"


class _Quiet(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args) -> None:  # noqa: A002 - the stdlib's signature
        """No per-request lines on stderr: the CLI prints the URL once."""


class ReportServer:
    """A loopback HTTP server for one report folder; `start()` returns at once, `stop()` ends it."""

    def __init__(self, folder: Path, port: int = 0) -> None:
        handler = functools.partial(_Quiet, directory=str(folder))
        self.httpd = ThreadingHTTPServer((LOOPBACK, port), handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, name="ole-report-http", daemon=True)

    @property
    def url(self) -> str:
        host, port = self.httpd.server_address[:2]
        name = host.decode() if isinstance(host, bytes) else host  # an AF_INET address: always str here
        return f"http://{name}:{port}/index.html"

    def start(self) -> "ReportServer":
        self.thread.start()
        return self

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(timeout=5)
