"""Turns on the event loop (``SessionManager.on_loop``): the same outcomes as in a pool worker.

The echo backend streams asynchronously and the memory and SQLite stores
are loop-safe, so asyncio callers' turns run on the loop; each test runs both
ways (``on_loop=False`` forces the pool) and on both stores, and compares the
stored bytes where a turn must leave the session as it was.
"""
from __future__ import annotations

import asyncio
import gc
import threading
import time
import weakref

import pytest

import lmchat
from lmchat import SessionManager
from lmchat.backends.echo import EchoBackend
from lmchat.errors import (
    BackendError,
    CapacityExceeded,
    ConfigError,
    LmchatError,
    SessionBusy,
    SessionNotFound,
    StoreConflict,
)
from lmchat.manager import ManagerLimits, TurnRequest
from lmchat.serve.request_turns import run, start_stream
from lmchat.stores import VERSION_KEY, open_store


def user(text: str) -> list[dict]:
    return [{"role": "user", "content": text}]


class FailingEcho(EchoBackend):
    """Echo that breaks after ``after`` chunks, in both of its streams (an engine dying mid-answer)."""

    def __init__(self, after: int = 2, **kwargs):
        super().__init__(**kwargs)
        self.after, self.failing = after, False

    def generate(self, request):
        for n, chunk in enumerate(super().generate(request)):
            if self.failing and n == self.after:
                raise BackendError("the engine died")
            yield chunk

    async def agenerate(self, request):
        n = 0
        async for chunk in super().agenerate(request):
            if self.failing and n == self.after:
                raise BackendError("the engine died")
            n += 1
            yield chunk


def manager(store, on_loop: bool, backend=None) -> SessionManager:
    mgr = SessionManager(backend or EchoBackend(), template="qwen2.5", store=store, on_loop=on_loop)
    assert mgr.on_loop is on_loop
    return mgr


def stored(store, sid: str) -> dict:
    return store.load(next(i.id for i in store.list(owner=None) if i.id.endswith(sid)))


WAYS = pytest.mark.parametrize("on_loop", [True, False], ids=["on-loop", "pool"])


@WAYS
def test_turns_create_answer_commit_and_replay(store, on_loop):
    mgr = manager(store, on_loop)

    async def main():
        # `create=True` names a session that does not exist yet: the turn creates it, stored by the turn's save
        result = await mgr.arun_turn(TurnRequest("s1", user("hello there"), create=True))
        assert (result.text, result.finish_reason) == ("echo: hello there", "stop")
        chunks = [c async for c in mgr.astream_turn(TurnRequest("s1", user("one two three")))]
        assert "".join(c.text for c in chunks) == "echo: one two three"
        assert chunks[-1].finish_reason == "stop"
        first = await mgr.arun_turn(TurnRequest("s1", user("keyed"), idempotency_key="k1"))
        again = await mgr.arun_turn(TurnRequest("s1", user("keyed"), idempotency_key="k1"))  # a retry: no new turn
        assert again.text == first.text == "echo: keyed"
        # a resent history: only what the session lacks is a turn
        history = mgr.get("s1").messages + user("from history")
        assert (await mgr.arun_turn(TurnRequest("s1", history=history))).text == "echo: from history"

    asyncio.run(main())
    messages = mgr.get("s1").messages
    assert [m["content"] for m in messages if m["role"] == "user"] == [
        "hello there", "one two three", "keyed", "from history"]
    assert stored(store, "s1")[VERSION_KEY] == 4  # four turns, the first storing it (the retry wrote nothing)
    assert mgr.metrics()["sessions_active"] == 0


@WAYS
def test_a_backend_failure_leaves_the_stored_session_as_it_was(store, on_loop):
    backend = FailingEcho()
    mgr = manager(store, on_loop, backend)
    sid = mgr.create("s2")

    async def main():
        await mgr.arun_turn(TurnRequest(sid, user("kept")))
        before = stored(store, sid)
        backend.failing = True
        with pytest.raises(BackendError, match="died"):
            await mgr.arun_turn(TurnRequest(sid, user("one two three four five")))
        with pytest.raises(BackendError, match="died"):
            async for _ in mgr.astream_turn(TurnRequest(sid, user("one two three four five"))):
                pass
        assert stored(store, sid) == before
        assert mgr.get(sid).turns == 1
        backend.failing = False
        assert (await mgr.arun_turn(TurnRequest(sid, user("after")))).text == "echo: after"

    asyncio.run(main())
    assert mgr.metrics()["errors"].get("BackendError") == 2
    assert mgr.metrics()["sessions_active"] == 0


@WAYS
def test_a_save_that_loses_its_compare_and_set_discards_the_turn(store, on_loop):
    mgr = manager(store, on_loop, EchoBackend(delay=0.01))
    sid = mgr.create("s3")

    async def main():
        await mgr.arun_turn(TurnRequest(sid, user("kept")))
        stream = mgr.astream_turn(TurnRequest(sid, user("one two three")))
        await stream.__anext__()
        # another writer (a replica) saves the session mid-turn: this turn's save must not land
        key = next(i.id for i in store.list(owner=None) if i.id.endswith(sid))
        data = store.load(key)
        store.save({k: v for k, v in data.items() if k != VERSION_KEY}, expected_version=data[VERSION_KEY])
        before = store.load(key)
        with pytest.raises(StoreConflict):
            async for _ in stream:
                pass
        assert store.load(key) == before
        # the manager reloads the stored state for the next turn
        assert (await mgr.arun_turn(TurnRequest(sid, user("next")))).text == "echo: next"

    asyncio.run(main())
    assert [m["content"] for m in mgr.get(sid).messages if m["role"] == "user"] == ["kept", "next"]


@WAYS
def test_leaving_or_cancelling_commits_the_partial_answer(store, on_loop):
    mgr = manager(store, on_loop, EchoBackend(delay=0.02))
    sid = mgr.create("s4")
    words = "one two three four five six seven eight nine ten"

    async def settled(version: int) -> None:
        for _ in range(300):  # the abandoned turn is finished in the background (a pool worker, or a task)
            saved = store.version(next(i.id for i in store.list(owner=None) if i.id.endswith(sid))) == version
            if saved and mgr.metrics()["sessions_active"] == 0:
                return
            await asyncio.sleep(0.01)

    async def main():
        stream = mgr.astream_turn(TurnRequest(sid, user(words)))
        first = await stream.__anext__()
        await stream.aclose()  # the consumer leaves
        await settled(2)
        task = asyncio.ensure_future(mgr.arun_turn(TurnRequest(sid, user(words))))
        await asyncio.sleep(0.05)
        task.cancel()  # the caller's task is cancelled mid-answer
        with pytest.raises(asyncio.CancelledError):
            await task
        await settled(3)
        # the partial answers were saved: nothing was discarded, and the engine keeps what it holds
        after = await mgr.arun_turn(TurnRequest(sid, user("after")))
        assert after.reused > 0 and mgr.metrics()["sessions_loaded_total"] == 0
        return first

    first = asyncio.run(main())
    answers = [m["content"] for m in mgr.get(sid).messages if m["role"] == "assistant"][:2]
    assert answers[0].startswith(first.text)
    assert all(("echo: " + words).startswith(a) and a != "echo: " + words for a in answers)
    assert mgr.metrics()["sessions_active"] == 0


@WAYS
def test_a_stream_left_in_a_cancelled_anyio_scope_commits_the_partial_answer(store, on_loop):
    """What Starlette does when a streamed response's client disconnects: it cancels the anyio scope the
    response runs in, which cancels every later await of that task, the stream's cleanup included."""
    import anyio

    mgr = manager(store, on_loop, EchoBackend(delay=0.01))
    sid = mgr.create("s7")
    words = "one two three four five six seven eight nine ten"

    async def main():
        got = []

        async def respond():
            async for chunk in mgr.astream_turn(TurnRequest(sid, user(words))):
                got.append(chunk)

        async with anyio.create_task_group() as group:
            group.start_soon(respond)
            while len(got) < 2:
                await anyio.sleep(0.005)
            group.cancel_scope.cancel()
        for _ in range(300):
            if mgr.metrics()["sessions_active"] == 0:
                break
            await asyncio.sleep(0.01)
        return got

    got = asyncio.run(main())
    answer = mgr.get(sid).messages[-1]
    assert answer["role"] == "assistant" and answer["content"].startswith("".join(c.text for c in got))
    assert answer["content"] != "echo: " + words and stored(store, sid)[VERSION_KEY] == 2


@WAYS
def test_one_turn_at_a_time_per_session(store, on_loop):
    mgr = manager(store, on_loop, EchoBackend(delay=0.005))
    sid = mgr.create("s5")

    async def main():
        results = await asyncio.gather(*(mgr.arun_turn(TurnRequest(sid, user(f"race {n} a b c"))) for n in range(6)),
                                       return_exceptions=True)
        assert sum(isinstance(r, SessionBusy) for r in results) == 5

    asyncio.run(main())
    assert mgr.get(sid).turns == 1


def test_on_loop_needs_an_async_backend_and_a_loop_safe_store(tmp_path):
    class ThreadOnly(EchoBackend):
        agenerate = None  # an engine in this process streams from a thread only

    with pytest.raises(ConfigError, match="agenerate"):
        SessionManager(ThreadOnly(), template="qwen2.5", on_loop=True)
    assert SessionManager(ThreadOnly(), template="qwen2.5").on_loop is False
    assert SessionManager(EchoBackend(), template="qwen2.5").on_loop is True
    sqlite = SessionManager(EchoBackend(), template="qwen2.5", store=open_store(f"sqlite:{tmp_path}/a.db"))
    assert sqlite.on_loop is True
    sqlite.close()


def test_a_turn_cancelled_while_its_save_waits_leaves_memory_as_stored(tmp_path):
    """The task is cancelled while the turn's append waits in SQLite's writer queue: the append is not
    written, so the session in memory must not keep the turn either (it reloads)."""
    from lmchat.stores import SQLiteStore

    from .test_stores_sqlite import hold_the_writer

    store = SQLiteStore(tmp_path / "s.db")
    mgr = manager(store, True)
    sid = mgr.create("s6")
    release, holder = hold_the_writer(store)

    async def main():
        task = asyncio.ensure_future(mgr.arun_turn(TurnRequest(sid, user("never saved"))))
        while store._writer._queue.qsize() < 1:
            await asyncio.sleep(0.005)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        release.set()
        await asyncio.to_thread(holder.join)
        assert stored(store, sid)[VERSION_KEY] == 1
        assert (await mgr.arun_turn(TurnRequest(sid, user("next")))).text == "echo: next"

    asyncio.run(main())
    assert [m["content"] for m in mgr.get(sid).messages if m["role"] == "user"] == ["next"]
    assert mgr.metrics()["sessions_active"] == 0
    mgr.close()


@pytest.mark.parametrize("name", lmchat.template_names())
def test_every_template_stores_the_same_turns_on_the_loop_as_in_a_thread(name):
    """Three turns (a plain one, unicode and whitespace, an empty message) through the event loop and
    through the blocking API, on every registered template: the same answers, chunks and stored bytes, or
    the same refusal."""

    def outcome(call):
        try:
            return call()
        except LmchatError as exc:
            return type(exc).__name__

    prompts = ["Hello there", "  tabs\tand  spaces, 中文 😀 ", ""]
    ways = {}
    for on_loop in (True, False):
        mgr = SessionManager(EchoBackend(), template=name, on_loop=True)  # stream_turn blocks whatever on_loop says
        mgr.create("t")
        results = []
        for text in prompts:
            if on_loop:
                async def turn(text=text, mgr=mgr):
                    chunks = [c async for c in mgr.astream_turn(TurnRequest("t", user(text)))]
                    return [(c.text, c.finish_reason, c.prefilled, c.reused) for c in chunks]
                results.append(outcome(lambda: asyncio.run(turn())))
            else:
                results.append(outcome(lambda text=text, mgr=mgr: [(c.text, c.finish_reason, c.prefilled, c.reused)
                                                         for c in mgr.stream_turn(TurnRequest("t", user(text)))]))
        key = next(i.id for i in mgr.store.list(owner=None))
        ways[on_loop] = (results, mgr.store.load(key))
        assert mgr.metrics()["sessions_active"] == 0
    assert ways[True] == ways[False]
    assert any(isinstance(r, list) for r in ways[True][0])  # at least one turn ran on every template


def test_a_session_not_in_memory_loads_off_the_loop(store):
    """A turn on the loop for a session the manager does not hold (a restarted server): the store's read and
    the fold of its records, O(session), run in a worker thread while the loop serves others; the turn then
    continues the session. A session that is not there is still refused as such."""
    first = manager(store, True)

    async def fill():
        await first.arun_turn(TurnRequest("s1", user("hello"), create=True))
        for i in range(20):
            await first.arun_turn(TurnRequest("s1", user(f"turn {i}")))

    asyncio.run(fill())
    before = stored(store, "s1")
    restarted = manager(store, True)
    loads, real = [], store.load

    def load(key):
        loads.append((key, threading.get_ident()))
        return real(key)

    store.load = load

    async def main():
        result = await restarted.arun_turn(TurnRequest("s1", user("after the restart")))
        with pytest.raises(SessionNotFound):
            await restarted.arun_turn(TurnRequest("nobody", user("hi")))
        return threading.get_ident(), result

    loop_thread, result = asyncio.run(main())
    assert result.text == "echo: after the restart" and result.history_tokens > 0
    threads = [thread for key, thread in loads if key.endswith("s1")]
    assert threads and loop_thread not in threads
    after = stored(store, "s1")
    assert after["messages"][:-2] == before["messages"] and after[VERSION_KEY] == before[VERSION_KEY] + 1


def test_a_session_another_replica_saved_reloads_off_the_loop(store):
    """Two replicas on one store take turns on a session: each turn finds the session saved by the other since,
    and reloads it (O(session)) in a worker thread, not on the loop; the conversation holds every turn once."""
    a, b = manager(store, True), manager(store, True)
    loads, real = [], store.load

    def load(key):
        loads.append(threading.get_ident())
        return real(key)

    async def main():
        await a.arun_turn(TurnRequest("s1", user("hello"), create=True))
        store.load = load
        for i in range(6):
            await (b if i % 2 == 0 else a).arun_turn(TurnRequest("s1", user(f"turn {i}")))
        return threading.get_ident()

    loop_thread = asyncio.run(main())
    assert len(loads) >= 6 and loop_thread not in loads  # b's first load, then a reload on every turn
    contents = [m["content"] for m in stored(store, "s1")["messages"] if m["role"] == "user"]
    assert contents == ["hello"] + [f"turn {i}" for i in range(6)]
    assert a.metrics()["sessions_active"] == b.metrics()["sessions_active"] == 0


def test_a_session_another_replica_ended_is_not_found_and_not_left_busy(store):
    a, b = manager(store, True), manager(store, True)

    async def main():
        await a.arun_turn(TurnRequest("s1", user("hello"), create=True))
        await b.arun_turn(TurnRequest("s1", user("again")))
        a.end("s1")
        with pytest.raises(SessionNotFound):
            await b.arun_turn(TurnRequest("s1", user("still there?")))
        return await b.arun_turn(TurnRequest("s1", user("anew"), create=True))  # nothing holds the id any more

    assert asyncio.run(main()).history_tokens == 0
    assert b.metrics()["sessions_active"] == 0


def test_an_abandoned_turn_finishes_though_only_its_task_holds_what_it_waits_for():
    """The loop keeps only a weak reference to a task: the one finishing an abandoned turn is kept by the
    turn machinery, or a garbage collection while it waits on a future nothing else holds (an engine's
    own) would destroy it, and the session would stay busy forever."""
    class OwnFuture(EchoBackend):
        def __init__(self):
            super().__init__(delay=0.01)
            self.pending: list = []  # weak references to the futures it waits on

        async def agenerate(self, request):
            n = 0
            async for chunk in super().agenerate(request):
                yield chunk
                n += 1
                if n == 2:
                    future = asyncio.get_running_loop().create_future()
                    self.pending.append(weakref.ref(future))
                    await future  # cancelled here: the engine still flushes what it has, after this

    backend = OwnFuture()
    mgr = manager(open_store("memory"), True, backend)
    sid = mgr.create("s9")

    async def main():
        stream = mgr.astream_turn(TurnRequest(sid, user("one two three four five")))
        await stream.__anext__()
        await stream.__anext__()
        await stream.aclose()  # the consumer leaves; the engine, drained by the finishing task, waits
        while not backend.pending:
            await asyncio.sleep(0.001)
        gc.collect()
        future = backend.pending[-1]()
        assert future is not None, "the task finishing the turn was collected"
        future.set_result(None)
        for _ in range(300):
            if mgr.metrics()["sessions_active"] == 0:
                return
            await asyncio.sleep(0.01)

    asyncio.run(main())
    assert mgr.metrics()["sessions_active"] == 0
    assert mgr.get(sid).messages[-1]["content"] == "echo: one "  # the two chunks the engine made


def test_a_server_at_capacity_refuses_a_turn_before_loading_its_session(store):
    """Capacity is taken before a cold session is loaded: a load is O(session) work."""
    SessionManager(EchoBackend(), template="qwen2.5", store=store).create("cold")
    mgr = SessionManager(EchoBackend(delay=0.05), template="qwen2.5", store=store, on_loop=True,
                         limits=ManagerLimits(max_active=1))
    mgr.create("busy")
    loads, real = [], store.load

    def load(key):
        loads.append(key)
        return real(key)

    store.load = load

    async def main():
        running = asyncio.ensure_future(mgr.arun_turn(TurnRequest("busy", user("one two three"))))
        while mgr.metrics()["sessions_active"] == 0:
            await asyncio.sleep(0.001)
        with pytest.raises(CapacityExceeded):
            await mgr.arun_turn(TurnRequest("cold", user("hi")))
        assert not [k for k in loads if k.endswith("cold")]
        await running
        return await mgr.arun_turn(TurnRequest("cold", user("hi")))  # capacity back: it loads and answers

    assert asyncio.run(main()).text == "echo: hi"


class SlowStop(EchoBackend):
    """Echo whose stop takes ``seconds``: once cancelled, its last chunk comes that much later (an engine
    finishing its step and freeing its slot)."""

    def __init__(self, seconds: float = 0.3, **kwargs):
        super().__init__(**kwargs)
        self.seconds = seconds

    def generate(self, request):
        for chunk in super().generate(request):
            if chunk.finish_reason == "cancelled":
                time.sleep(self.seconds)
            yield chunk

    async def agenerate(self, request):
        async for chunk in super().agenerate(request):
            if chunk.finish_reason == "cancelled":
                await asyncio.sleep(self.seconds)
            yield chunk


@WAYS
def test_a_turn_can_wait_for_the_stopping_turn_its_client_left(store, on_loop):
    """The consumer leaves a turn, whose engine takes 0.3 s to stop: the next turn finds the session busy, and
    ``await_stopped`` waits until the partial answer is saved; the server's turns wait that way by themselves
    (``start_stream``). A turn nobody asked to stop is not waited for beyond the grace."""
    mgr = manager(store, on_loop, SlowStop(delay=0.01))
    sid = mgr.create("s1")
    text = "one two three four five six seven eight nine ten"

    async def leave() -> None:
        stream = mgr.astream_turn(TurnRequest(sid, user(text)))
        await stream.__anext__()
        await stream.aclose()

    async def main():
        await leave()
        with pytest.raises(SessionBusy):
            await mgr.arun_turn(TurnRequest(sid, user("at once")))
        begun = time.monotonic()
        assert await mgr.await_stopped(sid)
        waited = time.monotonic() - begun
        await leave()
        chunks = await start_stream(mgr, TurnRequest(sid, user("retried")), asyncio.Event().wait)  # a client that stays
        answer = "".join([c.text async for c in chunks])
        live = mgr.astream_turn(TurnRequest(sid, user(text)))
        await live.__anext__()
        begun = time.monotonic()
        stopped = await mgr.await_stopped(sid, grace=0.05)
        live_wait = time.monotonic() - begun
        await live.aclose()
        assert await mgr.await_stopped(sid)  # left now: the wait is for its partial answer
        return waited, answer, stopped, live_wait

    waited, answer, stopped, live_wait = asyncio.run(main())
    assert waited >= 0.2 and answer == "echo: retried"
    assert stopped is False and live_wait < 0.25
    messages = mgr.get(sid).messages
    assert [m["content"] for m in messages if m["role"] == "user"] == [text, text, "retried", text]
    partials = [m["content"] for m in messages if m["role"] == "assistant"]
    assert all(("echo: " + text).startswith(p) and p != "echo: " + text for p in partials[:2] + partials[3:])


@pytest.mark.parametrize("streamed", [False, True], ids=["collected", "streamed"])
def test_a_turn_that_waited_for_a_stopping_one_is_not_started_for_a_client_gone_meanwhile(store, streamed):
    """The server waits for a stopping turn on the client's behalf: a client that leaves during that wait gets
    no turn run for nobody (``serve.request_turns.run`` and ``start_stream``, with the ASGI receive of a client that
    leaves after 50 ms)."""
    mgr = manager(store, True, SlowStop(seconds=0.5, delay=0.01))
    sid = mgr.create("s1")

    async def receive():
        await asyncio.sleep(0.05)
        return {"type": "http.disconnect"}

    async def main():
        stream = mgr.astream_turn(TurnRequest(sid, user("one two three four five six")))
        await stream.__anext__()
        await stream.aclose()  # that client left: its turn takes 0.5 s to stop
        with pytest.raises(SessionBusy):
            if streamed:
                await start_stream(mgr, TurnRequest(sid, user("nobody reads this")), receive)
            else:
                await run(mgr, TurnRequest(sid, user("nobody reads this")), receive)
        assert await mgr.await_stopped(sid)

    asyncio.run(main())
    assert [m["content"] for m in mgr.get(sid).messages if m["role"] == "user"] == ["one two three four five six"]
