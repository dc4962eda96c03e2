"""A loopback OpenAI-compatible chat server for tests: scripted failures, delays and answers.

Each POST to `/v1/chat/completions` pops the next step of the script:
`("error", status)` answers with that HTTP status, `("slow", seconds, text)` sleeps
before answering, `("ok", text)` answers at once. When the script is empty it answers
`("ok", default_text)`. Every request body is kept in `requests` for assertions.
"""
from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


def _chat_body(text: str, model: str) -> dict[str, Any]:
    return {
        "id": "chatcmpl-stub", "object": "chat.completion", "created": 0, "model": model,
        "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": text}}],
        "usage": {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18},
    }


class StubServer:
    """Context manager running the stub on 127.0.0.1 with an ephemeral port."""

    def __init__(self, script: list[tuple[Any, ...]] | None = None, default_text: str = "stub answer") -> None:
        self.script = list(script or [])
        self.default_text = default_text
        self.requests: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802 (http.server naming)
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                with stub._lock:
                    stub.requests.append(body)
                    step = stub.script.pop(0) if stub.script else ("ok", stub.default_text)
                if step[0] == "error":
                    self._send(step[1], {"error": {"message": "stub failure", "type": "server_error"}})
                    return
                if step[0] == "raw":  # a 200 answer with exactly this body (what a broken server sends)
                    self._send(200, step[1])
                    return
                if step[0] == "slow":
                    time.sleep(step[1])
                    step = ("ok", step[2])
                self._send(200, _chat_body(step[1], body.get("model", "stub")))

            def _send(self, status: int, payload: dict[str, Any]) -> None:
                data = json.dumps(payload).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client timed out and went away: that is the point of a slow step

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def api_base(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def __enter__(self) -> "StubServer":
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.server.shutdown()
        self.server.server_close()
