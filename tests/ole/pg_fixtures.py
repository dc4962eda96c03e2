"""A real PostgreSQL server for the tests: one throw-away cluster per test session (per xdist worker),
one fresh database per test. Where the server binaries are missing the test FAILS with the install
line (`ole.storage.local_server.INSTALL_LINE`): a backend that was not tested must not look tested."""
from __future__ import annotations

import pytest

from ole.errors import StorageError
from ole.storage import STORAGE_ENV


@pytest.fixture(scope="session")
def pg_server():
    """The session's cluster (`ole.storage.local_server.LocalServer`)."""
    from ole.storage.local_server import INSTALL_LINE, LocalServer
    try:
        server = LocalServer().start()
    except StorageError as exc:
        pytest.fail(f"no PostgreSQL server for the PostgreSQL tier: {exc.message} ({exc.hint or INSTALL_LINE})",
                    pytrace=False)
    yield server
    server.stop()


@pytest.fixture
def pg_url(pg_server) -> str:
    """The URL of a new empty database on the session's cluster."""
    return pg_server.create_database()


@pytest.fixture
def pg_env(pg_url, monkeypatch) -> str:
    """`$OLE_STORAGE` set to a new database: every Registry, EvaluationStore and Lease opened in the test,
    and in the processes it starts, lives there."""
    monkeypatch.setenv(STORAGE_ENV, pg_url)
    return pg_url
