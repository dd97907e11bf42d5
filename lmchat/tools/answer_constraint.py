"""A constraint as it applies to a model's answer: after its reasoning block, if the model may write one.

The server (``response_format``, ``text.format``, a forced ``tool_choice``) and the REPL (``/set format``) put
a constraint on the answer, not on the reasoning before it: the reasoning stays free text (returned as
``reasoning_content``), the answer is constrained.
"""
from __future__ import annotations

from collections.abc import Mapping

import attrs

from .. import constraints
from ..constraints import Constraint
from ..errors import ConstraintUnsupported
from .channel_lead import marker_writer
from .registry import SYNTAX_TABLE, TemplateLike, prompt_opens_think, response_format
from .think import CLOSE, OPEN


def for_answer(constraint: Constraint | None, template: TemplateLike | None, field: str = "response_format",
               tokens: Mapping[str, int] | None = None) -> Constraint | None:
    """``constraint`` as it applies to an answer of ``template``'s model. A prompt that leaves ``<think>`` open
    (QwQ, DeepSeek-R1) starts the answer inside the block; otherwise (Qwen3) the model may open one or answer
    at once. In the harmony format (gpt-oss), the answer is the final channel's message, after an analysis
    message if the model writes one (:mod:`.channel_lead`; ``tokens``: the tokenizer's added tokens, so that
    its markers are required as the special tokens they are); in Gemma 4's, after an optional thought channel.
    ``field``: the request's, named in a refusal."""
    if constraint is None or template is None or constraint.after or constraint.lead:
        return constraint
    fmt = response_format(template)
    if not fmt.reasoning:
        return constraint
    syntax = SYNTAX_TABLE[fmt.tools]
    if syntax.parser.reasons:  # the syntax's own reasoning channel comes first: it says how (answer_lead)
        if syntax.answer_lead is None:
            raise ConstraintUnsupported(f"structured outputs are not available with the {fmt.tools!r} format yet",
                                        field=field)
        return attrs.evolve(constraint, lead=syntax.answer_lead(marker_writer(tokens)))
    opened = prompt_opens_think(template)
    return constraints.after_reasoning(constraint, CLOSE, opens="" if opened else OPEN)
