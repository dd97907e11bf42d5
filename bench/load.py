"""The load client of ``python -m bench server``, in a process of its own so that it does not share the
server's interpreter: ``python -m bench.load URL SESSIONS TURNS THINK TAG`` prints the latencies as JSON.

One asyncio loop, one keep-alive connection per session (opened before the clock starts: one shared
httpx pool scans its connections on every request, and at 200 connections the client, not the
server, would be what is measured).
"""
from __future__ import annotations

import asyncio
import json
import random
import sys
import time

import httpx

TEMPLATE = "qwen2.5"


def question(session: int, turn: int) -> str:
    return f"Session {session}, question {turn}: what is {turn} times {session}? Answer in one short sentence."


async def run(url: str, sessions: int, turns: int, think: float, tag: str) -> dict:
    latencies: list[float] = []
    rng = random.Random(sessions)
    clients = [httpx.AsyncClient(base_url=url, timeout=120) for _ in range(sessions)]

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
        return {"latencies": latencies, "wall_s": time.perf_counter() - started}
    finally:
        for client in clients:
            await client.aclose()


if __name__ == "__main__":
    url, sessions, turns, think, tag = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]), sys.argv[5]
    print(json.dumps(asyncio.run(run(url, sessions, turns, think, tag))))
