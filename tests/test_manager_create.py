"""A session that its first turn creates (``create=True``, a resent ``history``): stored by that turn's save.

The first turn's save is the session's whole snapshot with compare-and-set on
"not stored yet": one write where a create and an append were two (on SQLite,
one ``fsync``). Until it lands the session exists only for that turn: nothing
else finds it, and a turn that is refused or fails leaves nothing behind. Each
test runs on the real memory and SQLite stores, on the event loop and in a
pool worker.
"""
from __future__ import annotations

import asyncio
import threading
import time

import pytest

import lmchat
from lmchat import SessionManager, SessionPolicy
from lmchat.backends.echo import EchoBackend
from lmchat.errors import (
    BackendError,
    CapacityExceeded,
    LmchatError,
    SessionBusy,
    SessionLengthExceeded,
    SessionNotFound,
    StoreConflict,
)
from lmchat.manager import ManagerLimits, TurnRequest
from lmchat.manager.ids import owner_key, store_key
from lmchat.stores import VERSION_KEY, MemoryStore

from .test_manager_loop import FailingEcho, user

WAYS = pytest.mark.parametrize("on_loop", [True, False], ids=["on-loop", "pool"])


def manager(store, on_loop: bool, backend=None, **kwargs) -> SessionManager:
    return SessionManager(backend or EchoBackend(), template="qwen2.5", store=store, on_loop=on_loop, **kwargs)


def key_of(store, sid: str) -> str:
    return next(i.id for i in store.list(owner=None) if i.id.endswith(sid))


def first_words(mgr: SessionManager, sid: str) -> list[str]:
    return [m["content"] for m in mgr.get(sid).messages if m["role"] == "user"]


@WAYS
def test_the_first_turn_stores_the_session_in_one_write(store, on_loop):
    mgr = manager(store, on_loop)
    writes = store.group_commits[1] if hasattr(store, "group_commits") else None

    async def main():
        await mgr.arun_turn(TurnRequest("s1", user("hello"), create=True))
        await mgr.arun_turn(TurnRequest("s1", user("again"), create=True))  # it exists now: an ordinary turn

    asyncio.run(main())
    # the first turn's save is the base (version 1, no patch), the second turn's a patch on it
    info = store.records(key_of(store, "s1"))
    assert (info.version, info.base_version, info.patches) == (2, 1, 1)
    if writes is not None:
        assert store.group_commits[1] - writes == 2
    assert first_words(mgr, "s1") == ["hello", "again"]


@WAYS
def test_a_history_creates_its_session_with_the_first_turn_too(store, on_loop):
    mgr = manager(store, on_loop)
    history = [{"role": "system", "content": "Be brief."}, *user("hi")]
    assert asyncio.run(mgr.arun_turn(TurnRequest("h1", history=history))).text == "echo: hi"
    info = store.records(key_of(store, "h1"))
    assert (info.version, info.patches) == (1, 0)
    assert mgr.get("h1").messages[0] == {"role": "system", "content": "Be brief."}


def refused(store, on_loop: bool, how: str):
    """A manager and a first turn on "new" that does not commit, ``how``: refused before it starts (the
    prompt overflows ``session_len``; no capacity left) or failed mid-answer (the engine dies)."""
    if how == "overflow":
        too_short = SessionPolicy(session_len=40)
        return manager(store, on_loop, session_defaults=too_short), SessionLengthExceeded, "word " * 50
    if how == "capacity":
        return manager(store, on_loop, limits=ManagerLimits(max_active=0)), CapacityExceeded, "hi"
    backend = FailingEcho(after=1)
    backend.failing = True
    return manager(store, on_loop, backend), Exception, "one two three four"


@WAYS
@pytest.mark.parametrize("how", ["overflow", "capacity", "engine"])
def test_a_first_turn_that_does_not_commit_leaves_nothing(store, on_loop, how):
    mgr, error, prompt = refused(store, on_loop, how)

    async def main():
        with pytest.raises(error):
            await mgr.arun_turn(TurnRequest("new", user(prompt), create=True))

    asyncio.run(main())
    assert store.list(owner=None) == []
    assert mgr.find("new") is None
    assert mgr.metrics()["sessions_in_memory"] == 0
    assert mgr.metrics()["sessions_active"] == 0
    with pytest.raises(SessionNotFound):  # not even in memory: a turn without create does not find it
        mgr.run_turn(TurnRequest("new", user("hi")))
    # the id is new again: the next turn creates it
    ok = manager(store, on_loop)
    assert asyncio.run(ok.arun_turn(TurnRequest("new", user("hi"), create=True))).text == "echo: hi"
    assert first_words(ok, "new") == ["hi"]


def test_while_its_first_turn_runs_the_session_is_busy_and_not_stored(store):
    mgr = manager(store, False)
    stream = mgr.stream_turn(TurnRequest("s2", user("one two three"), create=True))  # primed: the session is claimed
    assert next(stream).text
    assert mgr.find("s2") is None  # nothing committed yet
    assert store.list(owner=None) == []
    with pytest.raises(SessionBusy):
        mgr.stream_turn(TurnRequest("s2", user("me too"), create=True))
    for _ in stream:
        pass
    assert first_words(mgr, "s2") == ["one two three"]


def test_two_replicas_creating_one_id_keep_the_save_that_landed_first(store):
    """Replica A's first turn is mid-answer when replica B creates the same id and saves: A's save loses its
    compare-and-set, nothing of A's turn is stored, and A continues B's session on its next turn."""
    a, b = manager(store, False), manager(store, False)
    stream = a.stream_turn(TurnRequest("race", user("from a"), create=True))
    next(stream)
    b.run_turn(TurnRequest("race", user("from b"), create=True))
    before = store.load(key_of(store, "race"))
    with pytest.raises(StoreConflict):
        for _ in stream:
            pass
    assert store.load(key_of(store, "race")) == before
    assert a.metrics()["sessions_in_memory"] == 0
    a.run_turn(TurnRequest("race", user("a again"), create=True))
    assert first_words(b, "race") == ["from b", "a again"]


def test_a_stored_row_of_another_owner_under_the_id_is_not_found_not_created_over(store):
    """A store whose row under the id says another owner (hand-edited, or written by a buggy replica): the
    turn is refused at once, and the row is left as it was (it is not taken for a free id and replaced)."""
    mgr = manager(store, False)
    mgr.create("x", owner="alice")
    data = store.load(key_of(store, "x"))
    row = {k: v for k, v in data.items() if k != VERSION_KEY}
    store.save({**row, "session_id": store_key("x", owner_key(None))})  # alice's session under no owner's key
    before = store.load("x")
    outcome: list = []

    def first_turn() -> None:
        try:
            mgr.run_turn(TurnRequest("x", user("hi"), create=True))
        except SessionNotFound as exc:
            outcome.append(exc)

    worker = threading.Thread(target=first_turn, daemon=True)
    worker.start()
    worker.join(5)
    assert not worker.is_alive() and outcome
    assert store.load("x") == before


class FailsOn(EchoBackend):
    """Echo whose engine dies mid-answer on a turn whose prompt holds ``word``."""

    def __init__(self, word: str, **kwargs):
        super().__init__(**kwargs)
        self.word = word

    def generate(self, request):
        for n, chunk in enumerate(super().generate(request)):
            if n == 1 and self.word in request.last_user:
                raise BackendError("the engine died")
            yield chunk


@pytest.mark.parametrize("replicas", [1, 2])
def test_many_requests_racing_to_create_one_id_store_each_answered_turn_once(store, replicas):
    """32 threads send first turns on one id, on one manager or two sharing the store, a third of them
    failing mid-answer: what is stored is every answered turn once, and nothing is left claimed."""
    managers = [manager(store, False, FailsOn("fail", delay=0.001)) for _ in range(replicas)]
    answered, lock = [], threading.Lock()

    def client(i: int) -> None:
        mgr, prompt = managers[i % replicas], f"{'fail' if i % 3 == 0 else 'ask'} {i}"
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                mgr.run_turn(TurnRequest("hot", user(prompt), create=True))
            except (SessionBusy, StoreConflict):
                time.sleep(0.001)  # another client's turn holds the id, or saved first: try again
                continue
            except BackendError:
                return
            with lock:
                answered.append(prompt)
            return
        raise AssertionError(f"client {i} never got a turn")

    threads = [threading.Thread(target=client, args=(i,)) for i in range(32)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not any(t.is_alive() for t in threads)
    assert sorted(answered) == sorted(f"ask {i}" for i in range(32) if i % 3)
    assert sorted(first_words(managers[0], "hot")) == sorted(answered)
    assert all(m.metrics()["sessions_active"] == 0 for m in managers)
    assert store.records(key_of(store, "hot")).version == len(answered)


@pytest.mark.parametrize("name", lmchat.template_names())
def test_every_template_stores_the_same_session_whether_created_first_or_by_its_turn(name):
    """Three turns (a plain one, unicode and whitespace, an empty message) on a session made by ``create()``
    and on one its first turn makes, on every registered template: the same answers and the same stored
    session, byte for byte but for the version (one write fewer), or the same refusal."""

    def outcome(call):
        try:
            return call()
        except LmchatError as exc:
            return type(exc).__name__

    ways = {}
    for first in ("create()", "turn"):
        mem = MemoryStore()
        mgr = SessionManager(EchoBackend(), template=name, store=mem)
        if first == "create()":
            mgr.create("t")
        results = [outcome(lambda text=text, mgr=mgr: mgr.run_turn(TurnRequest("t", user(text), create=True)).text)
                   for text in ("Hello there", "  tabs\tand  spaces, 中文 😀 ", "")]
        stored = [mem.load(i.id) for i in mem.list(owner=None)]
        ways[first] = (results, [{k: v for k, v in d.items() if k != VERSION_KEY} for d in stored])
        assert mgr.metrics()["sessions_active"] == 0
    assert ways["create()"] == ways["turn"]
    assert any(r.startswith("echo") for r in ways["turn"][0] if isinstance(r, str))  # a turn ran
