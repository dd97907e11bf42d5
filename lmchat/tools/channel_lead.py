"""What comes before a constrained answer of gpt-oss (the harmony format): its reasoning, free, on the analysis
channel if it writes one, then the header of the answer's own message.

The generation prompt ends with ``<|start|>assistant``; the model may write
``<|channel|>analysis<|message|>...<|end|><|start|>assistant`` first, then its answer:
``<|channel|>final<|message|>{answer}`` or a call, `` to=functions.NAME<|channel|>commentary json<|message|>``.
These markers are special tokens in gpt-oss' tokenizer; given those (``tokens``), the grammar requires the
tokens themselves, as :mod:`.forcing` does.
"""
from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping


def marker_writer(tokens: Mapping[str, int] | None) -> Callable[[str], str]:
    """A marker as a Lark grammar writes it: its special token (``<[id]>``) where the tokenizer has one, else
    its text (all a model without it can write)."""
    known = tokens or {}

    def mark(marker: str) -> str:
        return f"<[{known[marker]}]>" if marker in known else json.dumps(marker, ensure_ascii=False)
    return mark


def _free_until(end: str, mark: Callable[[str], str], rule: str, max_tokens: int | None) -> tuple[str, str]:
    """Free text ended by the marker ``end``: the grammar expression, and the lexeme rule it needs (or "").
    ``max_tokens``: a budget past which the marker is forced (as
    :attr:`lmchat.constraints.Constraint.after_max_tokens`; the text then stops at a ``<``)."""
    token = mark(end)
    if max_tokens is not None:
        return f"{rule} {token}", f"\n{rule}[max_tokens={int(max_tokens)}]: /[^<]*/"
    if token.startswith("<["):  # free text ends where the special token comes
        return f"/(?s:.*)/ {token}", ""
    # spelled out as text: the lexeme has to end at its spelling
    return rule, f"\n{rule}[lazy]: /(?s:.*){re.escape(end)}/"


def harmony_lead(mark: Callable[[str], str], final: bool, max_tokens: int | None = None) -> str:
    """The rule ``lead`` (and the rules it uses): an optional analysis message, then (``final``) the final
    channel's header; without ``final`` the answer writes its own header (a call's). ``max_tokens``: a budget
    for the analysis (:func:`_free_until`)."""
    free, lexeme = _free_until("<|end|>", mark, "analysis_text", max_tokens)
    header = f' {mark("<|channel|>")} "final" {mark("<|message|>")}' if final else ""
    return (f'lead: (analysis {mark("<|start|>")} "assistant")?{header}\n'
            f'analysis: {mark("<|channel|>")} "analysis" {mark("<|message|>")} {free}{lexeme}')


def gemma4_lead(mark: Callable[[str], str], max_tokens: int | None = None) -> str:
    """The rule ``lead`` of a Gemma 4 answer: an optional thought channel, ``<|channel>thought...<channel|>``,
    free, then the answer (``max_tokens``: a budget for the thought, :func:`_free_until`)."""
    free, lexeme = _free_until("<channel|>", mark, "thought_text", max_tokens)
    return f'lead: thought?\nthought: {mark("<|channel>")} {free}{lexeme}'
