"""The floor of ``python -m bench server``: what this machine allows any Python server, measured beside it.

``python -m bench.floor_app --port PORT`` serves, with the protocol stack ``lmchat serve`` runs on (uvicorn,
httptools, uvloop), a plain ASGI app that reads each request's body, parses it in a worker thread (one round
trip through a thread pool: what any server running a blocking engine or store must do per turn) and answers
a fixed JSON of an interactive answer's size. No session, no template, no store: its turns/s and latencies
under the benchmark's load are the ceiling and the floor for lmchat's on the same machine in the same run.

``--sqlite FILE`` makes the floor of a durable store: the worker is one writer thread that inserts each
request's body into a table of FILE and commits what is queued in one transaction, with the pragmas of
lmchat's SQLite store (WAL, ``synchronous=FULL``: one fsync per batch), before the answer goes out. It is the
least any server that answers only once a turn is on disk pays here for it.

``--busy-ms MS`` makes the app spend MS of CPU on its event loop per request before answering: a server whose
turn costs that much, to see what a per-turn CPU cost does to latencies under the same load (run it with
``python -m bench.load``; ``python -m bench server`` runs the floor without it).
"""
from __future__ import annotations

import argparse
import asyncio
import json
import queue
import sqlite3
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import uvicorn

ANSWER = json.dumps({"text": "Session 1, question 1: what is 1 times 1? Answer in one short sentence.", "tokens": 70,
                     "input_tokens": 30, "history_tokens": 0, "finish_reason": "stop", "session_id": "floor-1"}
                    ).encode()
POOL = ThreadPoolExecutor(8)


class DurableWriter:
    """One thread, group commit: each queued body is a row, each batch one durable transaction."""

    def __init__(self, path: str):
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self._conn.execute("PRAGMA journal_mode = WAL")
        self._conn.execute("PRAGMA synchronous = FULL")
        self._conn.execute("CREATE TABLE IF NOT EXISTS turns (n INTEGER PRIMARY KEY, body BLOB)")
        threading.Thread(target=self._run, daemon=True).start()

    async def write(self, body: bytes) -> None:
        loop = asyncio.get_running_loop()
        done = loop.create_future()
        self._queue.put((body, loop, done))
        await done

    def _run(self) -> None:
        while True:
            batch = [self._queue.get()]
            while True:
                try:
                    batch.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            for body, _, _ in batch:
                json.loads(body)  # parsed, as the other floor parses it
            self._conn.execute("BEGIN IMMEDIATE")
            self._conn.executemany("INSERT INTO turns (body) VALUES (?)", [(body,) for body, _, _ in batch])
            self._conn.execute("COMMIT")
            for _, loop, done in batch:
                loop.call_soon_threadsafe(done.set_result, None)


WRITER: DurableWriter | None = None
BUSY_SECONDS = 0.0


async def app(scope, receive, send) -> None:
    if scope["type"] != "http":
        return
    body, more = b"", True
    while more:
        message = await receive()
        body += message.get("body", b"")
        more = message.get("more_body", False)
    if scope["method"] == "POST":
        busy_until = time.perf_counter() + BUSY_SECONDS
        while time.perf_counter() < busy_until:
            pass
        if WRITER is not None:
            await WRITER.write(body)
        else:
            await asyncio.get_running_loop().run_in_executor(POOL, json.loads, body)
    answer = ANSWER if scope["method"] == "POST" else b"{}"
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(answer)).encode())]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": answer})


def main(argv=None) -> int:
    global WRITER, BUSY_SECONDS
    p = argparse.ArgumentParser(prog="python -m bench.floor_app", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--sqlite", metavar="FILE", help="commit each request's body to FILE before answering")
    p.add_argument("--busy-ms", type=float, default=0.0, help="CPU spent on the event loop per request (ms)")
    args = p.parse_args(argv)
    BUSY_SECONDS = args.busy_ms / 1e3
    if args.sqlite:
        WRITER = DurableWriter(args.sqlite)
    uvicorn.run(app, host="127.0.0.1", port=args.port, log_level="warning")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
