"""The command agent's containment: the environment it gets and the sandbox it runs in.

A command agent is a foreign program (a coding assistant, a script) working one run. Issue 31
found one, running as the same user with nothing around it, reading another run's token
(`/proc/<pid>/environ`, `control/token`) and writing the registry that ran it (it found
`--root` in its parent's command line and recorded a registration and a release). So:

- **Environment allowlist** (both isolations, as EvoPolicyGym main builds its agents'): the
  agent gets the protocol variables of its own run, its brief, a fixed PATH/HOME/TMPDIR, the
  locale and terminal variables (`INHERITED`), and only the further names the operator lists
  (`AgentSandbox.env`: an API key for a model provider). Nothing else of OLE's environment
  (a harness's `EVOPOLICYGYM_SESSION_SOCKET`/`TASK_FILE` leaked into HTTP runs' agents).
- **bubblewrap** (`isolation="bwrap"`, the default): its own user, pid, mount, network, ipc,
  uts and cgroup namespaces, every capability dropped, dying with OLE. Inside it is the user
  `agent` (`AGENT_UID`) of its own user namespace; it sees a fresh `/proc` with only its own
  processes, a read-only system (`/usr`, the interpreter, OLE's virtual environment without
  OLE's source, a few public `/etc` files), private size-capped `/tmp` and home, its workspace
  read-write (its `feedback/`, `AGENTS.md`, `TASK.md` read-only), its brief, its run's token
  files, the lessons file, the regular files its command line names and the paths the
  operator grants (`AgentSandbox.read_only`), read-only. No other run's folder, no registry,
  no other process. Its network namespace is empty but for its run's API: the host's port
  appears on the sandbox's own loopback at the URL the agent was given, forwarded through
  a Unix socket (`ApiBridge`, `agent_init.py`) to that host and nothing else; an
  agent-session/v3 socket is bound in by itself. `AgentSandbox.network=True` (the operator's
  explicit choice, for a model provider) shares the machine's network instead.
- `isolation="none"` (explicit, for machines without bubblewrap) keeps the allowlist and the
  process-group kill, nothing else.

What the sandbox does not do is documented in docs/sandbox.md ("The command agent").
"""
from __future__ import annotations

import os
import shutil
import socket
import sys
import tempfile
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from evogym.sandbox.isolation import ISOLATIONS, Isolation
from ole.agents.agent_init import pump

AgentIsolation = Isolation
AGENT_ISOLATIONS: tuple[AgentIsolation, ...] = ISOLATIONS
"""How a command agent runs: in bubblewrap (the default), or as a plain process (explicit only);
the same words as a host's policy sandbox (`evogym.sandbox.isolation.Isolation`)."""
AGENT_UID = 1000
"""The agent's uid and gid inside its user namespace (mapped to the user running OLE)."""
AGENT_USER = "agent"
AGENT_HOME = "/home/agent"
"""The agent's private home inside the sandbox (a tmpfs of `SCRATCH_BYTES`)."""
SCRATCH_BYTES = 1 << 30
"""Size of each of the sandbox's private tmpfs mounts (`/tmp`, the home)."""
API_SOCKET = "/run/ole/api.sock"
"""Where the bridge's Unix socket appears inside the sandbox."""
INIT_PATH = "/opt/ole/agent_init.py"
"""Where `agent_init.py` appears inside the sandbox."""
INHERITED = ("LANG", "LC_ALL", "LC_CTYPE", "LC_MESSAGES", "TERM", "TZ", "COLORTERM", "NO_COLOR")
"""Variables of OLE's environment every agent gets (locale and terminal, nothing secret)."""
INHERITED_UNCONTAINED = ("HOME", "USER", "LOGNAME", "SHELL")
"""...and, under `isolation="none"`, the user's identity (its tools read their config there)."""
PUBLIC_ETC = ("resolv.conf", "nsswitch.conf", "host.conf", "gai.conf", "services", "protocols", "localtime",
              "mime.types", "ssl", "ca-certificates", "ca-certificates.conf", "pki")
"""Entries of the machine's `/etc` the sandbox sees read-only (name resolution, TLS roots, time
zone); `passwd`, `group` and `hosts` are the sandbox's own."""
ROOT_LINKS = ("bin", "sbin", "lib", "lib64", "lib32", "libx32")
"""Top-level paths that are merged-/usr symlinks on Debian (recreated) or real dirs (bound)."""
BRIDGE_CONNECTIONS = 64
"""Connections the bridge forwards at once; more wait in its listen queue."""
BRIDGE_CONNECT_S = 10.0
"""Longest wait for the host's port when forwarding one connection."""


class SandboxUnavailable(RuntimeError):
    """bubblewrap (with user namespaces) is not available, or the sandbox cannot be built."""


@dataclass(frozen=True)
class AgentSandbox:
    """What the operator allows a command agent beyond its own run."""

    isolation: AgentIsolation = "bwrap"
    """`bwrap` (the default) or `none` (no sandbox: only the environment allowlist)."""
    network: bool = False
    """Share the machine's network (for a model provider); off: only the run's API is reachable."""
    read_only: tuple[str, ...] = ()
    """Further files or folders the agent may read (bound read-only at the same path)."""
    env: tuple[str, ...] = ()
    """Further variables of OLE's environment the agent gets (e.g. `ANTHROPIC_API_KEY`)."""

    def __post_init__(self) -> None:
        if self.isolation not in AGENT_ISOLATIONS:
            raise ValueError(f"agent isolation {self.isolation!r} is not one of {', '.join(AGENT_ISOLATIONS)}")
        bad = [name for name in self.env if not name or "=" in name or "\0" in name]
        if bad:
            raise ValueError(f"not environment variable names: {bad}")
        missing = [p for p in self.read_only if not os.path.exists(p)]
        if missing:
            raise ValueError(f"paths granted to the agent do not exist: {missing}")


def agent_environment(protocol: dict[str, str], sandbox: AgentSandbox) -> dict[str, str]:
    """The whole environment of the agent: a fixed base, the allowlisted names of OLE's
    environment, then its run's protocol variables (which nothing overrides)."""
    python_dir = str(Path(sys.executable).parent)
    if sandbox.isolation == "none":
        path = os.pathsep.join(dict.fromkeys([python_dir, *os.environ.get("PATH", os.defpath).split(os.pathsep)]))
        env = {"PATH": path}
        names: Sequence[str] = (*INHERITED_UNCONTAINED, *INHERITED, *sandbox.env)
    else:
        env = {"PATH": f"{python_dir}:/usr/local/bin:/usr/bin:/bin", "HOME": AGENT_HOME, "USER": AGENT_USER,
               "LOGNAME": AGENT_USER, "TMPDIR": "/tmp"}
        names = (*INHERITED, *sandbox.env)
    env.update({"PYTHONUNBUFFERED": "1", "PYTHONDONTWRITEBYTECODE": "1"})
    env.update({name: os.environ[name] for name in names if name in os.environ})
    env.update(protocol)
    return env


def bwrap_path() -> str:
    """The bubblewrap binary, or `SandboxUnavailable` saying how to get one or opt out."""
    found = shutil.which("bwrap") or shutil.which("bwrap", path="/usr/bin:/usr/local/bin:/bin")
    if found is None:
        raise SandboxUnavailable("bubblewrap (bwrap) is not installed: the command agent runs only in its sandbox "
                                 "unless told otherwise (apt-get install -y bubblewrap, or agent isolation `none`, "
                                 "which is no sandbox)")
    return found


@dataclass
class Grants:
    """The paths one run's agent may see besides the system: read-write and read-only binds."""

    workspace: Path
    read_write: list[Path] = field(default_factory=list)
    read_only: list[Path] = field(default_factory=list)
    sockets: list[Path] = field(default_factory=list)


def system_roots() -> list[str]:
    """Folders the sandbox shows read-only whole: `/usr`, the interpreter's prefixes and OLE's
    virtual environment (a grant inside one of them is already visible)."""
    prefixes = {os.path.realpath(sys.base_prefix), os.path.realpath(sys.base_exec_prefix), os.path.realpath(sys.prefix),
                sys.prefix}
    return ["/usr", *sorted(p for p in prefixes if not p.startswith("/usr/"))]


def visible(path: Path) -> bool:
    """Whether `path` lies in one of `system_roots()` (so needs no bind of its own)."""
    return any(Path(path).is_relative_to(root) or Path(os.path.realpath(path)).is_relative_to(root)
               for root in system_roots())


def _root_entries() -> list[str]:
    args = ["--ro-bind", "/usr", "/usr"]
    for name in ROOT_LINKS:
        path = Path("/", name)
        if path.is_symlink():
            args += ["--symlink", os.readlink(path), str(path)]
        elif path.is_dir():
            args += ["--ro-bind", str(path), str(path)]
    for prefix in system_roots()[1:]:
        args += ["--ro-bind", prefix, prefix]
    return args


def _etc(private: Path) -> list[str]:
    """The sandbox's `/etc`: its own passwd, group and hosts, plus `PUBLIC_ETC` read-only."""
    (private / "passwd").write_text(f"{AGENT_USER}:x:{AGENT_UID}:{AGENT_UID}:agent:{AGENT_HOME}:/bin/sh\n"
                                    "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n")
    (private / "group").write_text(f"{AGENT_USER}:x:{AGENT_UID}:\nnogroup:x:65534:\n")
    (private / "hosts").write_text("127.0.0.1\tlocalhost agent\n::1\tlocalhost ip6-localhost ip6-loopback\n")
    args = ["--dir", "/etc"]
    for name in ("passwd", "group", "hosts"):
        args += ["--ro-bind", str(private / name), f"/etc/{name}"]
    for name in PUBLIC_ETC:
        if os.path.exists(f"/etc/{name}"):
            args += ["--ro-bind", f"/etc/{name}", f"/etc/{name}"]
    return args


def _python() -> str:
    """The base interpreter (never a venv's launcher, which needs its pyvenv.cfg): runs `agent_init.py`."""
    exe = Path(sys.base_prefix, "bin", f"python{sys.version_info[0]}.{sys.version_info[1]}")
    return str(exe) if exe.exists() else os.path.realpath(sys.executable)


def bwrap_argv(grants: Grants, sandbox: AgentSandbox, private: Path, api: tuple[str, int] | None) -> list[str]:
    """The whole command line up to and including `agent_init.py --`; the agent's command follows.

    Order matters: the private tmpfs mounts come before every bind, so a workspace under `/tmp`
    is bound over the fresh `/tmp`, never hidden by it."""
    argv = [bwrap_path(), "--unshare-all", "--unshare-user", "--uid", str(AGENT_UID), "--gid", str(AGENT_UID),
            "--hostname", AGENT_USER, "--cap-drop", "ALL", "--die-with-parent"]
    if sandbox.network:
        argv.append("--share-net")
    argv += [*_root_entries(), *_etc(private), "--proc", "/proc", "--dev", "/dev",
             "--size", str(SCRATCH_BYTES), "--tmpfs", "/tmp", "--size", str(SCRATCH_BYTES), "--tmpfs", AGENT_HOME]
    ws = grants.workspace
    argv += ["--bind", str(ws), str(ws)]
    for path in grants.read_write:
        argv += ["--bind", str(path), str(path)]
    for path in grants.read_only:
        if not visible(path):
            argv += ["--ro-bind", str(path), str(path)]
    for path in grants.sockets:
        argv += ["--bind", str(path), str(path)]
    argv += ["--ro-bind", str(Path(__file__).with_name("agent_init.py")), INIT_PATH]
    init = [_python(), "-I", "-S", INIT_PATH]
    if api is not None:
        argv += ["--bind", str(private / "api.sock"), API_SOCKET]
        init += ["--api", api[0], str(api[1]), API_SOCKET]
    argv += ["--remount-ro", "/", "--chdir", str(ws), "--", *init, "--"]
    return argv


def api_endpoint(url: str) -> tuple[str, int] | None:
    """(host, port) of an HTTP API URL, None for anything else (an agent-session/v3 URL)."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return None
    return parts.hostname, parts.port or (443 if parts.scheme == "https" else 80)


class ApiBridge:
    """Forwards every connection accepted on a private Unix socket to one TCP endpoint (the
    run's host): the one way out of a sandbox without network."""

    def __init__(self, path: Path, target: tuple[str, int]) -> None:
        self.target = target
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(str(path))
        os.chmod(path, 0o600)
        self.sock.listen(BRIDGE_CONNECTIONS)
        self._slots = threading.BoundedSemaphore(BRIDGE_CONNECTIONS)
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._accept, name="agent-api-bridge", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._closed.set()
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:  # never connected to: nothing to shut down
            pass
        self.sock.close()
        self._thread.join(timeout=5)

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self.sock.accept()
            except OSError:  # closed
                return
            self._slots.acquire()
            threading.Thread(target=self._forward, args=(client,), daemon=True).start()

    def _forward(self, client: socket.socket) -> None:
        try:
            with client, socket.create_connection(self.target, timeout=BRIDGE_CONNECT_S) as upstream:
                upstream.settimeout(None)
                back = threading.Thread(target=pump, args=(upstream, client), daemon=True)
                back.start()
                pump(client, upstream)
                back.join()
        except OSError:  # the host is gone: the agent sees its connection close
            pass
        finally:
            self._slots.release()


class Contained:
    """One command agent's sandbox for the time it runs: `argv(command)` to start it, `close()`
    after (the bridge and the private folder go)."""

    def __init__(self, sandbox: AgentSandbox, url: str, grants: Grants) -> None:
        self.sandbox = sandbox
        self.private = Path(tempfile.mkdtemp(prefix="ole-sandbox-"))
        self.bridge: ApiBridge | None = None
        api = None if sandbox.network else api_endpoint(url)
        try:
            if api is not None:
                self.bridge = ApiBridge(self.private / "api.sock", api)
            self.prefix = bwrap_argv(grants, sandbox, self.private, api)
        except BaseException:
            self.close()
            raise

    def argv(self, command: Sequence[str]) -> list[str]:
        return [*self.prefix, *command]

    def close(self) -> None:
        if self.bridge is not None:
            self.bridge.close()
            self.bridge = None
        shutil.rmtree(self.private, ignore_errors=True)
