"""What comes before a constrained answer of gpt-oss (the harmony format): its reasoning, free, on the analysis
channel if it writes one, then the header of the answer's own message.

The generation prompt ends with ``<|start|>assistant``; the model may write
``<|channel|>analysis<|message|>...<|end|><|start|>assistant`` first, then its answer:
``<|channel|>final<|message|>{answer}`` or a call, `` to=functions.NAME<|channel|>commentary json<|message|>``.
These markers are special tokens in gpt-oss' tokenizer; given those (``tokens``), the grammar requires the
tokens themselves, as :mod:`.forcing` does.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping

from ..lark import EMPTY, Expr, Grammar, Pattern, Ref, Rule, Text, Token, opt, rules, seq

#: how a marker is written in a grammar (:func:`marker_writer`)
Mark = Callable[[str], Expr]


def marker_writer(tokens: Mapping[str, int] | None) -> Mark:
    """A marker in a grammar: its special token where the tokenizer has one, else its text (all a model without
    it can write)."""
    known = tokens or {}

    def mark(marker: str) -> Expr:
        return Token(known[marker]) if marker in known else Text(marker)
    return mark


def _free_until(end: str, mark: Mark, rule: str, max_tokens: int | None) -> tuple[Expr, Grammar]:
    """Free text ended by the marker ``end``: the grammar expression, and the lexeme rule it needs (if any).
    ``max_tokens``: a budget past which the marker is forced (as
    :attr:`lmchat.constraints.Constraint.after_max_tokens`; the text then stops at a ``<``)."""
    token = mark(end)
    if max_tokens is not None:
        return seq(Ref(rule), token), Grammar((Rule(rule, Pattern.excluding("<"), max_tokens=max_tokens),))
    if isinstance(token, Token):  # free text ends where the special token comes
        return seq(Pattern("(?s:.*)"), token), Grammar(())
    # spelled out as text: the lexeme has to end at its spelling
    return Ref(rule), Grammar((Rule(rule, Pattern("(?s:.*)" + Pattern.literal(end).regex), lazy=True),))


def harmony_lead(mark: Mark, final: bool, max_tokens: int | None = None) -> str:
    """The rule ``lead`` (and the rules it uses): an optional analysis message, then (``final``) the final
    channel's header; without ``final`` the answer writes its own header (a call's). ``max_tokens``: a budget
    for the analysis (:func:`_free_until`)."""
    free, lexeme = _free_until("<|end|>", mark, "analysis_text", max_tokens)
    header = seq(mark("<|channel|>"), Text("final"), mark("<|message|>")) if final else EMPTY
    lead = rules(("lead", seq(opt(seq(Ref("analysis"), mark("<|start|>"), Text("assistant"))), header)),
                 ("analysis", seq(mark("<|channel|>"), Text("analysis"), mark("<|message|>"), free)))
    return (lead + lexeme).render()


def gemma4_lead(mark: Mark, max_tokens: int | None = None) -> str:
    """The rule ``lead`` of a Gemma 4 answer: an optional thought channel, ``<|channel>thought...<channel|>``,
    free, then the answer (``max_tokens``: a budget for the thought, :func:`_free_until`)."""
    free, lexeme = _free_until("<channel|>", mark, "thought_text", max_tokens)
    return (rules(("lead", opt(Ref("thought"))), ("thought", seq(mark("<|channel>"), free))) + lexeme).render()
