"""Shared fixtures: a live evogym host on loopback, policies written into its workspace."""
from __future__ import annotations

import json
import os
import tempfile
import textwrap
import urllib.error
import urllib.request
from pathlib import Path

import pytest

os.environ.setdefault("MUJOCO_GL", "egl")
# `ole` outside a project seeds a per-user registry under $XDG_DATA_HOME (ole.roots): tests, and the
# subprocesses they start, get their own, never the user's
os.environ["XDG_DATA_HOME"] = tempfile.mkdtemp(prefix="ole-tests-xdg-")


CONFORMANCE_ABSENT = "CONFORMANCE NOT CHECKED"
"""Prefix of every skip of a test that checks us against the reference or upstream's source."""


def conformance_absent(reason: str) -> None:
    """A conformance test whose reference (v0.1.0's source, upstream's, a Python >= 3.12 for it) is
    not on this machine: skipped, and listed loudly at the end of the run (`pytest_terminal_summary`);
    with OLE_REQUIRE_REFERENCE=1 (a machine that must check conformance) it fails instead."""
    if os.environ.get("OLE_REQUIRE_REFERENCE") == "1":
        pytest.fail(f"{CONFORMANCE_ABSENT}: {reason} (OLE_REQUIRE_REFERENCE=1)", pytrace=False)
    pytest.skip(f"{CONFORMANCE_ABSENT}: {reason}")


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    """Never a quiet skip for conformance: the tests that could not check us against the reference
    are named in a banner of their own, with what they need."""
    absent = [r for r in terminalreporter.stats.get("skipped", []) if CONFORMANCE_ABSENT in str(r.longrepr)]
    if not absent:
        return
    terminalreporter.section(f"{CONFORMANCE_ABSENT}: {len(absent)} test(s) could not run", sep="!", red=True,
                             bold=True)
    for report in absent:
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        terminalreporter.write_line(f"{report.nodeid}: {reason.split(CONFORMANCE_ABSENT + ': ', 1)[-1]}", red=True)
    terminalreporter.write_line("set EVOPOLICYGYM_REFERENCE_SRC / EVOPOLICYGYM_MAIN / EVOPOLICYGYM_MAIN_PYTHON, or put "
                                "shared/reference beside the checkout; OLE_REQUIRE_REFERENCE=1 makes this a failure")


class LiveHost:
    """A Host + HTTP server in this process; requests go over real loopback HTTP."""

    def __init__(self, host, server) -> None:
        self.host, self.server, self.url = host, server, server.url
        self.workspace = host.run.workspace
        self.run_dir = host.run.root

    def request(self, method: str, path: str, body=None, headers=None, raw: bytes | None = None, auth: bool = True):
        """One HTTP request with the run's credential (`auth=False`: without it)."""
        data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
        credential = {"Authorization": f"Bearer {self.server.credential.token}"} if auth else {}
        req = urllib.request.Request(self.url + path, data=data, method=method,
                                     headers={"Content-Type": "application/json", **credential, **(headers or {})})
        try:
            with urllib.request.urlopen(req, timeout=120) as resp:
                return resp.status, resp.read()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read()

    def get(self, path: str):
        status, data = self.request("GET", path)
        return status, (json.loads(data) if path == "/info" else data.decode())

    def submit(self, instances, **kw):
        status, data = self.request("POST", "/submit", {"env_instances": instances}, **kw)
        return status, json.loads(data)

    def write_policy(self, source: str, name: str = "policy.py") -> None:
        path = self.workspace / "system" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(source))

    def finish_and_wait(self, timeout: float = 300) -> dict:
        self.request("POST", "/finish", {})
        assert self.host.done.wait(timeout), "finalization did not finish"
        return json.loads((self.run_dir / "run.json").read_text())

    def close(self) -> None:
        self.server.stop()
        self.host.close()
        if self.host.judge.closed:
            self.host.done.wait(300)


@pytest.fixture
def live_host(tmp_path):
    """Factory: live_host(env="gym/acrobot", budget=8, prestart=True, **config overrides) -> LiveHost."""
    from evogym.host import Host, make_config
    from evogym.server import Server
    made = []

    def factory(env: str = "gym/acrobot", profile: str = "quick", run_dir: Path | None = None, **kw) -> LiveHost:
        prestart = kw.pop("prestart", True)
        config = make_config(env, profile, **kw)
        host = Host(run_dir or tmp_path / f"run{len(made)}", config, prestart=prestart)
        live = LiveHost(host, Server(host).start())
        made.append(live)
        return live

    yield factory
    for live in made:
        live.close()


ZERO_POLICY = """
class Policy:
    def __init__(self, obs_space, action_space, env_meta):
        self.meta = env_meta
    def reset(self, episode_index):
        pass
    def act(self, obs):
        return 0
"""
