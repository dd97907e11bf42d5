"""Per-turn prompt construction: lmchat's session delta vs re-rendering the history.

lmchat renders only the new turn, so its cost should stay flat with the turn
number; transformers' ``apply_chat_template`` re-renders the whole history.
Both use the same official template (Qwen2.5's, read from the conformance
corpus) and the same conversation, in one process.
"""
from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path

import lmchat

from .common import median_time, save, table

CORPUS = Path(os.environ.get("LMCHAT_CONFORMANCE", Path(__file__).resolve().parents[2] / "shared" / "conformance"))


def conversation(turns: int) -> list[dict]:
    msgs = [{"role": "system", "content": "You are a helpful assistant."}]
    for i in range(turns):
        msgs.append({"role": "user", "content": f"Question number {i}: what is {i} + {i}? Explain briefly."})
        msgs.append({"role": "assistant", "content": f"{i} + {i} = {2 * i}. Adding a number to itself doubles it."})
    return msgs


def session_turn_cost(new_session, turn: int, window: int = 30, repeat: int = 200) -> float:
    """Median cost of ``Session.prompt`` at turns turn..turn+window (turn 1: fresh sessions)."""
    msgs = conversation(turn + window)
    if turn == 1:
        return median_time(lambda: new_session(msgs[0]["content"]).prompt(msgs[1]["content"]), repeat=repeat)
    session = new_session(msgs[0]["content"])
    samples = []
    for i in range(turn + window):
        t0 = time.perf_counter()
        session.prompt(msgs[1 + 2 * i]["content"])
        elapsed = time.perf_counter() - t0
        session.commit(msgs[2 + 2 * i]["content"])
        if i + 1 >= turn:
            samples.append(elapsed)
    return statistics.median(samples)


def lmchat_turn_cost(template: str, turn: int, window: int = 30) -> float:
    return session_turn_cost(lambda system: lmchat.Session(template, system=system), turn, window)


def transformers_cost(official: str, turn: int, tokenize: bool) -> float | None:
    try:
        from tokenizers import Tokenizer, models
        from transformers import PreTrainedTokenizerFast
    except ImportError:
        return None
    path = CORPUS / "templates" / f"{official}.jinja"
    if not path.is_file():
        return None
    tok = PreTrainedTokenizerFast(tokenizer_object=Tokenizer(models.BPE()), chat_template=path.read_text())
    msgs = conversation(turn)[:-1]  # the history plus the new question
    return median_time(lambda: tok.apply_chat_template(msgs, tokenize=tokenize, add_generation_prompt=True), repeat=30)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench prompt_cost", description=__doc__)
    p.add_argument("--turns", default="1,10,50,200")
    p.add_argument("--template", default="qwen2.5")
    args = p.parse_args(argv)
    turns = [int(t) for t in args.turns.split(",")]
    official = lmchat.registry.template_class(args.template).official
    rows, records = [], []
    base = None
    for turn in turns:
        ours = lmchat_turn_cost(args.template, turn)
        base = base or ours
        theirs = transformers_cost(official, turn, tokenize=False) if official else None
        records.append({"turn": turn, "lmchat_s": ours, "transformers_s": theirs})
        rows.append([
            turn,
            f"{ours * 1e6:.1f} µs",
            f"{ours / base:.2f}x",
            f"{theirs * 1e6:.1f} µs" if theirs else "n/a",
            f"{theirs / ours:.0f}x" if theirs else "n/a",
        ])
    print(f"template {args.template} (official {official})\n")
    print(table(["turn", "lmchat delta", "vs turn 1", "transformers apply_chat_template", "transformers / lmchat"],
                rows))
    print(f"\nresults: {save('prompt_cost', {'template': args.template, 'rows': records})}")
    return 0
