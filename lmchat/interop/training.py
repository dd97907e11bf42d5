"""Training encoding: input ids, labels and the assistant mask of a whole conversation.

Labels are ``-100`` everywhere except what the model must learn to write in
each assistant turn: its content (after the generation prompt, ``lead``
included) and the end marker it must emit — the template's ``eoa``, its first
stop word, or for XTuner templates ``SUFFIX`` plus the eos unless
``SUFFIX_AS_EOS``. Separators after the marker, system and user turns and the
template's markup are never trained (XTuner's ``encode_fn`` semantics).
Content is encoded with special-token parsing off, as in sessions.
"""
from __future__ import annotations

import datetime as _dt
from collections.abc import Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

from ..jsontypes import JSONObject
from ..registry import as_template
from ..session.tokens import codec_for
from ..session.vocab import Tokenizer
from ..templates.base import BaseTemplate
from ..templates.chat import Chat
from ..templates.xtuner import XTunerTemplate

IGNORE_INDEX = -100


@runtime_checkable
class GenerationSpans(Protocol):
    """A template that marks its trained spans itself (a Jinja template's ``{% generation %}`` blocks)."""

    def generation_spans(self, chat: Chat) -> tuple[str, list[tuple[int, int]]] | None: ...


def answer_end(template: BaseTemplate) -> str:
    """The end marker a model learns to emit after an answer."""
    if isinstance(template, XTunerTemplate):  # SUFFIX, then the eos unless SUFFIX_AS_EOS
        return template.suffix + ("" if template.suffix_as_eos else template.eos)
    if template.eoa:
        return template.eoa
    return template.stop_words[0] if template.stop_words else ""


def trained_spans(template: BaseTemplate, chat: Chat) -> tuple[str, list[tuple[int, int]]]:
    """The rendering (no generation prompt) and the character spans a model is trained on.

    A Jinja template with ``{% generation %}`` blocks says so itself, as transformers reads it.
    """
    marked = template.generation_spans(chat) if isinstance(template, GenerationSpans) else None
    if marked is not None:
        return marked
    text, offsets = template.render_window(chat, 0)
    chat.add_generation_prompt = True
    generation_prompt = template.tail(chat)
    chat.add_generation_prompt = False
    marker = answer_end(template)
    spans = []
    for i, message in enumerate(chat.messages):
        if message["role"] != "assistant":
            continue
        begin, end = offsets[i], offsets[i + 1]
        piece = text[begin:end]
        shared = 0  # the generation prompt is markup even where history renders it differently
        while shared < min(len(piece), len(generation_prompt)) and piece[shared] == generation_prompt[shared]:
            shared += 1
        stop = piece.rfind(marker) if marker else -1
        spans.append((begin + shared, begin + stop + len(marker) if stop >= shared else end))
    return text, spans


def encode_for_training(
    # Any: messages and template arguments as the template's make_chat takes them
    messages: Sequence[Mapping[str, Any]],
    template: BaseTemplate | str,
    tokenizer: Tokenizer,
    max_length: int | None = None,
    *,
    tools: list[JSONObject] | None = None,
    date: _dt.date | None = None,
    **template_kwargs: Any,
) -> dict[str, list[int]]:
    """``{'input_ids', 'labels', 'assistant_masks'}`` for one conversation, cut to ``max_length``."""
    template = as_template(template)
    codec = codec_for(tokenizer)
    chat = template.make_chat(messages, tools=tools, add_generation_prompt=False, date=date, **template_kwargs)
    template.check(chat)
    text, spans = trained_spans(template, chat)
    ids, starts = codec.encode_offsets(text, codec.spans(template, chat, 0, text))
    ends = starts[1:] + [len(text)]
    # a token is trained when it overlaps a trained span, as transformers' assistant mask counts it
    mask = [int(any(s < b and e > a for a, b in spans)) for s, e in zip(starts, ends, strict=True)]
    labels = [t if m else IGNORE_INDEX for t, m in zip(ids, mask, strict=True)]
    if max_length is not None:
        ids, labels, mask = ids[:max_length], labels[:max_length], mask[:max_length]
    return {"input_ids": ids, "labels": labels, "assistant_masks": mask}
