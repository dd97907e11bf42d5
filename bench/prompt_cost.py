"""The per-turn prompt cost that prompt_compare and token_cost measure: one conversation, and the median time
of lmchat's delta at a turn, as text or, with a tokenizer, as token ids.

lmchat renders (and encodes) only the new turn, so its cost should stay flat with the turn number;
transformers' ``apply_chat_template`` re-renders the whole history.
"""
from __future__ import annotations

import statistics
import time
from typing import Any

import lmchat

from .common import median_time


def conversation(turns: int) -> list[dict]:
    msgs = [{"role": "system", "content": "You are a helpful assistant."}]
    for i in range(turns):
        msgs.append({"role": "user", "content": f"Question number {i}: what is {i} + {i}? Explain briefly."})
        msgs.append({"role": "assistant", "content": f"{i} + {i} = {2 * i}. Adding a number to itself doubles it."})
    return msgs


def lmchat_turn_cost(template: str, turn: int, tokenizer: Any = None) -> float:
    """Median cost of ``Session.prompt`` at turns turn..turn+window (turn 1: fresh sessions); with
    ``tokenizer`` the delta is encoded too, which costs more per sample, so fewer are taken."""
    window, repeat = (30, 200) if tokenizer is None else (20, 50)
    msgs = conversation(turn + window)

    def new_session() -> lmchat.Session:
        return lmchat.Session(template, system=msgs[0]["content"], tokenizer=tokenizer,
                              policy=lmchat.SessionPolicy(session_len=10**9))

    if turn == 1:
        return median_time(lambda: new_session().prompt(msgs[1]["content"]), repeat=repeat)
    session = new_session()
    samples = []
    for i in range(turn + window):
        t0 = time.perf_counter()
        session.prompt(msgs[1 + 2 * i]["content"])
        elapsed = time.perf_counter() - t0
        session.commit(msgs[2 + 2 * i]["content"])
        if i + 1 >= turn:
            samples.append(elapsed)
    return statistics.median(samples)
