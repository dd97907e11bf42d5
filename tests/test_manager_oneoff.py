"""One-off sessions (``SessionManager.oneoff``): a session for one turn that the store never sees.

A request that names no session (a stateless chat client, a Responses request
with ``store: false``) used to create a stored session, save its turn and
delete it: three writes for a session nobody can name again. A one-off is
held in the manager's memory for its turn only. Each test runs real stores
(memory, an SQLite file, a Redis server) and the real turn paths (a thread,
the event loop, the pool), and counts what the store saw: every call made to
it, and for SQLite the commits another connection sees in the file.
"""
from __future__ import annotations

import asyncio
import sqlite3
import threading
import time
from collections import Counter

import pytest

from lmchat import SessionManager, SessionPolicy
from lmchat.backends.echo import EchoBackend
from lmchat.errors import (
    BackendError,
    CapacityExceeded,
    ConfigError,
    InvalidMessages,
    SessionBusy,
    SessionLengthExceeded,
    SessionNotFound,
)
from lmchat.manager import ManagerLimits, OneOff, TurnRequest
from lmchat.manager.ids import owner_key, store_key
from lmchat.stores import MemoryStore, SQLiteStore


def user(text: str) -> list[dict]:
    return [{"role": "user", "content": text}]


class Tallied:
    """A real store that counts the calls made to it, by method (``calls``)."""

    calls: Counter

    def save(self, *args, **kwargs):
        self.calls["save"] += 1
        return super().save(*args, **kwargs)

    async def asave(self, *args, **kwargs):
        self.calls["asave"] += 1
        return await super().asave(*args, **kwargs)

    def append(self, *args, **kwargs):
        self.calls["append"] += 1
        return super().append(*args, **kwargs)

    async def aappend(self, *args, **kwargs):
        self.calls["aappend"] += 1
        return await super().aappend(*args, **kwargs)

    def load(self, *args, **kwargs):
        self.calls["load"] += 1
        return super().load(*args, **kwargs)

    def version(self, *args, **kwargs):
        self.calls["version"] += 1
        return super().version(*args, **kwargs)

    def delete(self, *args, **kwargs):
        self.calls["delete"] += 1
        return super().delete(*args, **kwargs)

    def list(self, *args, **kwargs):
        self.calls["list"] += 1
        return super().list(*args, **kwargs)


class TalliedMemory(Tallied, MemoryStore):
    def __init__(self):
        super().__init__()
        self.calls = Counter()


class TalliedSQLite(Tallied, SQLiteStore):
    def __init__(self, path):
        super().__init__(path)
        self.calls = Counter()


class FileChanges:
    """Commits to an SQLite file by any other connection, as a connection of its own sees them
    (``PRAGMA data_version`` changes with each): the store's writes, whoever makes them."""

    def __init__(self, path):
        self.conn = sqlite3.connect(path)
        self.seen = self._version()

    def _version(self) -> int:
        return self.conn.execute("PRAGMA data_version").fetchone()[0]

    def changed(self) -> bool:
        """Whether anything was committed since the last call."""
        now = self._version()
        changed, self.seen = now != self.seen, now
        return changed

    def rows(self) -> dict[str, int]:
        return {t: self.conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0]  # noqa: S608
                for t in ("sessions", "bases", "patches")}


class Dropping(EchoBackend):
    """Echo that records the sessions it is told to drop (and can break mid-answer, an engine dying)."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.dropped: list[str] = []
        self.failing = False

    def drop(self, session_id: str) -> None:
        self.dropped.append(session_id)
        super().drop(session_id)

    def generate(self, request):
        for n, chunk in enumerate(super().generate(request)):
            if self.failing and n == 1:
                raise BackendError("the engine died")
            yield chunk

    async def agenerate(self, request):
        n = 0
        async for chunk in super().agenerate(request):
            if self.failing and n == 1:
                raise BackendError("the engine died")
            n += 1
            yield chunk


@pytest.fixture(params=["memory", "sqlite"])
def tallied_store(request, tmp_path):
    store = TalliedSQLite(tmp_path / "s.db") if request.param == "sqlite" else TalliedMemory()
    yield store
    store.close()


def manager(store, on_loop: bool, backend=None, **kwargs) -> SessionManager:
    mgr = SessionManager(backend or Dropping(), template="qwen2.5", store=store, on_loop=on_loop, **kwargs)
    assert mgr.on_loop is on_loop
    return mgr


#: the turn paths: a thread's stream and its collected form, and asyncio's on the loop and in the pool
PATHS = ["stream_turn", "run_turn", "arun_turn@loop", "astream_turn@loop", "arun_turn@pool", "astream_turn@pool"]


def on_loop_of(path: str) -> bool:
    return path.endswith("@loop")


def turn(mgr: SessionManager, path: str, session, messages, **kwargs) -> tuple[str, str]:
    """One turn along ``path``: (the answer, its finish reason)."""
    if path == "stream_turn":
        chunks = list(mgr.stream_turn(TurnRequest(session, messages, **kwargs)))
        return "".join(c.text for c in chunks), chunks[-1].finish_reason
    if path == "run_turn":
        result = mgr.run_turn(TurnRequest(session, messages, **kwargs))
        return result.text, result.finish_reason
    if path.startswith("arun_turn"):
        result = asyncio.run(mgr.arun_turn(TurnRequest(session, messages, **kwargs)))
        return result.text, result.finish_reason

    async def streamed():
        return [c async for c in mgr.astream_turn(TurnRequest(session, messages, **kwargs))]

    chunks = asyncio.run(streamed())
    return "".join(c.text for c in chunks), chunks[-1].finish_reason


def untouched(store, changes: FileChanges | None, writes: tuple | None = None) -> None:
    """The store saw no call at all, and (SQLite) its file no commit."""
    assert store.calls == Counter(), store.calls
    if changes is not None:
        assert not changes.changed()
        assert store.group_commits == writes


def probes(store, tmp_path) -> tuple[FileChanges | None, tuple | None]:
    if isinstance(store, SQLiteStore):
        return FileChanges(tmp_path / "s.db"), store.group_commits
    return None, None


def gone(mgr: SessionManager, oneoff: OneOff, owner: str | None = None) -> None:
    """Nothing of the one-off is left: not in memory, not holding capacity, dropped by the engine, not found."""
    metrics = mgr.metrics()
    assert metrics["sessions_active"] == 0
    assert mgr._sessions.table.entries() == [e for e in mgr._sessions.table.entries() if e is not oneoff.entry]
    assert oneoff.entry.key in mgr.backend.dropped
    with pytest.raises(SessionNotFound):  # it ran its one turn: it names nothing any more
        mgr.run_turn(TurnRequest(oneoff, user("again"), owner=owner))


@pytest.mark.parametrize("path", PATHS)
def test_a_oneoff_turn_answers_and_the_store_sees_nothing(tallied_store, tmp_path, path):
    mgr = manager(tallied_store, on_loop_of(path))
    mgr.create("kept", system="Be brief.")  # a stored session: the one-offs must not touch it either
    tallied_store.calls.clear()
    changes, writes = probes(tallied_store, tmp_path)
    rows = changes.rows() if changes else None
    for n, (system, tools) in enumerate([(None, None), ("Be brief.", None), (None, [{
            "type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}])]):
        oneoff = mgr.oneoff("alice", system=system, tools=tools)
        assert turn(mgr, path, oneoff, user(f"hello {n}"), owner="alice") == (f"echo: hello {n}", "stop")
        untouched(tallied_store, changes, writes)
        gone(mgr, oneoff, "alice")
    # the answer went through the whole turn: the session held the system prompt and the answer
    assert oneoff.entry.session.messages[-1] == {"role": "assistant", "content": "echo: hello 2"}
    assert mgr.metrics()["sessions_in_memory"] == 1 and mgr.metrics()["turns_total"] == 3
    if changes:
        assert changes.rows() == rows
    # the probes are not blind: a stored session's turn is seen by both
    mgr.run_turn(TurnRequest("kept", user("hi")))
    assert tallied_store.calls["append"] + tallied_store.calls["aappend"] == 1
    if changes:
        assert changes.changed() and tallied_store.group_commits != writes


@pytest.mark.parametrize("path", PATHS)
def test_a_oneoff_copy_of_a_stored_session_only_reads_it(tallied_store, tmp_path, path):
    mgr = manager(tallied_store, on_loop_of(path))
    sid = mgr.create("chain", owner="alice", system="Be brief.")
    for word in ("one", "two", "three"):
        mgr.run_turn(TurnRequest(sid, user(word), owner="alice"))
    before = tallied_store.load(store_key(sid, owner_key("alice")))
    tallied_store.calls.clear()
    changes, writes = probes(tallied_store, tmp_path)
    # the conversation up to the first answer (system, user, assistant), and a new question
    oneoff = mgr.oneoff("alice", parent=sid, at=3)
    assert [m["content"] for m in oneoff.entry.session.messages] == ["Be brief.", "one", "echo: one"]
    assert turn(mgr, path, oneoff, user("aside"), owner="alice") == ("echo: aside", "stop")
    assert set(tallied_store.calls) <= {"load", "version"}  # the parent was read, nothing written or deleted
    tallied_store.calls.clear()
    untouched(tallied_store, changes, writes)
    assert tallied_store.load(store_key(sid, owner_key("alice"))) == before
    assert mgr.get(sid, owner="alice").turns == 3
    gone(mgr, oneoff, "alice")
    with pytest.raises(SessionNotFound):  # another owner cannot copy it
        mgr.oneoff("mallory", parent=sid)
    with pytest.raises(ConfigError):  # a copy keeps its parent's frame
        mgr.oneoff("alice", system="Other.", parent=sid)


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("how", ["capacity", "bad message", "too long", "engine fails"])
def test_a_oneoff_that_fails_leaves_nothing(tallied_store, tmp_path, path, how):
    backend = Dropping()
    kwargs, error, messages = {}, Exception, user("hi")
    if how == "capacity":
        kwargs, error = {"limits": ManagerLimits(max_active=0)}, CapacityExceeded
    elif how == "bad message":
        error, messages = InvalidMessages, [{"role": "robot", "content": "hi"}]
    elif how == "too long":
        kwargs, error = {"session_defaults": SessionPolicy(session_len=40)}, SessionLengthExceeded
        messages = user("word " * 50)
    else:
        backend.failing, error, messages = True, BackendError, user("one two three four")
    mgr = manager(tallied_store, on_loop_of(path), backend, **kwargs)
    changes, writes = probes(tallied_store, tmp_path)
    oneoff = mgr.oneoff("alice")
    with pytest.raises(error):
        turn(mgr, path, oneoff, messages, owner="alice")
    untouched(tallied_store, changes, writes)
    assert mgr.metrics()["sessions_active"] == 0 and mgr._sessions.table.entries() == []
    assert set(mgr.metrics()["errors"]) <= {error.__name__}  # (asyncio's capacity refusals are not counted)
    if how != "capacity":  # (asyncio's refusal comes before the turn begins on the one-off: nothing holds it)
        with pytest.raises(SessionNotFound):  # gone: a one-off runs one turn, even one refused once begun
            mgr.run_turn(TurnRequest(oneoff, user("again"), owner="alice"))
    if how == "engine fails":  # the engine got the prompt: it is told to drop the session
        assert oneoff.entry.key in backend.dropped
    # the manager is as before: the next one-off runs (where the manager's limits let any turn run)
    if how in ("bad message", "engine fails"):
        backend.failing = False
        assert turn(mgr, path, mgr.oneoff("alice"), user("next"), owner="alice") == ("echo: next", "stop")
    untouched(tallied_store, changes, writes)


@pytest.mark.parametrize("on_loop", [True, False], ids=["on-loop", "pool"])
def test_a_oneoff_whose_consumer_leaves_or_is_cancelled_leaves_nothing(tallied_store, tmp_path, on_loop):
    backend = Dropping(delay=0.01)
    mgr = manager(tallied_store, on_loop, backend)
    changes, writes = probes(tallied_store, tmp_path)
    words = "one two three four five six seven eight nine ten"

    async def settled(oneoff: OneOff) -> None:
        for _ in range(500):  # an abandoned turn finishes in the background (a task, or a pool worker)
            if mgr.metrics()["sessions_active"] == 0 and oneoff.entry.key in backend.dropped:
                return
            await asyncio.sleep(0.01)
        raise AssertionError("the abandoned one-off never ended")

    async def main():
        left = mgr.oneoff("alice")  # the client disconnects mid-stream: its response closes the stream
        stream = mgr.astream_turn(TurnRequest(left, user(words), owner="alice"))
        assert (await stream.__anext__()).text
        await stream.aclose()
        await settled(left)
        task_of = mgr.oneoff("alice")  # the request's task is cancelled mid-answer
        task = asyncio.ensure_future(mgr.arun_turn(TurnRequest(task_of, user(words), owner="alice")))
        await asyncio.sleep(0.05)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await settled(task_of)
        cancelled = mgr.oneoff("alice")  # cancel(): the stream ends with what was generated
        chunks = []
        async for chunk in mgr.astream_turn(TurnRequest(cancelled, user(words), owner="alice")):
            chunks.append(chunk)
            if len(chunks) == 2:
                with pytest.raises(SessionNotFound):  # only its owner can
                    mgr.cancel(cancelled, "mallory")
                assert mgr.cancel(cancelled, "alice") is True
        assert chunks[-1].finish_reason == "cancelled"
        assert 0 < len("".join(c.text for c in chunks)) < len("echo: " + words)
        assert mgr.cancel(cancelled, "alice") is False  # its turn is over
        return left, task_of, cancelled

    for oneoff in asyncio.run(main()):
        gone(mgr, oneoff, "alice")
    untouched(tallied_store, changes, writes)
    # and from a thread: the stream closed mid-answer (or dropped)
    oneoff = mgr.oneoff("alice")
    stream = mgr.stream_turn(TurnRequest(oneoff, user(words), owner="alice"))
    assert next(stream).text
    stream.close()
    gone(mgr, oneoff, "alice")
    untouched(tallied_store, changes, writes)
    assert mgr._sessions.table.entries() == []


@pytest.mark.parametrize("on_loop", [True, False], ids=["on-loop", "pool"])
def test_concurrent_oneoffs_of_one_owner_do_not_interfere(tallied_store, tmp_path, on_loop):
    mgr = manager(tallied_store, on_loop, Dropping(delay=0.005), limits=ManagerLimits(max_sessions=2))
    for sid in ("a", "b"):  # the in-memory table is full of stored sessions: one-offs must not evict them
        mgr.create(sid, owner="alice")
    tallied_store.calls.clear()
    changes, writes = probes(tallied_store, tmp_path)
    peak = 0

    async def one(n: int) -> str:
        oneoff = mgr.oneoff("alice", system=f"You are number {n}.")
        text = (await mgr.arun_turn(TurnRequest(oneoff, user(f"question {n} " + "word " * 10), owner="alice"))).text
        assert oneoff.entry.session.messages[0]["content"] == f"You are number {n}."
        return text

    async def watch(done: asyncio.Event):
        nonlocal peak
        while not done.is_set():
            peak = max(peak, mgr.metrics()["sessions_active"])
            await asyncio.sleep(0.002)

    async def main():
        done = asyncio.Event()
        watcher = asyncio.ensure_future(watch(done))
        answers = await asyncio.gather(*(one(n) for n in range(16)))
        done.set()
        await watcher
        return answers

    answers = asyncio.run(main())
    assert answers == [f"echo: question {n} " + "word " * 10 for n in range(16)]
    assert peak > 1  # they did run at once
    # threads too (the sync path)
    results: dict[int, str] = {}

    def worker(n: int):
        results[n] = mgr.run_turn(TurnRequest(mgr.oneoff("alice"), user(f"thread {n}"), owner="alice")).text

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert results == {n: f"echo: thread {n}" for n in range(8)}
    untouched(tallied_store, changes, writes)
    metrics = mgr.metrics()
    assert metrics["sessions_in_memory"] == 2 and metrics["sessions_evicted_total"] == 0
    assert metrics["sessions_active"] == 0 and metrics["turns_total"] == 24
    assert [e.key for e in mgr._sessions.table.entries()] == [store_key(s, owner_key("alice")) for s in ("a", "b")]


def test_a_oneoff_is_invisible_and_apart_from_any_stored_session(tallied_store, tmp_path):
    mgr = manager(tallied_store, False, Dropping(delay=0.01), limits=ManagerLimits(max_sessions=1, idle_ttl=0.01))
    changes, writes = probes(tallied_store, tmp_path)
    oneoff = mgr.oneoff("alice")
    stream = mgr.stream_turn(TurnRequest(oneoff, user("one two three four five six"), owner="alice"))
    first = next(stream).text  # mid-turn
    sid = oneoff.session_id
    for owner in ("alice", "mallory", None):  # nobody finds it, lists it, ends it or continues it
        assert mgr.find(sid, owner) is None
        assert mgr.list(owner) == []
        with pytest.raises(SessionNotFound):
            mgr.end(sid, owner)
        with pytest.raises(SessionNotFound):
            mgr.cancel(sid, owner)
    with pytest.raises(SessionNotFound):  # another owner cannot run it, even holding it
        mgr.run_turn(TurnRequest(oneoff, user("mine now"), owner="mallory"))
    with pytest.raises(SessionBusy):  # its owner cannot run it twice at once
        mgr.run_turn(TurnRequest(oneoff, user("twice"), owner="alice"))
    assert set(tallied_store.calls) == {"load", "list"}  # the look-ups above read the store for the id: it has nothing
    tallied_store.calls.clear()
    untouched(tallied_store, changes, writes)
    # a stored session made under its id (a store=false response shows it) is another one, in the engine too
    assert mgr.run_turn(TurnRequest(sid, user("stored"), owner="alice", create=True)).text == "echo: stored"
    assert store_key(sid, owner_key("alice")) != oneoff.entry.key
    for _ in range(3):  # stored sessions fill the table past max_sessions and expire: the one-off runs on
        mgr.create(owner="alice")
        time.sleep(0.02)
        mgr.metrics()
    assert first + "".join(c.text for c in stream) == "echo: one two three four five six"
    assert mgr.get(sid, owner="alice").messages[-1]["content"] == "echo: stored"
    gone(mgr, oneoff, "alice")


def test_close_cancels_a_running_oneoff(tmp_path):
    store = TalliedSQLite(tmp_path / "s.db")
    mgr = manager(store, False, Dropping(delay=0.05))
    oneoff = mgr.oneoff()
    stream = mgr.stream_turn(TurnRequest(oneoff, user(" ".join(["word"] * 200))))
    assert next(stream).text
    done = []
    thread = threading.Thread(target=lambda: done.extend(stream))
    thread.start()
    started = time.monotonic()
    mgr.close(grace=5)
    thread.join(5)
    assert time.monotonic() - started < 2  # cancelled, not waited for until the grace ran out
    assert done[-1].finish_reason == "cancelled" and store.calls == Counter()


def test_oneoffs_on_redis_send_it_no_command(redis_server):
    redis = pytest.importorskip("redis")
    from lmchat.stores.redis import RedisStore

    mgr = manager(RedisStore(redis_server.url, prefix="oneoff-test:"), False)
    probe = redis.Redis.from_url(redis_server.url)

    def commands() -> dict[str, int]:
        stats = probe.info("commandstats")
        return {name: s["calls"] for name, s in stats.items() if name != "cmdstat_info"}

    mgr.create("kept")  # the store's scripts are loaded, its connections open
    before = commands()
    for path in ("stream_turn", "run_turn", "arun_turn@pool", "astream_turn@pool"):
        oneoff = mgr.oneoff()
        assert turn(mgr, path, oneoff, user("hi"))[0] == "echo: hi"
    with pytest.raises(InvalidMessages):
        mgr.run_turn(TurnRequest(mgr.oneoff(), [{"role": "robot", "content": "hi"}]))
    assert commands() == before
    mgr.run_turn(TurnRequest("kept", user("hi")))  # the probe is not blind: a stored turn is seen
    assert commands() != before
    mgr.close()
