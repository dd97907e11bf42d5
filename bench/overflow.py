"""A conversation longer than its context, under the ``shift`` overflow policy: how often the engine computes it again.

One session on the embedded llama.cpp engine (the bundled model, one thread, ``--ctx`` tokens, the REPL's one
sequence), answers sampled as ``lmchat chat`` samples them (the bundled model's defaults, seeded) up to
``--max-new-tokens``, ``--turns`` questions; once per ``--room`` (the session's ``overflow_room``: the share of the
context a drop leaves free for the turns after it; 0 drops only what the turn needs, as lmchat did before). Per
room, over the turns from the first that dropped messages: those that dropped, those in which the engine computed
most of the prompt again (it prefilled more than it reused), the turns between two of those
(turns-until-next-reprefill), the prompt tokens prefilled and reused (the engine's own counts, as
``usage.prompt_tokens_details`` reports them), and the seconds. A shift the engine applies to its cache (llama.cpp's
context shift) costs no prefill; a reset that it cannot shift (``Delta.shiftable``, after an answer whose ids drifted
from their canonical encoding: docs/tokens.md) prefills everything after the system prompt.
"""
from __future__ import annotations

import argparse
import itertools
import statistics
import time

from .common import save, table


def run(room: float, args: argparse.Namespace, backend) -> dict:
    import lmchat
    from lmchat.backends import GenerationRequest, SamplingParams
    from lmchat.backends.base import model_sampling
    from lmchat.session.edits import Generation, commit_generation
    from lmchat.turns.turn import after_commit

    session = lmchat.Session(backend.template_name, tokenizer=backend.tokenizer, system="Answer in one sentence.",
                             policy=lmchat.SessionPolicy(session_len=backend.session_len, overflow="shift",
                                                         overflow_room=room))
    rows = []
    for t in range(args.turns):
        params = SamplingParams.from_template(session.template, **model_sampling(backend),
                                              max_new_tokens=args.max_new_tokens, seed=t)
        delta = session.prompt(f"Question {t + 1}: tell me one fact about the number {t + 1}, and why it matters.",
                               max_new_tokens=args.max_new_tokens)
        started = time.perf_counter()
        chunks = list(backend.generate(GenerationRequest.from_session(session, delta, params)))
        last = chunks[-1]
        commit_generation(session, Generation("".join(c.text for c in chunks),
                                              tuple(i for c in chunks for i in c.token_ids), last.finish_reason,
                                              last.stop))
        after_commit(backend, session.session_id, session, tools_called=False)
        rows.append({"turn": t, "new": len(delta.token_ids or ()), "dropped": delta.dropped, "reset": delta.reset,
                     "reason": delta.reason, "prefilled": last.prefilled, "reused": last.reused,
                     "seconds": time.perf_counter() - started})
    backend.drop(session.session_id)
    return summarize(room, rows)


def summarize(room: float, rows: list[dict]) -> dict:
    """The figures of one room from its turns (from the first that dropped on)."""
    full = next((r["turn"] for r in rows if r["dropped"]), None)
    later = rows[full:] if full is not None else []
    # computed again: the engine prefilled more of the prompt than it reused (a reset it could not shift keeps only
    # the system prompt it shares)
    again = [r["turn"] for r in later if r["prefilled"] > r["reused"]]
    gaps = [b - a for a, b in itertools.pairwise(again)]
    return {"room": room, "first_drop": full, "turns_after": len(later),
            "drops": sum(1 for r in later if r["dropped"]), "drop_resets": sum(1 for r in later if r["dropped"]
                                                                               and r["reset"]),
            "recomputed": len(again), "turns_between": statistics.median(gaps) if gaps else None,
            "prefilled": sum(r["prefilled"] for r in later), "reused": sum(r["reused"] for r in later),
            "seconds": round(sum(r["seconds"] for r in later), 1), "turns": rows}


def report(results: list[dict]) -> str:
    return table(["overflow_room", "turns from the first drop", "turns that dropped",
                  "computed most of the prompt again", "turns until the next (median)",
                  "prompt tokens prefilled", "reused", "s"],
                 [[r["room"], r["turns_after"], r["drops"], r["recomputed"], r["turns_between"], r["prefilled"],
                   r["reused"], r["seconds"]] for r in results])


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m bench overflow", description=__doc__.split("\n\n")[0])
    p.add_argument("--ctx", type=int, default=1024, help="the session's context (one sequence)")
    p.add_argument("--turns", type=int, default=30)
    p.add_argument("--max-new-tokens", type=int, default=128)
    p.add_argument("--room", type=float, action="append", help="overflow_room values (default: 0, 0.25, 0.5)")
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args(argv)
    from lmchat.backends.llamacpp import LlamaCppBackend

    rooms = args.room or [0.0, 0.25, 0.5]
    with LlamaCppBackend(threads=args.threads, sessions=1, ctx=args.ctx) as backend:
        results = [run(room, args, backend) for room in rooms]
    out = report(results)
    print(out)
    path = save("overflow", {"args": {k: str(v) for k, v in vars(args).items()}, "results": results})
    path.with_suffix(".md").write_text(out + "\n")
    return 0
