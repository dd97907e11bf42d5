"""Soak: the SQLite store under the manager's load pattern (a new thread per turn) stays bounded.

5,000 appends to one session, then 2,000 sessions created and deleted, each
write from a thread of its own (the manager runs each turn in a new thread).
Descriptors (read from /proc/self) at the end must be within 1.2x of what they
were after the first 100 appends, RSS within 1.2x of what it was after 2,500
(SQLite's page caches, the writer's 2 MB and each reader's 256 KiB, fill as the
file grows: measured, SQLite's heap is 0.8 MB after 100 appends and 4-5 MB from
about 3,000 on, flat after; RSS after 100 appends left the bound 1.2x to chance),
and an append must not cost more as
the session grows: the median bytes the process reads and writes for one of the
last 100 appends (``/proc/self/io``: SQLite's pages, the WAL) within 1.5x of the
first 100's. Bytes, not seconds: a busy machine slows the two ends unevenly
(the median latency is reported, not asserted). It runs in a child process, so
nothing else the test session holds (imports, other tests' threads) counts.
"""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def rss_kib() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError("no VmRSS in /proc/self/status")


def io_bytes() -> int:
    """The bytes this process has read and written through system calls so far (files and sockets alike)."""
    fields = dict(line.split(": ") for line in Path("/proc/self/io").read_text().splitlines())
    return int(fields["rchar"]) + int(fields["wchar"])


def turn_patch(n: int) -> dict:
    """What Session.changes() returns after exchange ``n`` of a qwen2.5 session with a system prompt (~770 chars),
    made up from ``n`` alone: the test process itself holds nothing that grows with the session."""
    question = f"Question number {n}: what is {n} + {n}? Explain briefly, in one sentence or two."
    answer = f"{n} + {n} = {2 * n}. Adding a number to itself doubles it, so the sum is twice {n}."
    return {
        "lists": {
            "messages": [1 + 2 * n, [{"role": "user", "content": question}, {"role": "assistant", "content": answer}]],
            "context": [2 * n, [f"\n<|im_start|>user\n{question}<|im_end|>\n<|im_start|>assistant\n",
                                    f"{answer}<|im_end|>"]],
            "offsets": [2 * n - 1, [100 * n, 100 * n + 60, 100 * n + 90]],
        },
        "set": {"tail": 100 * n + 90, "rendered": 2 + 2 * n, "pending": False, "needs_reset": False,
                "reset_reason": None, "anchor": [0, 0], "rewind": None, "answer_end": [100 * n + 90, None, 0, 0],
                "reopened": None, "session_len": 32768, "overflow": "error", "max_new_tokens": 0,
                "injection": "split", "max_message_chars": 1000000, "drift": "rewind"},
    }


def in_a_thread(fn, *args):
    """Run ``fn`` in a new thread, as the manager runs a turn; return its result (or raise its error)."""
    out = {}

    def run():
        try:
            out["value"] = fn(*args)
        except BaseException as exc:  # noqa: BLE001  (re-raised below)
            out["error"] = exc

    t = threading.Thread(target=run)
    t.start()
    t.join()
    if "error" in out:
        raise out["error"]
    return out["value"]


def soak(path: str, appends: int = 5000, sessions: int = 2000, workers: int = 8) -> dict:
    from lmchat import Session
    from lmchat.stores import VERSION_KEY, SQLiteStore, Summary

    store = SQLiteStore(path)
    session = Session("qwen2.5", system="You are a helpful assistant.", session_id="long")
    session.prompt("warm-up")
    session.commit("ok")  # messages: system, user, answer; context: 2 parts; offsets: 2 (as turn_patch expects)
    snapshot = session.to_dict()
    version = store.save(snapshot, expected_version=0)
    del session
    latencies, moved, marks = [], [], {}

    def append(n: int, expected: int) -> int:
        started, before = time.perf_counter(), io_bytes()
        v = store.append("long", turn_patch(n), expected_version=expected,
                         summary=Summary("warm-up", n + 1, "qwen2.5"))
        latencies.append(time.perf_counter() - started)
        moved.append(io_bytes() - before)
        return v

    for n in range(1, appends + 1):
        version = in_a_thread(append, n, version)
        if n == 100:
            marks["after_100"] = {"fds": fds(), "rss_kib": rss_kib(), "threads": threading.active_count()}
        if n == appends // 2:
            marks["half"] = {"rss_kib": rss_kib()}

    def create_and_delete(k: int) -> None:
        sid = f"short-{k}"
        v = store.save({**snapshot, "session_id": sid}, expected_version=0)
        store.append(sid, turn_patch(1), expected_version=v, summary=Summary("warm-up", 2, "qwen2.5"))
        assert store.load(sid)["messages"][-1]["content"].startswith("1 + 1 = 2.")
        store.delete(sid)

    for start in range(0, sessions, workers):  # `workers` threads at once, each new
        pool = [threading.Thread(target=create_and_delete, args=(k,)) for k in range(start, start + workers)]
        for t in pool:
            t.start()
        for t in pool:
            t.join()
    marks["end"] = {"fds": fds(), "rss_kib": rss_kib(), "threads": threading.active_count()}
    loaded = store.load("long")
    records = store.records("long")
    listed = [i.id for i in store.list(limit=10)]
    transactions, writes = store.group_commits
    store.close()
    marks["closed"] = {"fds": fds(), "threads": threading.active_count()}
    last = loaded["messages"][-1]["content"]
    return {
        **marks,
        "median_first_100_ms": statistics.median(latencies[:100]) * 1e3,
        "median_last_100_ms": statistics.median(latencies[-100:]) * 1e3,
        "median_first_100_bytes": statistics.median(moved[:100]),
        "median_last_100_bytes": statistics.median(moved[-100:]),
        "mean_all_ms": statistics.fmean(latencies) * 1e3,
        "version": loaded[VERSION_KEY], "messages": len(loaded["messages"]), "last": last,
        "base_version": records.base_version, "patches": records.patches, "listed": listed,
        "mean_batch": writes / transactions,
    }


def test_soak_descriptors_memory_and_the_cost_of_an_append_stay_flat(tmp_path):
    proc = subprocess.run([sys.executable, "-c", "import json, sys; from tests.test_stores_soak import soak; "
                           "print(json.dumps(soak(sys.argv[1])))", str(tmp_path / "soak.db")],
                          cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")})
    assert proc.returncode == 0, proc.stderr[-3000:]
    r = json.loads(proc.stdout.splitlines()[-1])
    print(json.dumps(r, indent=1))  # the figures, for -s and for the report
    assert (r["version"], r["messages"], r["listed"]) == (5001, 3 + 2 * 5000, ["long"])
    assert r["last"].startswith("5000 + 5000 = 10000.")
    assert r["patches"] == r["version"] - r["base_version"] and r["base_version"] > 2500  # compacted on the way
    start, end = r["after_100"], r["end"]
    assert end["fds"] <= 1.2 * start["fds"], r
    assert end["rss_kib"] <= 1.2 * r["half"]["rss_kib"], r
    assert end["threads"] == start["threads"] and r["closed"]["threads"] == start["threads"] - 1  # the writer
    assert r["closed"]["fds"] < start["fds"]
    assert 0 < r["median_last_100_bytes"] <= 1.5 * r["median_first_100_bytes"], r
