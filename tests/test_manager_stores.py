"""The session manager on shared and durable stores: two replicas on one real Redis, a Redis outage
mid-turn, session expiry, and a process killed mid-turn on SQLite."""
from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
import time

import pytest

from lmchat import SessionManager
from lmchat.backends.echo import EchoBackend
from lmchat.errors import SessionNotFound, StoreConflict, StoreError
from lmchat.manager import ManagerLimits, TurnRequest
from lmchat.manager.ids import owner_key, store_key
from lmchat.stores import VERSION_KEY, SQLiteStore

from .test_manager import assert_alternates, user


def replica(url: str, prefix: str, delay: float = 0.0, **kwargs) -> SessionManager:
    from lmchat.stores.redis import RedisStore

    return SessionManager(EchoBackend(delay=delay), template="qwen2.5",
                          store=RedisStore(url, prefix=prefix, timeout=1.0), **kwargs)


def test_two_replicas_continue_one_session_alternately(redis_server, prefix):
    a, b = replica(redis_server.url, prefix), replica(redis_server.url, prefix)
    sid = a.create(owner="k")
    for n in range(3):
        a.run_turn(TurnRequest(sid, user(f"from a {n}"), owner="k"))
        r = b.run_turn(TurnRequest(sid, user(f"from b {n}"), owner="k"))
        assert r.history_tokens > 0  # b's prompt holds a's turns
    for mgr in (a, b):
        messages = mgr.get(sid, owner="k").messages
        assert [m["content"] for m in messages if m["role"] == "user"] == [
            f"from {who} {n}" for n in range(3) for who in "ab"]
        assert_alternates(messages)
    assert a.store.version(store_key(sid, owner_key("k"))) == 7  # ids live in their owner's namespace
    with pytest.raises(SessionNotFound):
        b.get(sid, owner="other")
    b.end(sid, owner="k")
    with pytest.raises(SessionNotFound):  # a still held it in memory: the store says it is gone
        a.run_turn(TurnRequest(sid, user("gone?"), owner="k"))


def test_concurrent_turns_on_two_replicas_append_once(redis_server, prefix):
    a, b = replica(redis_server.url, prefix, delay=0.01), replica(redis_server.url, prefix, delay=0.01)
    sid = a.create()
    a.run_turn(TurnRequest(sid, user("warm up")))
    b.get(sid)  # both hold version 2 in memory
    barrier, outcomes = threading.Barrier(2), {}

    def turn(name, mgr):
        barrier.wait()
        try:
            outcomes[name] = mgr.run_turn(TurnRequest(sid, user(f"racing from {name} with some words")))
        except StoreConflict as exc:
            outcomes[name] = exc

    threads = [threading.Thread(target=turn, args=item) for item in (("a", a), ("b", b))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    winners = [n for n, o in outcomes.items() if not isinstance(o, Exception)]
    assert len(winners) == 1 and sum(isinstance(o, StoreConflict) for o in outcomes.values()) == 1
    stored = a.store.load(sid)
    assert stored[VERSION_KEY] == 3 and len(stored["messages"]) == 4  # one exchange, not two
    loser = b if winners == ["a"] else a
    loser.run_turn(TurnRequest(sid, user("after the race")))  # reloaded: continues from the winner's turn
    messages = loser.get(sid).messages
    assert_alternates(messages)
    assert [m["content"] for m in messages if m["role"] == "user"] == [
        "warm up", f"racing from {winners[0]} with some words", "after the race"]


def test_redis_killed_mid_turn_loses_only_that_turn(own_redis):
    mgr = replica(own_redis.url, "t:", delay=0.02)
    sid = mgr.create()
    mgr.run_turn(TurnRequest(sid, user("saved before")))
    stream = mgr.stream_turn(TurnRequest(sid, user("one two three four five six")))
    next(stream)
    own_redis.kill()
    with pytest.raises(StoreError, match="is Redis running"):
        list(stream)
    with pytest.raises(StoreError):
        mgr.create()
    with pytest.raises(StoreError):
        mgr.run_turn(TurnRequest(sid, user("while down")))
    assert mgr.metrics()["errors"]["StoreError"] >= 3 and mgr.metrics()["sessions_active"] == 0
    own_redis.start()  # its append-only file has every acknowledged save
    messages = mgr.get(sid).messages
    assert [m["content"] for m in messages] == ["saved before", "echo: saved before"]  # no half turn
    assert mgr.run_turn(TurnRequest(sid, user("back"))).text == "echo: back"
    assert mgr.store.version(sid) == 3


def test_store_ttl_expires_sessions(redis_server, prefix):
    mgr = replica(redis_server.url, prefix, limits=ManagerLimits(store_ttl=0.3))
    sid = mgr.create()
    mgr.run_turn(TurnRequest(sid, user("soon gone")))
    time.sleep(0.5)
    with pytest.raises(SessionNotFound):
        mgr.run_turn(TurnRequest(sid, user("still there?")))
    assert mgr.list() == []


CHILD = textwrap.dedent("""
    import sys
    from lmchat import SessionManager, TurnRequest
    from lmchat.backends.echo import EchoBackend
    from lmchat.stores import SQLiteStore

    mgr = SessionManager(EchoBackend(delay=0.05), template="qwen2.5", store=SQLiteStore(sys.argv[1]))
    sid = mgr.create(session_id="durable")
    for n in range(3):
        mgr.run_turn(TurnRequest(sid, [{"role": "user", "content": f"committed {n}"}], max_new_tokens=2))
    ask = [{"role": "user", "content": "one two three four five six seven"}]
    for chunk in mgr.stream_turn(TurnRequest(sid, ask)):
        print("streaming", flush=True)
""")


def test_a_process_killed_mid_turn_leaves_the_committed_turns(tmp_path):
    path = tmp_path / "durable.db"
    proc = subprocess.Popen([sys.executable, "-c", CHILD, str(path)], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "streaming"
    finally:
        proc.kill()
        proc.wait(timeout=10)
    mgr = SessionManager(EchoBackend(), template="qwen2.5", store=SQLiteStore(path))
    session = mgr.get("durable")
    assert not session.pending and session.turns == 3
    assert [m["content"] for m in session.messages if m["role"] == "user"] == [f"committed {n}" for n in range(3)]
    assert mgr.store.version("durable") == 4
    assert mgr.run_turn(TurnRequest("durable", user("resumed"))).text == "echo: resumed"
