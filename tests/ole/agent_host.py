"""A real `evogym serve` subprocess for host-agent tests, plus an AgentContext around it.

The host runs with `--isolation none` (the sandbox has its own tests) and the `quick`
profile with a tiny budget, so a whole run including finalization takes seconds. Its token
is registered for this process (`remember_credential`), as `ole.runner` does.
"""
from __future__ import annotations

import contextlib
import dataclasses
import http.client
import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urlsplit

from ole.agents.base import AgentContext
from ole.agents.client import Credential, HostClient, credential_for, remember_credential
from ole.bundle import Bundle
from ole.loop_policy import LoopPolicy
from ole.trace import Iteration, RunCondition, TaskSpec

REPO = Path(__file__).resolve().parents[2]


@dataclass
class Served:
    proc: subprocess.Popen
    url: str
    workspace: Path
    run_dir: Path
    history: list[Iteration] = field(default_factory=list)

    def context(self, policy: LoopPolicy, log_dir: Path, *, host: str = "llm", model: str | None = None,
                lessons: Path | None = None, env: str = "gym/acrobot") -> AgentContext:
        return AgentContext(url=self.url, workspace=self.workspace, bundle=Bundle(name="t", loop_policy=policy),
                            task=TaskSpec(env=env), condition=RunCondition(host=host, model=model),
                            log_dir=log_dir, record=self.history.append, lessons_path=lessons)

    def close(self, *, score: bool = True) -> dict | None:
        """Finish the run if still open, wait for run.json (score=True) or kill the host."""
        if not score:
            self.proc.kill()
            self.proc.wait()
            return None
        HostClient(self.url).close_run()
        self.proc.wait(timeout=240)
        return json.loads((self.run_dir / "run.json").read_text())


def serve(run_dir: Path, *, budget: int, env: str = "gym/acrobot", max_per: int | None = None) -> Served:
    cmd = [sys.executable, "-m", "evogym.cli", "serve", "--env", env, "--run-dir", str(run_dir),
           "--profile", "quick", "--budget", str(budget), "--isolation", "none", "--jobs", "1"]
    if max_per is not None:
        cmd += ["--max-per-submit", str(max_per)]
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    line = proc.stdout.readline() if proc.stdout else ""
    if not line:
        proc.kill()
        raise RuntimeError(f"evogym serve did not start: {cmd}")
    meta = json.loads(line)
    # as ole.runner does: the run's token from the 0600 file the host named, for this process's clients
    remember_credential(meta["url"], Credential.from_file(meta["token_file"], meta["auth_header_file"]))
    return Served(proc, meta["url"], Path(meta["workspace"]), Path(meta["run_dir"]))


@contextlib.contextmanager
def refusing(served: Served, n: int) -> Iterator[Served]:
    """`served` behind a loopback proxy that refuses the first `n` submits as the host refuses a
    malformed one (HTTP 400 `budget_invalid`, nothing charged) and forwards everything else."""
    target = urlsplit(served.url)
    left = [n]

    class Proxy(BaseHTTPRequestHandler):
        def _forward(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            if self.command == "POST" and self.path.startswith("/submit") and left[0] > 0:
                left[0] -= 1
                out = json.dumps({"status": "budget_invalid", "error": {"message": "refused by the proxy"}}).encode()
                self._answer(400, {"Content-Type": "application/json"}, out)
                return
            conn = http.client.HTTPConnection(target.hostname, target.port, timeout=120)
            headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "connection")}
            conn.request(self.command, self.path, body=body or None, headers=headers)
            answer = conn.getresponse()
            self._answer(answer.status, dict(answer.getheaders()), answer.read())
            conn.close()

        def _answer(self, status: int, headers: dict, body: bytes) -> None:
            self.send_response(status)
            for k, v in headers.items():
                if k.lower() not in ("content-length", "connection", "transfer-encoding", "server", "date"):
                    self.send_header(k, v)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_POST = _forward

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Proxy)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    remember_credential(url, credential_for(served.url))
    try:
        yield dataclasses.replace(served, url=url)
    finally:
        server.shutdown()
        server.server_close()
