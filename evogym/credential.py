"""The run's credential: a random token only the run's own agent can read.

Loopback TCP is open to every local user (the port is listed in `/proc/net/tcp`), so the
HTTP API answers only requests that carry this token (`Authorization: Bearer <token>`, or
`X-Evogym-Token`); anything else gets 401 and changes nothing. The token never appears in
a command line (`/proc/PID/cmdline` is world-readable): the host keeps it in files that
are 0600 inside a 0700 directory, and hands it to the agent in its environment
(`/proc/PID/environ` is readable by the same user only) together with those paths:

- `EVOPOLICYGYM_TOKEN`: the token itself;
- `EVOPOLICYGYM_TOKEN_FILE`: a file holding the token and a newline;
- `EVOPOLICYGYM_AUTH_HEADER_FILE`: a file holding `Authorization: Bearer <token>`, for
  `curl -H @"$EVOPOLICYGYM_AUTH_HEADER_FILE"` (a header given in curl's argv would show).

The agent-session/v3 socket (`evogym.session`) needs no token: it is 0600 in the same
0700 directory, so only the run's user can connect at all.
"""
from __future__ import annotations

import hmac
import os
import secrets
import stat
from dataclasses import dataclass
from pathlib import Path

from evogym.durable import atomic_write
from evogym.errors import ConfigError

TOKEN_BYTES = 32
"""Random bytes of a generated token (256 bits, hex-encoded: 64 characters)."""
TOKEN_FILE = "token"
AUTH_HEADER_FILE = "auth-header"
MAX_TOKEN_CHARS = 256
"""Longest token accepted from a `--token-file` (a header line must stay small)."""


@dataclass(frozen=True)
class Credential:
    """The token of one run and the 0600 files that hold it."""

    token: str
    """The secret itself (printable ASCII, no spaces)."""
    token_file: Path
    """0600 file: the token and a newline."""
    header_file: Path
    """0600 file: `Authorization: Bearer <token>` and a newline (curl's `-H @file`)."""

    @classmethod
    def create(cls, directory: Path, token: str | None = None) -> "Credential":
        """A credential in `directory` (made 0700; an existing one must be ours and 0700):
        `token`, or a fresh random one; any files from an earlier start are replaced."""
        token = secrets.token_hex(TOKEN_BYTES) if token is None else token
        check_token(token, "the token")
        directory = private_dir(directory)
        token_file, header_file = directory / TOKEN_FILE, directory / AUTH_HEADER_FILE
        _write_private(token_file, token + "\n")
        _write_private(header_file, f"Authorization: Bearer {token}\n")
        return cls(token, token_file, header_file)

    def accepts(self, presented: str | None) -> bool:
        """Whether `presented` (a header value: `Bearer <token>`, any case of `Bearer` (RFC 7235), or
        the bare token) is this token;
        constant-time in the token's content."""
        if not presented:
            return False
        scheme, _, rest = presented.strip().partition(" ")
        given = rest.strip() if scheme.lower() == "bearer" else presented.strip()  # the scheme is case-insensitive
        return hmac.compare_digest(given.encode("utf-8", "replace"), self.token.encode())

    def agent_env(self) -> dict[str, str]:
        """The variables an agent receives (its environment, never its argv)."""
        return {"EVOPOLICYGYM_TOKEN": self.token, "EVOPOLICYGYM_TOKEN_FILE": str(self.token_file),
                "EVOPOLICYGYM_AUTH_HEADER_FILE": str(self.header_file)}


def check_token(token: str, source: str) -> None:
    if not token or len(token) > MAX_TOKEN_CHARS or not all(33 <= ord(c) <= 126 for c in token):
        raise ConfigError(f"{source} must be 1-{MAX_TOKEN_CHARS} printable ASCII characters without spaces",
                          hint="leave it out and the host makes a random one")


def read_token_file(path: Path) -> str:
    """The token in a file a caller made (`--token-file`): it must belong to this user and be
    readable by no one else, as any copy of the credential must."""
    path = Path(path)
    try:
        st = path.stat()
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read --token-file {path}: {exc.strerror or exc}",
                          hint="give a file holding the token, mode 0600") from None
    if st.st_uid != os.getuid() or st.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise ConfigError(f"--token-file {path} is readable by others (mode {stat.S_IMODE(st.st_mode):04o})",
                          hint=f"chmod 600 {path}")
    token = text.strip()
    check_token(token, f"the token in {path}")
    return token


def private_dir(directory: Path) -> Path:
    """`directory`, made 0700 if new; an existing one must belong to this user (its mode is
    set to 0700). Raises ConfigError otherwise."""
    directory = Path(directory)
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    st = directory.lstat()
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid():
        raise ConfigError(f"{directory} is not a directory of this user",
                          hint="remove it, or use a new --run-dir")
    os.chmod(directory, 0o700)
    return directory


def _write_private(path: Path, text: str) -> None:
    """Write a 0600 file atomically: created 0600 under a fresh temporary name, then renamed."""
    atomic_write(path, text, mode=0o600)
