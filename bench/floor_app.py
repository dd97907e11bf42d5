"""The floor of ``python -m bench server``: what this machine allows any Python server, measured beside it.

``python -m bench.floor_app --port PORT`` serves, with the protocol stack ``lmchat serve`` runs on (uvicorn,
httptools, uvloop), a plain ASGI app that reads each request's body, parses it in a worker thread (one round
trip through a thread pool: what any server running a blocking engine or store must do per turn) and answers
a fixed JSON of an interactive answer's size. No session, no template, no store: its turns/s and latencies
under the benchmark's load are the ceiling and the floor for lmchat's on the same machine in the same run.
"""
from __future__ import annotations

import argparse
import asyncio
import json
from concurrent.futures import ThreadPoolExecutor

import uvicorn

ANSWER = json.dumps({"text": "Session 1, question 1: what is 1 times 1? Answer in one short sentence.", "tokens": 70,
                     "input_tokens": 30, "history_tokens": 0, "finish_reason": "stop", "session_id": "floor-1"}
                    ).encode()
POOL = ThreadPoolExecutor(8)


async def app(scope, receive, send) -> None:
    if scope["type"] != "http":
        return
    body, more = b"", True
    while more:
        message = await receive()
        body += message.get("body", b"")
        more = message.get("more_body", False)
    if scope["method"] == "POST":
        await asyncio.get_running_loop().run_in_executor(POOL, json.loads, body)
    answer = ANSWER if scope["method"] == "POST" else b"{}"
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(answer)).encode())]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": answer})


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.floor_app", description=__doc__)
    p.add_argument("--port", type=int, required=True)
    args = p.parse_args(argv)
    uvicorn.run(app, host="127.0.0.1", port=args.port, log_level="warning")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
