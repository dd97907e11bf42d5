"""A long agent conversation two ways, on one ``lmchat serve --backend echo``: per-turn latency by turn number.

* **responses**: OpenAI's Responses API, each turn sending only its new input with
  ``previous_response_id``: the server extends the chain's session with a delta,
  so a turn costs O(turn) however long the conversation is;
* **resend**: ``/v1/chat/completions`` without a session id, each turn resending
  the whole history, which the server renders again (a one-off session per
  request): O(history) per turn, what stateless servers do.

``--chains`` conversations of ``--turns`` turns each; the two ways alternate
turn by turn (responses turn t of chain c, then resend turn t of chain c), so
both see the same machine load. A turn's time is the client's wall time of its
request (keep-alive connection on loopback, non-streamed), summarised as the
median over the chains and a window of 5 turns ending at that turn (turn 1:
turns 1-5, the first of which also creates the chain's session). Target: the
responses turn at ``--turns`` within 1.5x of turn 1.
"""
from __future__ import annotations

import argparse
import statistics
import subprocess
import time

import httpx

from .common import TEMPLATE, question, save, start_serve, table

WINDOW = 5
TARGET = 1.5


def start_server(port: int, store: str) -> subprocess.Popen:
    return start_serve(["--backend", "echo", "--template", TEMPLATE, "--store", store,
                        "--max-body-bytes", str(64 * 2**20)], port)


def timed(client: httpx.Client, path: str, body: dict) -> tuple[float, dict]:
    started = time.perf_counter()
    r = client.post(path, json=body)
    elapsed = time.perf_counter() - started
    if r.status_code != 200:
        raise RuntimeError(f"{path}: {r.status_code} {r.text[:300]}")
    return elapsed, r.json()


def run(url: str, chains: int, turns: int) -> dict:
    """Per way, the latencies ``[chain][turn]``, and the counts of the last turn."""
    times: dict[str, list[list[float]]] = {"responses": [], "resend": []}
    last: dict[str, dict] = {}
    with httpx.Client(base_url=url, timeout=120) as responses, httpx.Client(base_url=url, timeout=120) as resend:
        for c in range(chains):
            previous, history = None, []
            times["responses"].append([])
            times["resend"].append([])
            for t in range(turns):
                q = question(c, t)
                body = {"model": "m", "instructions": "Answer briefly.", "input": q}
                if previous:
                    body["previous_response_id"] = previous
                elapsed, out = timed(responses, "/v1/responses", body)
                times["responses"][c].append(elapsed)
                previous, last["responses"] = out["id"], out["usage"]
                history.append({"role": "user", "content": q})
                elapsed, out = timed(resend, "/v1/chat/completions", {
                    "model": "m", "messages": [{"role": "system", "content": "Answer briefly."}, *history]})
                times["resend"][c].append(elapsed)
                history.append({"role": "assistant", "content": out["choices"][0]["message"]["content"]})
                last["resend"] = out["usage"]
    return {"times": times, "last_usage": last}


def at(samples: list[list[float]], turn: int) -> float:
    """Median over the chains and the window of turns ending at ``turn`` (1-based; turn 1: turns 1-5)."""
    end = max(turn, WINDOW)
    return statistics.median(x for chain in samples for x in chain[end - WINDOW:end])


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench responses", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--chains", type=int, default=3, help="conversations per way")
    p.add_argument("--turns", type=int, default=200, help="turns per conversation")
    p.add_argument("--store", default="memory", help="the server's store (memory, sqlite:PATH, redis://...)")
    p.add_argument("--port", type=int, default=18779)
    args = p.parse_args(argv)
    proc = start_server(args.port, args.store)
    try:
        result = run(f"http://127.0.0.1:{args.port}", args.chains, args.turns)
    finally:
        proc.terminate()
        proc.wait(timeout=20)
    times = result["times"]
    marks = sorted({1, 10, 50, 100, 150, args.turns} & set(range(1, args.turns + 1)))
    rows = [[t, f"{at(times['responses'], t) * 1e3:.2f}", f"{at(times['resend'], t) * 1e3:.2f}"] for t in marks]
    ratios = {way: at(times[way], args.turns) / at(times[way], 1) for way in times}
    usage = result["last_usage"]
    print(f"echo backend, template {TEMPLATE}, store {args.store}, {args.chains} conversations of {args.turns} "
          f"turns per way; milliseconds per turn (median of the chains over {WINDOW} turns ending there)\n")
    print(table(["turn", "responses (previous_response_id)", "chat completions (whole history resent)"], rows))
    cached = usage["responses"]["input_tokens_details"]["cached_tokens"]
    print(f"\nturn {args.turns} / turn 1: responses {ratios['responses']:.2f}x, resend {ratios['resend']:.2f}x")
    print(f"turn {args.turns}'s prompt: responses {usage['responses']['input_tokens']} characters, {cached} of them "
          f"reused from the engine's cache; resend {usage['resend']['prompt_tokens']} characters, "
          f"{usage['resend']['prompt_tokens_details']['cached_tokens']} reused")
    met = ratios["responses"] <= TARGET
    verdict = (f"responses turn {args.turns} within {TARGET}x of turn 1: {'met' if met else 'NOT met'} "
               f"({ratios['responses']:.2f}x)")
    print(verdict)
    payload = {"store": args.store, "chains": args.chains, "turns": args.turns, "window": WINDOW,
               "rows": [{"turn": t, "responses_s": at(times["responses"], t), "resend_s": at(times["resend"], t)}
                        for t in marks],
               "ratios": ratios, "last_usage": usage, "verdict": verdict, "times": times}
    print(f"results: {save('responses', payload)}")
    return 0 if met else 1
