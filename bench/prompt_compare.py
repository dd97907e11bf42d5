"""Per-turn prompt construction, side by side: lmchat's session deltas vs transformers vs FastChat.

One conversation (``prompt_cost.conversation``), one process, SmolLM2's chat
template in every library, so the three build byte-identical prompts (checked
before anything is timed):

* lmchat: ``Session("smollm2").prompt(question)`` renders only the new turn
  (text delta), and with SmolLM2's tokenizer attached also encodes only it
  (token delta);
* transformers: ``apply_chat_template(history, add_generation_prompt=True)``
  with SmolLM2's tokenizer and the template it ships, ``tokenize=False`` and
  ``tokenize=True``, re-rendering the whole history each turn;
* FastChat: ``Conversation.get_prompt()`` of its ChatML template
  (``qwen-7b-chat``) with the same system message, re-joining the history.

Ratios are the other library's time over lmchat's delta of the same kind
(text over text, ids over ids).
"""
from __future__ import annotations

import argparse

from . import token_cost
from .common import median_time, save, table
from .prompt_cost import conversation, lmchat_turn_cost

TEMPLATE = "smollm2"


def ratio(x: float) -> str:
    return f"{x:.1f}x" if x < 10 else f"{x:.0f}x"


def fastchat_conversation(msgs: list[dict]):
    from fastchat.conversation import get_conv_template

    conv = get_conv_template("qwen-7b-chat")
    conv.set_system_message(msgs[0]["content"])
    for m in msgs[1:]:
        conv.append_message(conv.roles[0] if m["role"] == "user" else conv.roles[1], m["content"])
    conv.append_message(conv.roles[1], None)  # FastChat's generation prompt
    return conv


def check_same_prompt(tok, turn: int) -> None:
    """The libraries must build the same prompt, or the times would compare different work."""
    import lmchat

    msgs = conversation(turn)[:-1]
    ours = lmchat.get_template(TEMPLATE).messages2prompt(msgs)
    theirs = tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
    fastchat = fastchat_conversation(msgs).get_prompt()
    if not ours == theirs == fastchat:
        raise SystemExit(f"turn {turn}: lmchat, transformers and FastChat disagree on the prompt")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench prompt_compare", description=__doc__)
    p.add_argument("--turns", default="1,10,50,200")
    args = p.parse_args(argv)
    turns = [int(t) for t in args.turns.split(",")]
    tok = token_cost.smollm2_tokenizer()
    for turn in turns:
        check_same_prompt(tok, turn)
    records, rows = [], []
    for turn in turns:
        msgs = conversation(turn)[:-1]  # the history plus the new question
        conv = fastchat_conversation(msgs)
        r = {
            "turn": turn,
            "lmchat_text_s": lmchat_turn_cost(TEMPLATE, turn),
            "lmchat_tokens_s": lmchat_turn_cost(TEMPLATE, turn, tok),
            "transformers_text_s": median_time(
                lambda m=msgs: tok.apply_chat_template(m, tokenize=False, add_generation_prompt=True), repeat=30),
            "transformers_tokens_s": median_time(
                lambda m=msgs: tok.apply_chat_template(m, tokenize=True, add_generation_prompt=True), repeat=30),
            "fastchat_text_s": median_time(conv.get_prompt, repeat=100),
        }
        records.append(r)
        text, ids = r["lmchat_text_s"], r["lmchat_tokens_s"]
        rows.append([
            turn, f"{text * 1e6:.1f} µs", f"{ids * 1e6:.0f} µs",
            f"{r['transformers_text_s'] * 1e6:.0f} µs", ratio(r["transformers_text_s"] / text),
            f"{r['transformers_tokens_s'] * 1e6:.0f} µs", ratio(r["transformers_tokens_s"] / ids),
            f"{r['fastchat_text_s'] * 1e6:.1f} µs", ratio(r["fastchat_text_s"] / text),
        ])
    print(f"template {TEMPLATE} (transformers: SmolLM2-135M-Instruct's tokenizer and template; "
          "FastChat: qwen-7b-chat), identical prompts\n")
    print(table(["turn", "lmchat text delta", "lmchat token delta", "transformers str", "str / lmchat",
                 "transformers ids", "ids / lmchat", "FastChat get_prompt", "FastChat / lmchat"], rows))
    print(f"\nresults: {save('prompt_compare', {'template': TEMPLATE, 'rows': records})}")
    return 0
