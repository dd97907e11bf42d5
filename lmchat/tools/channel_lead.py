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
from collections.abc import Callable, Mapping


def marker_writer(tokens: Mapping[str, int] | None) -> Callable[[str], str]:
    """A marker as a Lark grammar writes it: its special token (``<[id]>``) where the tokenizer has one, else
    its text (all a model without it can write)."""
    known = tokens or {}

    def mark(marker: str) -> str:
        return f"<[{known[marker]}]>" if marker in known else json.dumps(marker, ensure_ascii=False)
    return mark


def harmony_lead(mark: Callable[[str], str], final: bool, max_tokens: int | None = None) -> str:
    """The rule ``lead`` (and the rules it uses): an optional analysis message, then (``final``) the final
    channel's header; without ``final`` the answer writes its own header (a call's). ``max_tokens``: a budget
    for the analysis, past which ``<|end|>`` is forced (as :attr:`lmchat.constraints.Constraint.after_max_tokens`;
    its text then stops at a ``<``)."""
    end = mark("<|end|>")
    if max_tokens is not None:
        free, lexeme = f"analysis_text {end}", f"\nanalysis_text[max_tokens={int(max_tokens)}]: /[^<]*/"
    elif end.startswith("<["):  # free text ends where the special token comes
        free, lexeme = f"/(?s:.*)/ {end}", ""
    else:  # spelled out as text: the lexeme has to end at its spelling
        free, lexeme = "analysis_text", "\nanalysis_text[lazy]: /(?s:.*)<\\|end\\|>/"
    header = f' {mark("<|channel|>")} "final" {mark("<|message|>")}' if final else ""
    return (f'lead: (analysis {mark("<|start|>")} "assistant")?{header}\n'
            f'analysis: {mark("<|channel|>")} "analysis" {mark("<|message|>")} {free}{lexeme}')


def gemma4_lead(mark: Callable[[str], str], max_tokens: int | None = None) -> str:
    """The rule ``lead`` of a Gemma 4 answer: an optional thought channel, ``<|channel>thought...<channel|>``,
    free, then the answer (``max_tokens``: a budget for the thought, as :func:`harmony_lead`'s)."""
    end = mark("<channel|>")
    if max_tokens is not None:
        free, lexeme = f"thought_text {end}", f"\nthought_text[max_tokens={int(max_tokens)}]: /[^<]*/"
    elif end.startswith("<["):  # free text ends where the special token comes
        free, lexeme = f"/(?s:.*)/ {end}", ""
    else:  # spelled out as text: the lexeme has to end at its spelling
        free, lexeme = "thought_text", "\nthought_text[lazy]: /(?s:.*)<channel\\|>/"
    return f'lead: thought?\nthought: {mark("<|channel>")} {free}{lexeme}'
