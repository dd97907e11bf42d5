"""What the injection guard checks a session's new messages against (the 'split'/'reject' policies)."""
from __future__ import annotations

from typing import TYPE_CHECKING

from .. import validation

if TYPE_CHECKING:
    from ..templates.base import BaseTemplate
    from .tokens import TokenCodec


def special_strings(template: BaseTemplate, codec: TokenCodec | None) -> set[str]:
    """What may never come from content: the template's markers and every added token of the tokenizer."""
    markers = validation.template_markers(template)
    return markers | set(codec.special) if codec is not None else markers


def output_markers(template: BaseTemplate, codec: TokenCodec | None) -> frozenset[str]:
    """What an assistant message may hold all the same: its model's output markup (tool calls, reasoning)."""
    from ..tools.registry import output_markers as markup  # the parsers import sessions' neighbours: at call time

    found = set(markup(template))
    if codec is not None:
        found |= codec.output_tokens(template)
    return frozenset(found)
