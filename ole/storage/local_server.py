"""A throw-away PostgreSQL cluster in a folder: the real server the tests and experiments run against.

`LocalServer` runs Debian's `initdb`/`pg_ctl` (package `postgresql`; `make install` installs it
as root) in a fresh folder, listening only on a unix socket inside that folder, so two clusters
never meet and nothing outside the machine can reach one. The server refuses to run as root:
under root the cluster belongs to the `postgres` system user (the package creates it) and its
folder is made theirs. `fsync` is off unless asked (`durable=True`): a test cluster dies with the
test, and the latency benchmark asks for the durable default.
"""
from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
import uuid
from pathlib import Path

from ole.errors import StorageError

INSTALL_LINE = "apt-get install -y postgresql  (or `make install` as root)"
"""How to get the server binaries; a tier that needs them fails with this line, never skips."""
SERVER_USER = "postgres"
"""The system user a cluster started by root runs as."""
START_TIMEOUT_S = 60
"""Longest wait for `pg_ctl start` (a cold start on a busy 2-core machine takes well under 5 s)."""


BINDIR_ENV = "OLE_PG_BINDIR"
"""A folder holding `initdb` and `pg_ctl` to use instead of the search (given but without them: an error)."""


def find_bindir() -> Path:
    """The folder of `initdb` and `pg_ctl`: `$OLE_PG_BINDIR`, else the newest `/usr/lib/postgresql/<v>/bin`,
    else `$PATH`."""
    given = os.environ.get(BINDIR_ENV)
    if given:
        if not (Path(given) / "initdb").is_file():
            raise StorageError(f"{BINDIR_ENV}={given} holds no initdb", hint=INSTALL_LINE)
        return Path(given)
    versions = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"), key=lambda p: int(p.parts[-3])
                      if p.parts[-3].isdigit() else 0)
    if versions:
        return versions[-1].parent
    found = shutil.which("initdb")
    if found:
        return Path(found).resolve().parent
    raise StorageError("the PostgreSQL server binaries (initdb, pg_ctl) are not installed", hint=INSTALL_LINE)


class LocalServer:
    """`with LocalServer() as server: server.url(db)`: a cluster that lives as long as the block."""

    def __init__(self, *, durable: bool = False, base: Path | None = None) -> None:
        self.bindir = find_bindir()
        self.dir = Path(tempfile.mkdtemp(prefix="ole-pg-", dir=base))
        self.data, self.log = self.dir / "data", self.dir / "server.log"
        self.durable = durable
        self._as: list[str] = []
        if os.geteuid() == 0:
            try:
                user = pwd.getpwnam(SERVER_USER)
            except KeyError:
                raise StorageError(f"running as root, the server needs the `{SERVER_USER}` system user",
                                   hint=INSTALL_LINE) from None
            os.chown(self.dir, user.pw_uid, user.pw_gid)
            self.dir.chmod(0o755)  # clients (root, other users) reach the socket inside
            self._as = ["runuser", "-u", SERVER_USER, "--"]

    def _run(self, *args: str) -> None:
        done = subprocess.run([*self._as, *args], capture_output=True, text=True, timeout=START_TIMEOUT_S)
        if done.returncode != 0:
            log = self.log.read_text(errors="replace")[-2000:] if self.log.exists() else ""
            raise StorageError(f"{Path(args[0]).name} failed: {done.stderr.strip() or done.stdout.strip()} {log}",
                               hint=f"is the PostgreSQL server installed? {INSTALL_LINE}")

    def start(self) -> LocalServer:
        self._run(str(self.bindir / "initdb"), "-D", str(self.data), "-A", "trust", "-U", "ole", "-E", "UTF8",
                  "--no-sync", "--locale=C")
        options = f"-k {self.dir} -c listen_addresses='' -c max_connections=200"
        if not self.durable:
            options += " -c fsync=off -c synchronous_commit=off -c full_page_writes=off"
        self._run(str(self.bindir / "pg_ctl"), "-D", str(self.data), "-o", options, "-l", str(self.log),
                  "-w", "-t", str(START_TIMEOUT_S), "start")
        return self

    def url(self, database: str = "postgres") -> str:
        """The URL of `database` on this cluster (user `ole`, the unix socket in the cluster folder)."""
        return f"postgresql://ole@/{database}?host={self.dir}"

    def create_database(self, name: str | None = None) -> str:
        """A new empty database; returns its URL."""
        from ole.storage import postgres
        name = name or f"t_{uuid.uuid4().hex[:12]}"
        conn = postgres.connect(self.url())
        try:
            conn.execute(f'CREATE DATABASE "{name}"')
        finally:
            conn.close()
        return self.url(name)

    def stop(self) -> None:
        if self.data.exists():
            subprocess.run([*self._as, str(self.bindir / "pg_ctl"), "-D", str(self.data), "-m", "immediate", "stop"],
                           capture_output=True, timeout=START_TIMEOUT_S)
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> LocalServer:
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc: object) -> None:
        self.stop()
