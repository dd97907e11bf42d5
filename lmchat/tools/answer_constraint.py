"""A constraint as it applies to a model's answer: after its reasoning block, if the model may write one.

The server (``response_format``, ``text.format``, a forced ``tool_choice``) and the REPL (``/set format``) put
a constraint on the answer, not on the reasoning before it: the reasoning stays free text (returned as
``reasoning_content``), the answer is constrained.
"""
from __future__ import annotations

from typing import Any

from .. import constraints
from ..constraints import Constraint
from ..errors import ConstraintUnsupported
from .registry import FORMATS, prompt_opens_think, response_format
from .think import CLOSE, OPEN


def for_answer(constraint: Constraint | None, template: Any, field: str = "response_format") -> Constraint | None:
    """``constraint`` as it applies to an answer of ``template``'s model. A prompt that leaves ``<think>`` open
    (QwQ, DeepSeek-R1) starts the answer inside the block; otherwise (Qwen3) the model may open one or answer
    at once. A format whose reasoning is a channel of its own (harmony) is refused: its answer follows a
    header of special tokens, which the constraint cannot start after yet (it would forbid the header, and the
    model could write nothing it was trained to). ``field``: the request's, named in a refusal."""
    if constraint is None or template is None or constraint.after:
        return constraint
    fmt = response_format(template)
    if not fmt.reasoning:
        return constraint
    if FORMATS[fmt.tools].reasons:
        raise ConstraintUnsupported(f"structured outputs are not available with the {fmt.tools!r} format yet: its "
                                    f"answer follows a channel header of special tokens the constraint cannot start "
                                    f"after", field=field)
    opened = prompt_opens_think(template)
    return constraints.after_reasoning(constraint, CLOSE, opens="" if opened else OPEN)
