"""Retokenization drift on a real server: what the engine reuses after answers cut by ``max_tokens``.

An answer cut by ``max_tokens`` often ends inside what the tokenizer would merge, so the ids the
engine generated differ from the canonical encoding of the answer's text (docs/tokens.md). One
``lmchat serve`` (the bundled model on llama.cpp, one thread) per ``--drift`` policy; ``--sessions``
chat sessions of ``--turns`` turns each, every answer cut at ``--max-tokens`` (+0-7 by session), the client resending
its history with a session id (what OpenAI clients do). Per policy, over the turns after the first:
the share of the prompt the engine reused (``cached_tokens / prompt_tokens``), the turns that reused
nothing, the turns whose ``cache_miss_reason`` says the engine could not reuse all it held, and the
time per turn. ``rewind`` pays a few tokens per drift, ``reset`` the whole history, ``keep`` nothing
(the engine continues from its own ids). Sampling is the model's default (the bundled model's
temperature 0.2, repetition penalty 1.2), seeded per session so the three policies see the same answers.
"""
from __future__ import annotations

import argparse
import collections
import statistics
import subprocess
import time

import httpx

from .common import save, start_serve, table

POLICIES = ("rewind", "reset", "keep")
TOPICS = ["the sea", "mountains", "bread", "rivers", "the moon", "trains", "bees", "winter", "libraries", "tea",
          "clocks", "maps", "violins", "forests", "salt", "bridges", "owls", "snow", "paper", "gardens"]


def start(port: int, drift: str, threads: int) -> subprocess.Popen:
    return start_serve(["--store", "memory", "--drift", drift, "--threads", str(threads)], port)


def run_policy(drift: str, args) -> dict:
    proc = start(args.port, drift, args.threads)
    later, reasons, cut = [], collections.Counter(), 0
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{args.port}/v1", timeout=300) as client:
            for s in range(args.sessions):
                history = []
                for t in range(args.turns):
                    history.append({"role": "user", "content": f"Tell me something about {TOPICS[s % len(TOPICS)]}"
                                                               f" ({t + 1})."})
                    started = time.perf_counter()
                    r = client.post("/chat/completions", json={
                        "messages": history, "session_id": f"{drift}-{s}", "max_tokens": args.max_tokens + s % 8,
                        "seed": s})
                    elapsed = time.perf_counter() - started
                    r.raise_for_status()
                    body = r.json()
                    history.append(body["choices"][0]["message"])
                    cut += body["choices"][0]["finish_reason"] == "length"
                    usage = body["usage"]
                    details = usage.get("prompt_tokens_details") or {}
                    if t:
                        later.append({"prompt": usage["prompt_tokens"], "cached": details.get("cached_tokens", 0),
                                      "seconds": elapsed})
                        if details.get("cache_miss_reason"):
                            reasons[details["cache_miss_reason"].split(":")[0][:60]] += 1
    finally:
        proc.terminate()
        proc.wait(30)
    return {"drift": drift, "turns_measured": len(later), "answers_cut": cut,
            "reused_share": sum(x["cached"] for x in later) / sum(x["prompt"] for x in later),
            "reused_nothing": sum(1 for x in later if x["cached"] == 0),
            "with_miss_reason": sum(reasons.values()), "reasons": dict(reasons),
            "turn_s_median": statistics.median(x["seconds"] for x in later),
            "prefilled_tokens": sum(x["prompt"] - x["cached"] for x in later)}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench drift", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sessions", type=int, default=20)
    p.add_argument("--turns", type=int, default=4, help="turns per session (the first one is not counted)")
    p.add_argument("--max-tokens", type=int, default=5,
                   help="answers are cut at this many tokens plus 0-7 (by session), so the cuts fall in many places")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--port", type=int, default=18791)
    p.add_argument("--only", default=",".join(POLICIES), help="comma-separated policies")
    args = p.parse_args(argv)
    rows = [run_policy(d, args) for d in args.only.split(",")]
    print(f"{args.sessions} sessions x {args.turns} turns on the bundled model, answers cut at "
          f"{args.max_tokens}-{args.max_tokens + 7} tokens; "
          f"the {rows[0]['turns_measured']} turns after each session's first:")
    print()
    print(table(["--drift", "prompt reused", "turns reusing nothing", "turns with cache_miss_reason",
                 "tokens prefilled", "turn (median)"],
                [[r["drift"], f"{r['reused_share']:.1%}", r["reused_nothing"], r["with_miss_reason"],
                  r["prefilled_tokens"], f"{r['turn_s_median'] * 1000:.0f} ms"] for r in rows]))
    print(f"results: {save('drift', {'args': vars(args), 'rows': rows})}")
    return 0
