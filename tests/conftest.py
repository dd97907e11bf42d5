"""The fixtures several test files share, each defined here once (test files do not import fixtures).

Helpers that are not fixtures stay in their modules: tests/serve_helpers.py (``InProcess``: ``lmchat serve``'s
app in this process; ``Server``: a real ``lmchat serve`` process), tests/store_helpers.py (``RedisServer``,
``open_kind``: each store kind by name).
A fixture used by one file only, or whose setup differs from these (a server with other options), is that
file's own, under a name of its own.
"""
from __future__ import annotations

import uuid

import pytest

from lmchat.stores import open_store

from .store_helpers import STORES, RedisServer, open_kind, redis_binary


# ---------------------------------------------------------------------- Redis
@pytest.fixture(scope="module")
def redis_server(tmp_path_factory):
    """A real redis-server, one for a test module; tests keep apart with their own key prefix (``prefix``)."""
    server = RedisServer(tmp_path_factory.mktemp("redis"), redis_binary()).start()
    yield server
    server.kill()


@pytest.fixture
def own_redis(tmp_path):
    """A redis-server of the test's own, which the test may kill and start again."""
    server = RedisServer(tmp_path, redis_binary()).start()
    yield server
    server.kill()


@pytest.fixture
def prefix() -> str:
    """A key prefix of the test's own, on the module's ``redis_server``."""
    return f"test-{uuid.uuid4().hex[:8]}:"


# ---------------------------------------------------------------------- stores
@pytest.fixture(params=["memory", "sqlite"])
def store(request, tmp_path):
    """The two stores of one process, memory and SQLite on a real file (the manager's tests)."""
    store = open_store(f"sqlite:{tmp_path}/s.db" if request.param == "sqlite" else "memory")
    yield store
    store.close()


@pytest.fixture(params=STORES)
def any_store(request, tmp_path):
    """Every store kind (``STORES``: memory, SQLite, SQLite without RETURNING, Redis on ``redis_server``): the
    battery every store passes (tests/test_stores.py, tests/test_stores_records.py)."""
    s = open_kind(request.param, request, tmp_path)
    yield s
    s.close()


# ---------------------------------------------------------------------- lmchat serve
#: the echo server most tests need: an answer is the last user message itself (``prefix=``), no API keys
MEMORY = ("--template", "qwen2.5", "--store", "memory", "--backend-option", "prefix=")


@pytest.fixture(scope="module")
def memory_app():
    """``lmchat serve --backend echo`` + ``MEMORY`` in this process (``InProcess``, tests/serve_helpers.py): one for a
    test module."""
    pytest.importorskip("fastapi")
    from .serve_helpers import InProcess

    app = InProcess(*MEMORY)
    yield app
    app.stop()


@pytest.fixture
def app_client():
    """A fresh ``memory_app`` per test, as its TestClient (an httpx client whose requests call the app: no
    socket, no subprocess), so a breakpoint in a route's code stops there (the app runs in the client's portal
    thread: ``pytest -s``); its manager in ``app_client.app.state.manager``. The end-to-end tests run the
    real ``lmchat serve`` (``Server``)."""
    pytest.importorskip("fastapi")
    from .serve_helpers import InProcess

    app = InProcess(*MEMORY)
    yield app.http
    app.stop()
