"""Session stores under the session manager: commits per second, and memory per idle session.

A *commit* is what the manager does after every turn: snapshot the session
(``Session.to_dict`` plus its owner), serialise it and save it with
compare-and-set on the version it last saw, one durable write per commit (no
batching). Sessions hold ``--turns`` exchanges; ``--sessions`` of them are
committed round-robin. Targets: MemoryStore >= 20k/s, SQLite (WAL,
``synchronous=FULL``, on the disk of ``--dir``) >= 2k/s, Redis on loopback
(a ``redis-server`` started here, default persistence: none) >= 2k/s.

Also: end-to-end turns per second through the manager (echo backend,
MemoryStore), and the Python memory an idle session costs the manager
(tracemalloc over ``--idle`` sessions of 4 exchanges each).
"""
from __future__ import annotations

import argparse
import gc
import importlib.util
import shutil
import socket
import statistics
import subprocess
import tempfile
import time
import tracemalloc

from lmchat import Session, SessionManager
from lmchat.backends.echo import EchoBackend
from lmchat.manager.ids import dump
from lmchat.stores import MemoryStore, SQLiteStore
from lmchat.stores.base import record

from .common import save, table

TARGETS = {"memory": 20_000, "sqlite": 2_000, "redis": 2_000}


def conversation(turns: int, n: int) -> Session:
    session = Session("qwen2.5", system="You are a helpful assistant.", session_id=f"bench-{n}")
    for i in range(turns):
        session.prompt(f"Question number {i}: what is {i} + {i}? Explain briefly.")
        session.commit(f"{i} + {i} = {2 * i}. Adding a number to itself doubles it.")
    return session


def commits_per_second(store, sessions: list[Session], seconds: float, rounds: int = 5) -> tuple[float, float, int]:
    """Round-robin CAS commits for about ``seconds``; returns (median, lowest round's commits/s, commits).

    The median of several rounds, since a shared machine's fsync latency and CPU come and go.
    """
    versions = {s.session_id: 0 for s in sessions}
    rates, total = [], 0
    for _ in range(rounds):
        n, start = 0, time.perf_counter()
        deadline = start + seconds / rounds
        while time.perf_counter() < deadline:
            for s in sessions:
                versions[s.session_id] = store.save(dump(s, "owner-hash"), expected_version=versions[s.session_id])
            n += len(sessions)
        rates.append(n / (time.perf_counter() - start))
        total += n
    return statistics.median(rates), min(rates), total


def start_redis(folder: str) -> tuple[subprocess.Popen, str] | None:
    """A redis-server on a free loopback port; None without the server or redis-py."""
    binary = shutil.which("redis-server")
    if binary is None or importlib.util.find_spec("redis") is None:
        return None
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([binary, "--port", str(port), "--bind", "127.0.0.1", "--dir", folder, "--save", "",
                             "--appendonly", "no"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(500):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.1).close()
            return proc, f"redis://127.0.0.1:{port}/0"
        except OSError:
            time.sleep(0.01)
    proc.kill()
    raise RuntimeError("redis-server did not start")


def manager_turns_per_second(turns: int = 2000) -> float:
    mgr = SessionManager(EchoBackend(), template="qwen2.5")
    ids = [mgr.create() for _ in range(20)]
    start = time.perf_counter()
    for i in range(turns):
        mgr.run_turn(ids[i % len(ids)], [{"role": "user", "content": f"question {i}"}])
    return turns / (time.perf_counter() - start)


def bytes_per_idle_session(count: int, turns: int, folder: str) -> float:
    """Python memory the manager holds per idle session (an SQLite store: its pages are not Python's)."""
    mgr = SessionManager(EchoBackend(), template="qwen2.5", store=SQLiteStore(f"{folder}/idle.db"),
                         max_sessions=count + 1)
    mgr.run_turn(mgr.create(), [{"role": "user", "content": "warm-up"}])  # caches, registries
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.take_snapshot()
    for n in range(count):
        sid = mgr.create(owner="key")
        for i in range(turns):
            mgr.run_turn(sid, [{"role": "user", "content": f"Question number {i}: what is {i} + {i}?"}], owner="key")
    mgr.backend.close()  # the echo backend's own copy of each context is the engine's memory, not ours
    gc.collect()
    after = tracemalloc.take_snapshot()
    tracemalloc.stop()
    mgr.store.close()
    return sum(stat.size_diff for stat in after.compare_to(before, "filename")) / count


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench stores", description=__doc__)
    p.add_argument("--turns", type=int, default=10, help="exchanges per session")
    p.add_argument("--sessions", type=int, default=50, help="sessions committed round-robin")
    p.add_argument("--seconds", type=float, default=5.0, help="time per store (5 rounds)")
    p.add_argument("--dir", default=None, help="folder for the SQLite file and Redis (default: a temp folder)")
    p.add_argument("--idle", type=int, default=2000, help="idle sessions for the memory measurement")
    args = p.parse_args(argv)
    sessions = [conversation(args.turns, n) for n in range(args.sessions)]
    snapshot_bytes = len(record(dump(sessions[0], "owner-hash")).data)
    folder = tempfile.mkdtemp(prefix="lmchat-bench-", dir=args.dir)
    stores = {"memory": MemoryStore(), "sqlite": SQLiteStore(f"{folder}/sessions.db")}
    redis = start_redis(folder)
    if redis is not None:
        from lmchat.stores.redis import RedisStore

        stores["redis"] = RedisStore(redis[1], prefix="bench:")
    rows, records = [], []
    try:
        for name, store in stores.items():
            rate, low, n = commits_per_second(store, sessions, args.seconds)
            ok = rate >= TARGETS[name]
            records.append({"store": name, "commits_per_s": rate, "lowest_round_per_s": low, "commits": n,
                            "target": TARGETS[name], "met": ok})
            rows.append([name, f"{rate:,.0f}", f"{low:,.0f}", f"{1e6 / rate:.0f} µs", f">= {TARGETS[name]:,}",
                         "yes" if ok else "NO"])
            store.close()
        idle = bytes_per_idle_session(args.idle, 4, folder)
    finally:
        if redis is not None:
            redis[0].kill()
            redis[0].wait()
        shutil.rmtree(folder, ignore_errors=True)
    if redis is None:
        rows.append(["redis", "n/a (no redis-server or redis-py)", "", "", f">= {TARGETS['redis']:,}", ""])
    turns_s = manager_turns_per_second()
    print(f"{args.sessions} sessions of {args.turns} exchanges, snapshot {snapshot_bytes} bytes of JSON\n")
    print(table(["store", "commits/s (median)", "lowest round", "per commit", "target", "met"], rows))
    print(f"\nmanager, echo backend, MemoryStore: {turns_s:,.0f} turns/s end to end (delta + stream + commit + save)")
    print(f"manager memory per idle session (4 exchanges): {idle / 1024:.1f} KiB")
    payload = {"turns": args.turns, "sessions": args.sessions, "snapshot_bytes": snapshot_bytes, "rows": records,
               "manager_turns_per_s": turns_s, "idle_session_bytes": idle}
    print(f"\nresults: {save('stores', payload)}")
    return 0
