"""Session stores on real files: round trips, compare-and-set, threads, a writer killed mid-save."""
from __future__ import annotations

import signal
import sqlite3
import subprocess
import sys
import textwrap
import threading

import pytest

from lmchat import Session
from lmchat.errors import StoreConflict, StoreError
from lmchat.stores import VERSION_KEY, MemoryStore, SQLiteStore, open_store
from lmchat.stores.sqlite import MIGRATIONS


def conversation(first: str, turns: int = 1, session_id: str | None = None) -> dict:
    session = Session("qwen2.5", system="Be brief.", session_id=session_id)
    for i in range(turns):
        session.prompt(first if i == 0 else f"question {i}")
        session.commit(f"answer {i}")
    return session.to_dict()


@pytest.fixture(params=["sqlite", "memory"])
def store(request, tmp_path):
    s = SQLiteStore(tmp_path / "sub" / "sessions.db") if request.param == "sqlite" else MemoryStore()
    yield s
    s.close()


def test_round_trip_restores_an_identical_session(store):
    data = conversation("What is the capital of France?", turns=2)
    assert store.save(data) == 1
    back = store.load(data["session_id"])
    assert back.pop(VERSION_KEY) == 1
    assert back == data
    restored = Session.from_dict(back)
    assert restored.context == Session.from_dict(data).context
    assert store.load("nope") is None


def test_versions_and_compare_and_set(store):
    data = conversation("hi")
    sid = data["session_id"]
    assert store.save(data, expected_version=0) == 1  # 0: must not exist yet
    assert store.save(data) == 2  # no expectation: unconditional
    assert store.save(data, expected_version=2) == 3
    with pytest.raises(StoreConflict) as info:
        store.save(data, expected_version=2)
    assert (info.value.expected, info.value.actual) == (2, 3)
    assert isinstance(info.value, StoreError)
    with pytest.raises(StoreConflict):
        store.save(data, expected_version=0)
    assert store.load(sid)[VERSION_KEY] == 3  # the failed saves changed nothing


def test_list_latest_and_delete(store):
    long_question = "Tell me   about\nthe history of " + "very " * 30 + "old towns"
    a = conversation(long_question, turns=3)
    b = conversation("second")
    store.save(a)
    store.save(b)
    infos = store.list()
    assert [i.id for i in infos] == [b["session_id"], a["session_id"]]
    assert store.latest() == b["session_id"]
    info = infos[1]
    assert info.title.startswith("Tell me about the history of very") and info.title.endswith("…")
    assert len(info.title) == 60 and "\n" not in info.title
    assert (info.turns, info.template, info.version) == (3, "qwen2.5", 1)
    store.save(a)  # saving again makes it the latest
    assert store.latest() == a["session_id"]
    assert len(store.list(limit=1)) == 1
    store.delete(a["session_id"])
    store.delete("absent")
    assert [i.id for i in store.list()] == [b["session_id"]]


def test_rejects_what_is_not_a_session(store):
    with pytest.raises(StoreError):
        store.save({"messages": []})
    with pytest.raises(StoreError):
        store.save({"session_id": "x", "bad": object()})


def test_sqlite_reopens_after_close_and_is_wal(tmp_path):
    path = tmp_path / "s.db"
    store = SQLiteStore(path)
    data = conversation("persist me", turns=2)
    store.save(data)
    store.close()
    with pytest.raises(StoreError):
        store.load(data["session_id"])
    again = SQLiteStore(path)
    assert again.load(data["session_id"])["messages"] == data["messages"]
    assert again.list()[0].title == "persist me"
    again.close()
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert conn.execute("PRAGMA user_version").fetchone()[0] == len(MIGRATIONS)
    conn.close()


def test_sqlite_refuses_a_newer_schema_and_a_non_database(tmp_path):
    path = tmp_path / "new.db"
    conn = sqlite3.connect(path)
    conn.execute(f"PRAGMA user_version = {len(MIGRATIONS) + 1}")
    conn.close()
    with pytest.raises(StoreError, match="newer"):
        SQLiteStore(path)
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"this is not an sqlite file" * 100)
    with pytest.raises(StoreError, match="junk.db"):
        SQLiteStore(junk)
    with pytest.raises(StoreError):
        SQLiteStore(":memory:")


def test_open_store():
    assert isinstance(open_store("memory"), MemoryStore)


def test_concurrent_threads_never_lose_an_update(tmp_path):
    """Threads increment one session through load + compare-and-set, and save their own sessions."""
    store = SQLiteStore(tmp_path / "threads.db")
    shared = conversation("shared")
    store.save(shared)
    sid, per_thread, threads = shared["session_id"], 15, 6
    errors = []

    def work(n: int) -> None:
        try:
            own = conversation(f"thread {n}")
            for _ in range(per_thread):
                store.save(own)
                while True:
                    data = store.load(sid)
                    version = data.pop(VERSION_KEY)
                    data["counter"] = data.get("counter", 0) + 1
                    try:
                        store.save(data, expected_version=version)
                        break
                    except StoreConflict:
                        continue
        except Exception as exc:  # surfaced in the main thread below
            errors.append(exc)

    pool = [threading.Thread(target=work, args=(n,)) for n in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    assert not errors
    final = store.load(sid)
    assert final["counter"] == per_thread * threads
    assert final[VERSION_KEY] == per_thread * threads + 1
    assert len(store.list(limit=100)) == threads + 1
    assert all(i.version == per_thread for i in store.list(limit=100) if i.id != sid)
    store.close()


WRITER = textwrap.dedent("""
    import sys
    from lmchat import Session
    from lmchat.stores import SQLiteStore

    store = SQLiteStore(sys.argv[1])
    sessions = [Session("qwen2.5", session_id=f"s{i}") for i in range(4)]
    n = 0
    while True:
        s = sessions[n % 4]
        s.prompt("question %d " % n + "x" * (n % 500))
        s.commit("answer %d" % n)
        store.save(s.to_dict())
        n += 1
        if n == 40:
            print("ready", flush=True)
""")


def test_a_killed_writer_leaves_every_session_loadable(tmp_path):
    path = tmp_path / "killed.db"
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(path)], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "ready"
    finally:
        proc.send_signal(signal.SIGKILL)  # mid-loop: very likely inside a save
        proc.wait(timeout=10)
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    conn.close()
    store = SQLiteStore(path)
    infos = store.list()
    assert sorted(i.id for i in infos) == ["s0", "s1", "s2", "s3"]
    for info in infos:
        data = store.load(info.id)
        assert data[VERSION_KEY] == info.version
        session = Session.from_dict(data)
        assert session.turns == info.turns == info.version  # one turn per save: no half-written turn
        assert not session.pending
    store.save(Session.from_dict(store.load("s0")).to_dict())  # and it stays writable
    store.close()
