"""The SQLite store on real files: schema and migrations, bounded connections, group commit under savepoints,
two processes racing on one session, a writer SIGKILLed mid-append."""
from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from lmchat import Session
from lmchat.errors import StoreConflict, StoreError
from lmchat.stores import VERSION_KEY, SQLiteStore, Summary
from lmchat.stores.sqlite import MIGRATIONS

from .test_stores import conversation, first_save, json_copy, turn


def open_fds(path) -> int:
    """This process's descriptors on the store's files (the database, its WAL and shared memory)."""
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):  # a descriptor closed since the listing
            count += os.readlink(f"/proc/self/fd/{fd}").startswith(str(path))
    return count


def store_threads(folder) -> list[threading.Thread]:
    """The writer threads of stores under ``folder`` (other tests' stores may still be open in this process)."""
    return [t for t in threading.enumerate() if t.name.startswith(f"lmchat-sqlite-writer:{folder}")]


def test_reopens_after_close_and_is_wal(tmp_path):
    path = tmp_path / "s.db"
    store = SQLiteStore(path)
    data = conversation("persist me", turns=2)
    store.save(data)
    store.close()
    with pytest.raises(StoreError, match="closed"):
        store.load(data["session_id"])
    again = SQLiteStore(path)
    assert again.load(data["session_id"])["messages"] == data["messages"]
    assert again.list()[0].title == "persist me"
    again.close()
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert conn.execute("PRAGMA user_version").fetchone()[0] == len(MIGRATIONS)
    conn.close()


def test_refuses_a_newer_schema_and_a_non_database(tmp_path):
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
    assert not store_threads(tmp_path) and open_fds(tmp_path) == 0  # a refused file leaves nothing open


@pytest.mark.parametrize("schema", [1, 2])
def test_a_file_of_an_older_schema_migrates_and_its_sessions_load(tmp_path, schema):
    """Sessions written by an older lmchat (whole snapshots in sessions.data) load, list and take appends."""
    path = tmp_path / "old.db"
    conn = sqlite3.connect(path)
    for statements in MIGRATIONS[:schema]:
        for sql in statements:
            conn.execute(sql)
    conn.execute(f"PRAGMA user_version = {schema}")
    session = Session("qwen2.5", system="Be brief.", session_id="old-1")
    session.prompt("written by the old store")
    session.commit("hello")
    data = session.to_dict()
    owner = ", owner" if schema >= 2 else ""
    conn.execute("INSERT INTO sessions "
                 f"(id, version, seq, created_at, updated_at, title, turns, template, data{owner}) "
                 "VALUES ('old-1', 4, 1, 1.0, 2.0, 'written by the old store', 1, 'qwen2.5', "
                 f"?{', ?' if owner else ''})",
                 (json.dumps(data), *(("o1",) if owner else ())))
    conn.commit()
    conn.close()
    store = SQLiteStore(path)
    assert store.load("old-1") == {**json_copy(data), VERSION_KEY: 4}
    info = store.list()[0]
    assert (info.id, info.version, info.turns, info.title, info.owner) == (
        "old-1", 4, 1, "written by the old store", "o1" if owner else "")
    assert store.records("old-1").base_version == 4
    session.mark_saved()
    assert turn(store, session, 4, "and continued by the new one") == 5
    assert store.load("old-1") == {**json_copy(session.to_dict()), VERSION_KEY: 5}
    store.close()
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == len(MIGRATIONS)
    assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    conn.close()


def test_connections_and_threads_are_bounded_and_close_releases_everything(tmp_path):
    """A thread per call (as the manager's turns) never opens a connection per thread; close() leaves nothing."""
    threads_before = threading.active_count()
    store = SQLiteStore(tmp_path / "bounded.db", readers=3)
    session = Session("qwen2.5")
    first_save(store, session)
    errors, peak = [], []

    def work(n: int) -> None:
        try:
            own = conversation(f"thread {n}")
            store.save(own)
            store.load(own["session_id"])
            store.list()
            store.append(own["session_id"], {"set": {"n": n}}, expected_version=1, summary=Summary("t", 1, "q"))
            peak.append(open_fds(tmp_path))
        except Exception as exc:  # surfaced below
            errors.append(exc)

    for wave in range(4):
        pool = [threading.Thread(target=work, args=(wave * 50 + n,)) for n in range(50)]
        for t in pool:
            t.start()
        for t in pool:
            t.join()
    assert not errors
    assert len(store.list(limit=1000)) == 201
    assert max(peak) <= 3 * (1 + 3)  # the database, its -wal and -shm per connection: 1 writer + 3 readers
    assert len(store_threads(tmp_path)) == 1
    store.close()
    assert open_fds(tmp_path) == 0 and not store_threads(tmp_path)
    assert threading.active_count() <= threads_before  # (a store another test dropped may have been finalized)


def test_a_dropped_store_is_finalized(tmp_path):
    import gc

    store = SQLiteStore(tmp_path / "dropped.db")
    store.save(conversation("x"))
    del store
    gc.collect()
    deadline = time.monotonic() + 5
    while store_threads(tmp_path) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not store_threads(tmp_path) and open_fds(tmp_path) == 0


def hold_the_writer(store: SQLiteStore) -> tuple[threading.Event, threading.Thread]:
    """Keep the writer thread busy until the event is set: what is queued meanwhile commits as one batch."""
    release, started = threading.Event(), threading.Event()

    def block(conn):
        started.set()
        release.wait(10)

    holder = threading.Thread(target=store._writer.submit, args=(block, "hold the writer"))
    holder.start()
    started.wait(10)
    return release, holder


def test_group_commit_isolates_each_write_of_a_batch(tmp_path):
    """One transaction for many queued writes; a conflict or a failing write rolls back itself only."""
    store = SQLiteStore(tmp_path / "batch.db")
    sessions = [Session("qwen2.5", session_id=f"s{n}") for n in range(12)]
    for s in sessions:
        turn(store, s, first_save(store, s), "hello")
        store.compact(s.session_id)  # so that none of the batch's appends is due for compaction
        s.prompt("again")
        s.commit("hi")
    before = store.group_commits
    release, holder = hold_the_writer(store)
    outcomes: dict[str, object] = {}

    def append(s: Session, expected: int) -> None:
        try:
            outcomes[s.session_id] = store.append(s.session_id, s.changes(), expected_version=expected,
                                                  summary=Summary.of_session(s))
        except StoreError as exc:
            outcomes[s.session_id] = exc

    def failing(conn):  # writes, then fails: its savepoint must take the write back
        conn.execute("INSERT INTO patches (id, version, data) VALUES ('s0', 99, '{}')")
        raise sqlite3.IntegrityError("a write that fails after it wrote")

    def run_failing() -> None:
        try:
            store._writer.submit(failing, "fail on purpose")
        except StoreError as exc:
            outcomes["failing"] = exc

    workers = [threading.Thread(target=append, args=(s, 2 if n % 3 else 7)) for n, s in enumerate(sessions)]
    workers.append(threading.Thread(target=run_failing))
    for t in workers:
        t.start()
    deadline = time.monotonic() + 10
    while store._writer._queue.qsize() < len(workers) and time.monotonic() < deadline:
        time.sleep(0.005)
    release.set()
    for t in [holder, *workers]:
        t.join()
    transactions, writes = (a - b for a, b in zip(store.group_commits, before, strict=True))
    assert (transactions, writes) == (2, len(workers) + 1)  # the holder's, then everything queued behind it
    for n, s in enumerate(sessions):
        if n % 3:
            assert outcomes[s.session_id] == 3
            assert store.load(s.session_id) == {**json_copy(s.to_dict()), VERSION_KEY: 3}
        else:
            assert isinstance(outcomes[s.session_id], StoreConflict) and store.version(s.session_id) == 2
    assert isinstance(outcomes["failing"], StoreError) and "fail on purpose" in str(outcomes["failing"])
    assert store.records("s0").patches == 0 and store.version("s0") == 2
    store.close()


def test_a_write_alone_in_its_batch_that_fails_takes_back_what_it_wrote(tmp_path):
    """Without a batch there is no savepoint: the failing write's transaction is rolled back whole, and the
    writer goes on (a conflict, then a write that fails after writing, then a good append)."""
    store = SQLiteStore(tmp_path / "alone.db")
    s = Session("qwen2.5", session_id="s0")
    version = turn(store, s, first_save(store, s), "hello")
    before = store.group_commits
    s.prompt("again")
    s.commit("hi")
    with pytest.raises(StoreConflict):
        store.append("s0", s.changes(), expected_version=version + 5, summary=Summary.of_session(s))

    def failing(conn):
        conn.execute("INSERT INTO patches (id, version, data) VALUES ('s0', 99, '{}')")
        conn.execute("UPDATE sessions SET version = 99 WHERE id = 's0'")
        raise sqlite3.IntegrityError("a write that fails after it wrote")

    with pytest.raises(StoreError, match="fail on purpose"):
        store._writer.submit(failing, "fail on purpose")
    assert store.version("s0") == version and store.records("s0").patches == 1
    assert store.append("s0", s.changes(), expected_version=version, summary=Summary.of_session(s)) == version + 1
    assert store.load("s0") == {**json_copy(s.to_dict()), VERSION_KEY: version + 1}
    transactions, writes = (a - b for a, b in zip(store.group_commits, before, strict=True))
    assert transactions == writes >= 3  # each alone in its transaction (a compaction may follow the append)
    store.close()


def test_an_awaited_append_cancelled_in_the_queue_is_not_written_and_spares_its_batch(tmp_path):
    """A turn on the event loop whose task is cancelled while its append waits for the writer (a client
    gone): that append is not written, and the others of the same batch still get their results."""
    import asyncio

    store = SQLiteStore(tmp_path / "cancel.db")
    sessions = [Session("qwen2.5", session_id=f"s{n}") for n in range(3)]
    for s in sessions:
        first_save(store, s)
        s.prompt("hello")
        s.commit("hi")
    release, holder = hold_the_writer(store)

    async def main() -> list:
        tasks = [asyncio.ensure_future(store.aappend(s.session_id, s.changes(), expected_version=1,
                                                     summary=Summary.of_session(s))) for s in sessions]
        deadline = time.monotonic() + 10
        while store._writer._queue.qsize() < len(tasks) and time.monotonic() < deadline:
            await asyncio.sleep(0.005)
        tasks[1].cancel()
        await asyncio.sleep(0)
        release.set()
        return await asyncio.gather(*tasks, return_exceptions=True)

    first, cancelled, third = asyncio.run(main())
    holder.join()
    assert (first, third) == (2, 2) and isinstance(cancelled, asyncio.CancelledError)
    assert [store.version(s.session_id) for s in sessions] == [2, 1, 2]
    s1 = sessions[1]  # the writer is sound: the cancelled turn can be appended again
    assert store.append("s1", s1.changes(), expected_version=1, summary=Summary.of_session(s1)) == 2
    assert store.load("s1") == {**json_copy(s1.to_dict()), VERSION_KEY: 2}
    store.close()


def test_fifty_writer_threads_share_transactions(tmp_path):
    store = SQLiteStore(tmp_path / "fifty.db")
    versions = {}

    def work(n: int) -> None:
        session = Session("qwen2.5", session_id=f"w{n}")
        version = first_save(store, session)
        for i in range(10):
            version = turn(store, session, version, f"q{i}")
        versions[n] = version

    pool = [threading.Thread(target=work, args=(n,)) for n in range(50)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    transactions, writes = store.group_commits
    assert sorted(versions.values()) == [11] * 50
    assert writes >= 50 * 11 and writes / transactions > 1.5  # fsyncs shared by several writers
    store.close()


RACER = textwrap.dedent("""
    import sys
    from lmchat.errors import StoreConflict
    from lmchat.stores import SQLiteStore, Summary

    store = SQLiteStore(sys.argv[1])
    name, attempts, wins = sys.argv[2], int(sys.argv[3]), []
    print("ready", flush=True)
    sys.stdin.readline()
    for n in range(attempts):
        version = store.version("shared")
        patch = {"lists": {"messages": [version - 1, [{"role": "user", "content": f"{name} {version + 1}"}]]},
                 "set": {"last": name}}
        try:
            wins.append(store.append("shared", patch, expected_version=version, summary=Summary(name, 0, "q")))
        except StoreConflict:
            pass
    store.close()
    print(" ".join(map(str, wins)), flush=True)
""")


def test_two_processes_appending_to_one_session_never_both_win(tmp_path):
    path = tmp_path / "shared.db"
    store = SQLiteStore(path)
    store.save({**Session("qwen2.5", session_id="shared").to_dict()})
    procs = [subprocess.Popen([sys.executable, "-c", RACER, str(path), name, "150"], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True) for name in ("a", "b")]
    for proc in procs:
        assert proc.stdout.readline().strip() == "ready"
    for proc in procs:  # go together
        proc.stdin.write("go\n")
        proc.stdin.flush()
    wins = {}
    for name, proc in zip("ab", procs, strict=True):
        out, _ = proc.communicate(timeout=120)
        assert proc.returncode == 0
        wins[name] = [int(v) for v in out.split()]
    final = store.load("shared")
    version = final[VERSION_KEY]
    assert not set(wins["a"]) & set(wins["b"])  # no version was won twice
    assert sorted(wins["a"] + wins["b"]) == list(range(2, version + 1))  # and every version has its one winner
    contents = [m["content"] for m in final["messages"]]
    assert contents == [f"{'a' if v in wins['a'] else 'b'} {v}" for v in range(2, version + 1)]
    store.close()


APPENDER = textwrap.dedent("""
    import sys
    from lmchat import Session
    from lmchat.stores import SQLiteStore, Summary

    store = SQLiteStore(sys.argv[1])
    sessions = [Session("qwen2.5", session_id=f"s{i}") for i in range(4)]
    versions = []
    for s in sessions:
        versions.append(store.save(s.to_dict()))
        s.mark_saved()
    n = 0
    while True:
        i = n % 4
        s = sessions[i]
        s.prompt("question %d " % n + "x" * (n % 700))
        s.commit("answer %d" % n)
        if sys.argv[2] == "append":
            versions[i] = store.append(s.session_id, s.changes(), expected_version=versions[i],
                                       summary=Summary.of_session(s))
        else:
            versions[i] = store.save(s.to_dict(), expected_version=versions[i])
        s.mark_saved()
        n += 1
        if n == 60:
            print("ready", flush=True)
""")


@pytest.mark.parametrize("writer", ["append", "save"])
def test_a_writer_killed_mid_write_leaves_every_session_at_its_previous_version(tmp_path, writer):
    path = tmp_path / "killed.db"
    proc = subprocess.Popen([sys.executable, "-c", APPENDER, str(path), writer], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "ready"
        time.sleep(random.uniform(0, 0.3))  # somewhere in the loop: inside an append, a compaction, a commit
    finally:
        proc.send_signal(signal.SIGKILL)
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
        assert session.turns == info.turns == info.version - 1  # one turn per write: no half-written turn
        assert not session.pending
        session.mark_saved()
        assert turn(store, session, info.version, "after the crash") == info.version + 1  # and it stays writable
    store.close()


def test_a_forked_child_is_told_to_open_its_own_store(tmp_path):
    store = SQLiteStore(tmp_path / "forked.db")
    store.save(conversation("before the fork"))
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: no writer thread here, and the parent's connections are not its to use
        messages = []
        for call in (lambda: store.save(conversation("x")), lambda: store.list()):
            try:
                call()
                messages.append("no error")
            except StoreError as exc:
                messages.append(str(exc))
        os.write(write, json.dumps(messages).encode())
        store.close()  # leaves the parent's connections and WAL alone
        os._exit(0)
    os.close(write)
    os.waitpid(pid, 0)
    with os.fdopen(read) as f:
        messages = json.loads(f.read())
    assert all("before a fork: open one in each process" in m for m in messages), messages
    assert len(store.list()) == 1  # the parent's store is unaffected
    store.save(conversation("after the fork"))
    store.close()
    assert sqlite3.connect(tmp_path / "forked.db").execute("SELECT COUNT(*) FROM sessions").fetchone()[0] == 2
