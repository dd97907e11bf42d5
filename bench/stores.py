"""Session stores under the session manager: commits per second, the cost of a commit as a session grows,
and the memory an idle session costs the manager.

A *commit* is what the manager does after every turn: append the turn's patch
(``Session.changes()``, precomputed here from real turns of a qwen2.5 session)
with compare-and-set on the version it last saw; the store compacts on its own.
One thread, then ``--threads`` writer threads (default 50), commit to a
session each, for ``--seconds`` per run in 5 rounds. SQLite is durable (WAL,
``synchronous=FULL``, on the disk of ``--dir``) and group-commits the writes
queued while it syncs: from one thread each commit is its own fsync. Redis
runs on loopback (a ``redis-server`` started here, persistence off). Targets:
memory >= 20k/s, SQLite and Redis >= 2k/s.

Turn cost: one append at turn ``--long`` (5,000) vs turn 10 of one session,
and a whole-snapshot ``save`` at the same turns, measured interleaved in one
run (medians; the mean includes the compactions). Target: an append at turn
5,000 costs <= 1.5x one at turn 10.

Also: end-to-end turns per second through the manager (echo backend,
MemoryStore); one manager turn at turn ``--long`` vs turn 10 of a session with
token ids (SmolLM2's tokenizer: every layer of a turn, from the delta to the
patch, must be O(turn); target <= 1.5x); and the Python memory an idle session
costs the manager (tracemalloc over ``--idle`` sessions of 4 exchanges each).
"""
from __future__ import annotations

import argparse
import copy
import gc
import importlib.util
import json
import random
import shutil
import socket
import statistics
import subprocess
import tempfile
import threading
import time
import tracemalloc

from lmchat import Session, SessionManager, SessionPolicy
from lmchat.backends.echo import EchoBackend
from lmchat.manager import ManagerLimits, TurnRequest
from lmchat.stores import MemoryStore, SQLiteStore, Summary
from lmchat.stores.base import record

from .common import save, table

TARGETS = {"memory": 20_000, "sqlite": 2_000, "redis": 2_000}
#: an append at turn --long may cost at most this many times one at turn 10
TURN_RATIO_TARGET = 1.5
START = 10  # the sessions of the throughput runs start at this turn


def history(turns: int, keep: tuple[int, ...]) -> tuple[list[dict], dict[int, dict]]:
    """Real turns of one session: the patch of each turn (index = turn) and the whole snapshot after the turns
    in ``keep`` (the snapshot at 0: a new session)."""
    session = Session("qwen2.5", system="You are a helpful assistant.", session_id="bench")
    patches, snapshots = [{}], {0: session.to_dict()}
    session.mark_saved()
    for i in range(1, turns + 1):
        session.prompt(f"Question number {i}: what is {i} + {i}? Explain briefly.")
        session.commit(f"{i} + {i} = {2 * i}. Adding a number to itself doubles it.")
        patches.append(session.changes())
        session.mark_saved()
        if i in keep:
            snapshots[i] = session.to_dict()
    return patches, snapshots


def summary(turn: int) -> Summary:
    return Summary("Question number 1: what is 1 + 1? Explain briefly.", turn, "qwen2.5", "owner-hash")


def commits_per_second(store, threads: int, patches: list[dict], start: dict, seconds: float, whole: bool = False,
                       rounds: int = 5) -> tuple[float, float, int]:
    """Each thread commits turn after turn to its own session; returns (median, lowest round's commits/s, commits).

    ``whole``: each commit saves the whole snapshot at turn START (the commit before records), else it appends
    the next turn's patch. The median of several rounds, since a shared machine's fsync latency and CPU come and
    go. A session that reaches the last precomputed turn is saved whole at turn START again (not counted).
    """
    state = [[store.save({**start, "session_id": f"bench-{n}"}, expected_version=0), START] for n in range(threads)]
    rates, total = [], 0
    for _ in range(rounds):
        counts = [0] * threads
        deadline = time.perf_counter() + seconds / rounds

        def work(n: int, counts: list[int], deadline: float) -> None:
            sid, st = f"bench-{n}", state[n]
            snapshot = {**start, "session_id": sid}
            while time.perf_counter() < deadline:
                if whole:
                    st[0] = store.save(snapshot, expected_version=st[0])
                else:
                    if st[1] + 1 >= len(patches):
                        st[0], st[1] = store.save(snapshot, expected_version=st[0]), START
                    st[0] = store.append(sid, patches[st[1] + 1], expected_version=st[0],
                                         summary=summary(st[1] + 1))
                    st[1] += 1
                counts[n] += 1

        began = time.perf_counter()
        pool = [threading.Thread(target=work, args=(n, counts, deadline)) for n in range(threads)]
        for t in pool:
            t.start()
        for t in pool:
            t.join()
        rates.append(sum(counts) / (time.perf_counter() - began))
        total += sum(counts)
    return statistics.median(rates), min(rates), total


def turn_costs(store, patches: list[dict], snapshots: dict[int, dict], long: int, samples: int) -> dict:
    """Append at turn 10 vs turn ``long`` of sessions grown by appends, and whole saves of the same sizes,
    in a shuffled order per sample, so that a busy moment or the garbage of a big save slows all four alike."""
    versions = {}
    for sid, turns in (("short", 10), ("long", long)):
        versions[sid] = store.save({**snapshots[0], "session_id": sid}, expected_version=0)
        for t in range(1, turns):
            versions[sid] = store.append(sid, patches[t], expected_version=versions[sid], summary=summary(t))
    times: dict[str, list[float]] = {"append short": [], "append long": [], "save short": [], "save long": []}
    wholes = {"short": {**snapshots[10], "session_id": "whole-short"},
              "long": {**snapshots[long], "session_id": "whole-long"}}
    first = {"short": 10, "long": long}
    order, shuffle = list(times), random.Random(0).shuffle
    for r in range(samples):
        shuffle(order)
        for what in order:
            kind, sid = what.split()
            t0 = time.perf_counter()
            if kind == "append":
                versions[sid] = store.append(sid, patches[first[sid] + r], expected_version=versions[sid],
                                             summary=summary(first[sid] + r))
            else:
                store.save(wholes[sid])
            times[what].append(time.perf_counter() - t0)
    return {k: {"median_s": statistics.median(v), "mean_s": statistics.fmean(v)} for k, v in times.items()}


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
        mgr.run_turn(TurnRequest(ids[i % len(ids)], [{"role": "user", "content": f"question {i}"}]))
    return turns / (time.perf_counter() - start)


def manager_turn_costs(long: int, samples: int) -> dict | None:
    """One manager turn (delta, stream, commit, patch, save) at turn 10 vs turn ``long`` of a session with
    token ids (SmolLM2's tokenizer, echo backend, MemoryStore), interleaved; None without the tokenizer."""
    try:
        from .token_cost import smollm2_tokenizer

        tok = smollm2_tokenizer()
    except ImportError:
        return None
    mgr = SessionManager(EchoBackend(tokenizer=tok), template="smollm2", tokenizer=tok,
                         session_defaults=SessionPolicy(session_len=10**9))

    def turn(sid: str, i: int) -> None:
        mgr.run_turn(TurnRequest(sid, [{"role": "user", "content": f"Question number {i}: what is {i} + {i}?"}]))

    first = {"short": 10, "long": long}
    for sid, turns in first.items():
        mgr.create(sid)
        for i in range(turns):
            turn(sid, i)
    times: dict[str, list[float]] = {"short": [], "long": []}
    for r in range(samples):
        for sid in random.Random(r).sample(list(times), 2):
            t0 = time.perf_counter()
            turn(sid, first[sid] + r)
            times[sid].append(time.perf_counter() - t0)
    ids = len(mgr.get("long").context_ids)
    mgr.close()
    return {"context_ids_long": ids, **{k: statistics.median(v) for k, v in times.items()}}


def bytes_per_idle_session(count: int, turns: int, folder: str) -> float:
    """Python memory the manager holds per idle session (an SQLite store: its pages are not Python's)."""
    mgr = SessionManager(EchoBackend(), template="qwen2.5", store=SQLiteStore(f"{folder}/idle.db"),
                         limits=ManagerLimits(max_sessions=count + 1))
    mgr.run_turn(TurnRequest(mgr.create(), [{"role": "user", "content": "warm-up"}]))  # caches, registries
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.take_snapshot()
    for _ in range(count):
        sid = mgr.create(owner="key")
        for i in range(turns):
            question = f"Question number {i}: what is {i} + {i}?"
            mgr.run_turn(TurnRequest(sid, [{"role": "user", "content": question}], owner="key"))
    mgr.backend.close()  # the echo backend's own copy of each context is the engine's memory, not ours
    gc.collect()
    after = tracemalloc.take_snapshot()
    tracemalloc.stop()
    mgr.store.close()
    return sum(stat.size_diff for stat in after.compare_to(before, "filename")) / count


def open_stores(folder: str, redis_url: str | None) -> dict:
    stores = {"memory": MemoryStore, "sqlite": lambda: SQLiteStore(f"{folder}/sessions-{time.monotonic_ns()}.db")}
    if redis_url is not None:
        from lmchat.stores.redis import RedisStore

        stores["redis"] = lambda: RedisStore(redis_url, prefix=f"bench-{time.monotonic_ns()}:")
    return stores


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench stores", description=__doc__)
    p.add_argument("--threads", type=int, default=50, help="concurrent writer threads, a session each")
    p.add_argument("--seconds", type=float, default=5.0, help="time per store (5 rounds)")
    p.add_argument("--long", type=int, default=5000, help="the late turn whose commit is compared with turn 10's")
    p.add_argument("--samples", type=int, default=60, help="commits timed at each turn")
    p.add_argument("--dir", default=None, help="folder for the SQLite files and Redis (default: a temp folder)")
    p.add_argument("--idle", type=int, default=2000, help="idle sessions for the memory measurement")
    args = p.parse_args(argv)
    patches, snapshots = history(max(args.long + args.samples, 1000), keep=(START, 10, args.long))
    start = snapshots[START]
    patch_chars = statistics.median(len(json.dumps(p, ensure_ascii=False)) for p in patches[START:START + 50])
    folder = tempfile.mkdtemp(prefix="lmchat-bench-", dir=args.dir)
    redis = start_redis(folder)
    stores = open_stores(folder, redis and redis[1])
    runs = [(name, "append", threads) for name in stores for threads in (1, args.threads)]
    runs += [(name, "save", 1) for name in stores]
    rows, records, costs = [], [], {}
    try:
        for name, commit, threads in runs:
            store = stores[name]()
            rate, low, n = commits_per_second(store, threads, patches, start, args.seconds, whole=commit == "save")
            batch = ""
            if isinstance(store, SQLiteStore):
                transactions, writes = store.group_commits
                batch = f"{writes / transactions:.1f}"
            ok = rate >= TARGETS[name] if commit == "append" else None
            records.append({"store": name, "commit": commit, "threads": threads, "commits_per_s": rate,
                            "lowest_round_per_s": low, "commits": n, "writes_per_transaction": batch or None,
                            "target": TARGETS[name] if ok is not None else None, "met": ok})
            rows.append([name, "append (patch)" if commit == "append" else "save (whole snapshot)", threads,
                         f"{rate:,.0f}", f"{low:,.0f}", f"{1e6 / rate:.0f} µs", batch or "-",
                         f">= {TARGETS[name]:,}" if ok is not None else "", {True: "yes", False: "NO"}.get(ok, "")])
            store.close()
        for name in stores:
            store = stores[name]()
            costs[name] = turn_costs(store, patches, snapshots, args.long, args.samples)
            store.close()
        idle = bytes_per_idle_session(args.idle, 4, folder)
    finally:
        if redis is not None:
            redis[0].kill()
            redis[0].wait()
        shutil.rmtree(folder, ignore_errors=True)
    if redis is None:
        rows.append(["redis", "", "", "n/a (no redis-server or redis-py)", "", "", "", f">= {TARGETS['redis']:,}", ""])
    turns_s = manager_turns_per_second()  # also a yardstick of how busy the machine was
    manager_costs = manager_turn_costs(args.long, args.samples)
    long_chars = len(record(snapshots[args.long]).data)
    print(f"commits: one turn's patch (median {patch_chars:,.0f} chars of JSON) appended to sessions from turn "
          f"{START} on, or their whole snapshot at turn {START} saved ({len(record(start).data):,} chars)\n")
    print(table(["store", "commit", "threads", "commits/s (median)", "lowest round", "per commit",
                 "writes per fsync", "target", "met"], rows))
    print(f"\none commit at turn 10 vs turn {args.long:,} of one session (whole snapshot: "
          f"{len(record(snapshots[10]).data):,} vs {long_chars:,} chars), median of {args.samples} "
          f"(mean, with compactions)\n")
    cost_rows, verdicts = [], {}
    for name, c in costs.items():
        for kind in ("append", "save"):
            short, long_ = c[f"{kind} short"], c[f"{kind} long"]
            ratio = long_["median_s"] / short["median_s"]
            verdict = ("yes" if ratio <= TURN_RATIO_TARGET else "NO") if kind == "append" else ""
            if kind == "append":
                verdicts[name] = verdict
            cost_rows.append([name, "append (patch)" if kind == "append" else "save (whole snapshot)",
                              f"{short['median_s'] * 1e6:,.0f} µs ({short['mean_s'] * 1e6:,.0f})",
                              f"{long_['median_s'] * 1e6:,.0f} µs ({long_['mean_s'] * 1e6:,.0f})",
                              f"{ratio:.2f}x", f"<= {TURN_RATIO_TARGET}x" if kind == "append" else "", verdict])
    print(table(["store", "commit", "turn 10", f"turn {args.long:,}", "ratio", "target", "met"], cost_rows))
    held = [[f"{r['store']} appends, {r['threads']} thread{'s' * (r['threads'] > 1)}", f">= {r['target']:,}/s",
             f"{r['commits_per_s']:,.0f}/s", "yes" if r["met"] else "NO"] for r in records if r["met"] is not None]
    held += [[f"{n}: append at turn {args.long:,} vs turn 10", f"<= {TURN_RATIO_TARGET}x",
              f"{costs[n]['append long']['median_s'] / costs[n]['append short']['median_s']:.2f}x", v]
             for n, v in verdicts.items()]
    if manager_costs is not None:
        ratio = manager_costs["long"] / manager_costs["short"]
        held.append([f"manager turn at turn {args.long:,} vs turn 10 (token ids)", f"<= {TURN_RATIO_TARGET}x",
                     f"{ratio:.2f}x", "yes" if ratio <= TURN_RATIO_TARGET else "NO"])
        print(f"\none manager turn (echo with SmolLM2's tokenizer, MemoryStore: delta, stream, commit, patch, save) "
              f"at turn 10: {manager_costs['short'] * 1e6:,.0f} µs, at turn {args.long:,} "
              f"({manager_costs['context_ids_long']:,} ids held): {manager_costs['long'] * 1e6:,.0f} µs, "
              f"median of {args.samples}")
    print("\ntargets\n")
    print(table(["target", "wanted", "measured", "met"], held))
    print(f"\nmanager, echo backend, MemoryStore: {turns_s:,.0f} turns/s end to end (delta + stream + commit + save)")
    print(f"manager memory per idle session (4 exchanges): {idle / 1024:.1f} KiB")
    payload = {"threads": args.threads, "start_turn": START, "patch_chars": patch_chars, "rows": records,
               "turn_cost": {"long_turn": args.long, "samples": args.samples, "long_snapshot_chars": long_chars,
                             "stores": copy.deepcopy(costs), "target_ratio": TURN_RATIO_TARGET},
               "manager_turns_per_s": turns_s, "manager_turn_cost": manager_costs, "idle_session_bytes": idle}
    print(f"\nresults: {save('stores', payload)}")
    return 0
