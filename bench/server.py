"""Server overhead of `lmchat serve`: request latency minus the echo backend's own time.

A real `lmchat serve --backend echo` process on loopback; an httpx async
client (this process) runs N sessions at once, each sending interactive turns
(`/v1/chat/interactive`, `interactive_mode`, non-streamed). Two loads:

* paced: each session waits a think time (uniform, mean ``--think``) after
  each answer, as a person or an agent does: the sessions are concurrent, their
  requests overlap only partly;
* saturated: each session sends its next turn as soon as the answer arrives,
  so N requests are always in flight and latency is mostly queueing behind
  the others (N x the per-request cost, on this machine's cores shared with
  the client).

The echo backend's own time per turn is measured in-process on sessions of
the same shape and subtracted. Overhead covers HTTP, JSON, the session delta,
the manager (locks, the worker thread) and the store save, and, as seen by
the client, the client's own time (httpx, on the same cores). The last
column is the server's own view: the bucket bound of its request-latency
histogram (``/metrics``, request in to last byte out) under which 99% fell.
A lone back-to-back session runs 200 turns, so that its p99 is not a max.
"""
from __future__ import annotations

import argparse
import asyncio
import random
import re
import statistics
import subprocess
import sys
import time

import httpx

from lmchat import Session
from lmchat.backends import GenerationRequest, SamplingParams
from lmchat.backends.echo import EchoBackend

from .common import save, table

TEMPLATE = "qwen2.5"


def question(session: int, turn: int) -> str:
    return f"Session {session}, question {turn}: what is {turn} times {session}? Answer in one short sentence."


def echo_seconds(turns: int, repeat: int = 50) -> float:
    """Mean time of the echo backend's generate() per turn, in-process, on the benchmark's conversations."""
    backend, samples = EchoBackend(), []
    for r in range(repeat):
        session = Session(TEMPLATE)
        params = SamplingParams.from_template(session.template)
        for t in range(turns):
            request = GenerationRequest.from_session(session, session.prompt(question(r, t)), params)
            started = time.perf_counter()
            chunks = list(backend.generate(request))
            samples.append(time.perf_counter() - started)
            session.commit("".join(c.text for c in chunks), stop=chunks[-1].stop)
        backend.drop(session.session_id)
    return statistics.mean(samples)


def start_server(port: int, store: str, max_active: int) -> subprocess.Popen:
    command = [sys.executable, "-m", "lmchat", "serve", "--backend", "echo", "--template", TEMPLATE,
               "--store", store, "--port", str(port), "--log-level", "warning", "--max-active", str(max_active)]
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL)  # only errors (stderr) would show
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                return proc
        except httpx.TransportError:
            time.sleep(0.05)
    proc.kill()
    raise RuntimeError("lmchat serve did not start")


async def run_level(url: str, sessions: int, turns: int, think: float, tag: str) -> tuple[list[float], float]:
    """Latencies of every request (seconds) and the wall time of the level.

    A client (one keep-alive connection) per session, opened before the clock starts: one shared
    httpx pool scans its connections on every request, and at 200 connections the client, not the
    server, would be what is measured.
    """
    latencies: list[float] = []
    rng = random.Random(sessions)
    clients = [httpx.AsyncClient(base_url=url, timeout=60) for _ in range(sessions)]

    async def one_session(s: int) -> None:
        sid = f"{tag}-{sessions}-{s}"
        await asyncio.sleep(rng.uniform(0, 2 * think))  # sessions start spread out, as users do
        for t in range(turns):
            body = {"session_id": sid, "prompt": question(s, t), "interactive_mode": True}
            started = time.perf_counter()
            r = await clients[s].post("/v1/chat/interactive", json=body)
            latencies.append(time.perf_counter() - started)
            if r.status_code != 200:
                raise RuntimeError(f"{r.status_code}: {r.text}")
            if think:
                await asyncio.sleep(rng.uniform(0, 2 * think))

    try:
        started = time.perf_counter()
        await asyncio.gather(*(one_session(s) for s in range(sessions)))
        return latencies, time.perf_counter() - started
    finally:
        for client in clients:
            await client.aclose()


def server_histogram(url: str) -> dict[str, float]:
    """The server's own latency histogram of the interactive route: upper bound -> cumulative count."""
    text = httpx.get(url + "/metrics").text
    pattern = re.compile(r'lmchat_http_request_duration_seconds_bucket\{route="/v1/chat/interactive",le="([^"]+)"\} (\d+)')
    return {bound: float(n) for bound, n in pattern.findall(text)}


def histogram_quantile(before: dict[str, float], after: dict[str, float], q: float) -> str:
    """The bucket bound under which a ``q`` share of this level's requests finished, as Prometheus'
    ``histogram_quantile`` would bound it (the server times a request to its last byte)."""
    counts = [(bound, after[bound] - before.get(bound, 0.0)) for bound in after]
    total = counts[-1][1]
    return next(bound for bound, n in counts if n >= q * total)


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench server", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sessions", default="1,50,200", help="concurrent sessions per level")
    p.add_argument("--turns", type=int, default=10, help="turns per session")
    p.add_argument("--think", type=float, default=1.0, help="mean think time between turns (paced load), seconds")
    p.add_argument("--store", default="memory", help="the server's store (memory, sqlite:PATH, redis://...)")
    p.add_argument("--port", type=int, default=18777)
    args = p.parse_args(argv)
    levels = [int(n) for n in args.sessions.split(",")]
    echo = echo_seconds(args.turns)
    proc = start_server(args.port, args.store, max_active=max(levels) + 8)
    url = f"http://127.0.0.1:{args.port}"
    records, rows = [], []
    try:
        asyncio.run(run_level(url, 4, 3, 0, "warmup"))
        for load, think in (("paced", args.think), ("saturated", 0.0)):
            for n in levels:
                # back to back, a lone session needs more turns for its p99 to mean something
                turns = args.turns if think else max(args.turns, 200 // n)
                before = server_histogram(url)
                latencies, wall = asyncio.run(run_level(url, n, turns, think, load))
                server_p99 = histogram_quantile(before, server_histogram(url), 0.99)
                p50, p99 = pct(latencies, 0.5), pct(latencies, 0.99)
                record = {"load": load, "sessions": n, "requests": len(latencies), "req_per_s": len(latencies) / wall,
                          "p50_s": p50, "p99_s": p99, "echo_s": echo, "overhead_p50_s": p50 - echo,
                          "overhead_p99_s": p99 - echo, "server_p99_le_s": server_p99}
                records.append(record)
                rows.append([load, n, len(latencies), f"{record['req_per_s']:.0f}", f"{p50 * 1e3:.2f}",
                             f"{p99 * 1e3:.2f}", f"{(p50 - echo) * 1e3:.2f}", f"{(p99 - echo) * 1e3:.2f}",
                             f"<= {float(server_p99) * 1e3:g}" if server_p99 != "+Inf" else "> 60000"])
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    print(f"echo backend, template {TEMPLATE}, store {args.store}, {args.turns} turns per session, "
          f"think time mean {args.think}s (paced); echo's own time {echo * 1e3:.3f} ms per turn\n")
    print(table(["load", "sessions", "requests", "req/s", "p50 ms", "p99 ms", "overhead p50 ms", "overhead p99 ms",
                 "server-side p99 ms"], rows))
    paced = next((r for r in records if r["load"] == "paced" and r["sessions"] == 200), None)
    if paced:
        ok = paced["overhead_p99_s"] < 0.005
        print(f"\nissue target: overhead p99 at 200 concurrent sessions (paced) "
              f"{paced['overhead_p99_s'] * 1e3:.2f} ms (< 5 ms): {'met' if ok else 'NOT met'}")
    payload = {"store": args.store, "turns": args.turns, "think_s": args.think, "echo_s": echo, "rows": records}
    print(f"results: {save('server', payload)}")
    return 0
