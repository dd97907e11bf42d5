"""The load client of ``python -m bench server``, in a process of its own so that it does not share the
server's interpreter: ``python -m bench.load URL SESSIONS TURNS THINK TAG`` prints the latencies of the
answered turns, the count of failed ones by status, the wall time and the client's own CPU time as JSON. A
failed turn (a 503 from a store that gave up, a connection the server dropped) is counted, not fatal: a server
that fails under the load shows it in its figures.

One asyncio loop, one keep-alive connection per session, opened before the clock starts. The client
is aiohttp: on a 2-core machine the client shares the CPU with the server, and httpx spent about
twice aiohttp's CPU per request (measured with ``client_cpu_s``), which capped what could be measured.
"""
from __future__ import annotations

import asyncio
import json
import random
import sys
import time

import aiohttp

TEMPLATE = "qwen2.5"


def question(session: int, turn: int) -> str:
    return f"Session {session}, question {turn}: what is {turn} times {session}? Answer in one short sentence."


async def warm(client: aiohttp.ClientSession) -> None:
    try:
        async with client.get("/health") as r:
            await r.read()
    except (aiohttp.ClientError, asyncio.TimeoutError):
        pass


async def run(url: str, sessions: int, turns: int, think: float, tag: str) -> dict:
    latencies: list[float] = []
    failed: dict[str, int] = {}
    first_error: list[str] = []
    rng = random.Random(sessions)
    timeout = aiohttp.ClientTimeout(total=120)
    clients = [aiohttp.ClientSession(url, timeout=timeout, connector=aiohttp.TCPConnector(limit=1))
               for _ in range(sessions)]

    async def one_session(s: int) -> None:
        sid = f"{tag}-{sessions}-{s}"
        await asyncio.sleep(rng.uniform(0, 2 * think))  # sessions start spread out, as users do
        for t in range(turns):
            body = {"session_id": sid, "prompt": question(s, t), "interactive_mode": True}
            started = time.perf_counter()
            try:
                async with clients[s].post("/v1/chat/interactive", json=body) as r:
                    status, text = str(r.status), await r.read()
            except (aiohttp.ClientError, asyncio.TimeoutError) as exc:  # e.g. a server out of descriptors
                status, text = type(exc).__name__, str(exc).encode()
            if status == "200":
                latencies.append(time.perf_counter() - started)
            else:
                failed[status] = failed.get(status, 0) + 1
                first_error[:] = first_error or [f"{status}: {text[:300]!r}"]
            if think:
                await asyncio.sleep(rng.uniform(0, 2 * think))

    try:
        # each session's connection is opened before the clock starts (one refused here fails its turns)
        await asyncio.gather(*(warm(c) for c in clients))
        cpu, started = time.process_time(), time.perf_counter()
        await asyncio.gather(*(one_session(s) for s in range(sessions)))
        return {"latencies": latencies, "failed": failed, "first_error": first_error[0] if first_error else None,
                "wall_s": time.perf_counter() - started, "client_cpu_s": time.process_time() - cpu}
    finally:
        for client in clients:
            await client.close()


if __name__ == "__main__":
    url, sessions, turns, think, tag = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]), sys.argv[5]
    print(json.dumps(asyncio.run(run(url, sessions, turns, think, tag))))
