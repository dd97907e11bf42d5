"""Soak: ``lmchat serve`` on SQLite under a 1,024-descriptor limit: 5,000 turns of one session and
2,000 sessions created and deleted, then 5,000 turns more (the last round's server failed every
turn after 496 under this limit, and held 9.2 GB after 5,000 turns: 1.8 MB a turn).

The server's own descriptors and resident memory, read from ``/proc/PID``: after the first 5,000
turns and the 2,000 sessions, at most 1.2x what they were after the first 100 turns; after the
10,000th turn, the descriptors never grew and memory grew only by what the session holds (its
history: at most 4 KiB a turn, allocator slack included). Every request succeeds, ``/health``
answers all along, the session holds every turn afterwards. Turn latency is printed (``-s``), not
asserted: speed targets are benchmarks' business.
"""
from __future__ import annotations

import os
import statistics
import time
from pathlib import Path

import httpx

from .serve_helpers import Server

TURNS, SESSIONS = 10_000, 2_000


def fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError(f"no VmRSS in /proc/{pid}/status")


def turn(client: httpx.Client, session: str, n: int) -> float:
    started = time.perf_counter()
    r = client.post("/v1/chat/interactive", json={"prompt": f"q{n}", "session_id": session, "interactive_mode": True})
    assert r.status_code == 200 and r.json()["text"] == f"q{n}", (n, r.status_code, r.text[:300])
    return time.perf_counter() - started


def test_ten_thousand_turns_and_two_thousand_sessions_stay_bounded_under_1024_descriptors(tmp_path):
    server = Server("--template", "qwen2.5", "--store", f"sqlite:{tmp_path / 'soak.db'}", "--backend-option",
                    "prefix=", "--session-len", "10000000", max_fds=1024)
    pid = server.proc.pid
    try:
        with httpx.Client(base_url=server.url, timeout=30) as client:
            first = [turn(client, "long", n) for n in range(100)]
            base = {"fds": fds(pid), "rss": rss_kib(pid)}
            seconds = [turn(client, "long", n) for n in range(100, TURNS // 2)]
            for k in range(SESSIONS):
                turn(client, f"short-{k}", 0)
                assert client.delete(f"/v1/sessions/short-{k}").status_code == 200
                if k % 500 == 0:
                    assert client.get("/health").status_code == 200
            middle = {"fds": fds(pid), "rss": rss_kib(pid)}
            for n in range(TURNS // 2, TURNS):
                turn(client, "long", n)
                if n % 2500 == 0:
                    assert client.get("/health").status_code == 200
            end = {"fds": fds(pid), "rss": rss_kib(pid)}
            held = client.get("/v1/sessions/long").json()
            assert held["turns"] == TURNS and held["messages"][-1]["content"] == f"q{TURNS - 1}"
            listed = client.get("/v1/sessions", params={"limit": 10_000}).json()["data"]
            assert [s["id"] for s in listed] == ["long"]
        print(f"descriptors and RSS (KiB): after 100 turns {base}, after 5,000 turns and {SESSIONS} sessions "
              f"{middle}, after {TURNS} turns {end}; median turn: first 100 {statistics.median(first) * 1000:.2f} "
              f"ms, turns 4,901-5,000 {statistics.median(seconds[-100:]) * 1000:.2f} ms")
        assert middle["fds"] <= 1.2 * base["fds"] and middle["rss"] <= 1.2 * base["rss"], (base, middle)
        assert end["fds"] <= middle["fds"], (base, middle, end)
        assert (end["rss"] - middle["rss"]) / (TURNS // 2) <= 4, (base, middle, end)
    finally:
        server.stop()
