"""Reopening the last answer: the conversation ends with it open, as ``continue_final_message`` renders it.

The engine holds the answer followed by the end marker it emitted. When the
held context up to the answer's end is exactly the open rendering, the delta
only drops what follows the answer (``discard``; in token ids with a
tokenizer, else characters). Otherwise (a template that trims answers, a
pending reset, a stop word that merged into the answer's tokens) the delta is
a reset carrying the whole open prompt.
"""
from __future__ import annotations

import attrs

from ..errors import SessionError
from ..messages import Message, normalize_messages
from ..templates import continued
from ..templates.chat import Chat
from .planning import Frame
from .state import Delta, Held

#: fields of an answer that stay when it is reopened (its tool calls do not: the model writes on)
KEPT = ("role", "content", "reasoning_content", "thinking", "reasoning")


def reopen(frame: Frame, held: Held) -> tuple[Delta, Held]:
    """The delta that reopens the last answer of ``frame.chat``, and the state it leads to."""
    messages = frame.chat.messages
    answer = {k: v for k, v in messages[-1].items() if k in KEPT}
    content = answer.get("content")
    if not isinstance(content, str):
        raise SessionError("only an answer with text content can be reopened")
    open_chat, text, offsets, spans = _open_rendering(frame, messages[:-1] + [answer])
    codec = frame.codec
    end = held.answer_end
    kept = end is not None and not held.needs_reset and held.context[: end[0]] == text
    if kept and codec is not None:
        kept = end is not None and end[1] is not None  # end is not None: kept
    del messages[-1]
    if kept and end is not None:  # end is not None: kept
        chars, ids, anchor_chars, anchor_ids = end
        held = attrs.evolve(held, parts=list(held.parts), ids=list(held.ids))
        if codec is None:
            start, count, resend = chars, held.length - chars, None
        else:
            assert ids is not None  # kept with a codec: the answer's end in ids is known
            engine_len = held.rewind[0] + held.rewind[1] if held.rewind else len(held.ids)
            start = min(held.rewind[0], ids) if held.rewind else ids
            count, resend = engine_len - start, held.ids[start:ids]
            del held.ids[ids:]
            held.anchor = (anchor_chars, anchor_ids)
        held.truncate(chars)
        delta = Delta("", token_ids=resend, discard=(start, count) if count else None,
                      reason="the last answer is reopened: the engine drops what it holds after it" if count else None)
    else:
        why = held.reset_reason if held.needs_reset and held.reset_reason else (
            "the engine's context does not end with the reopened answer as the template renders it")
        # spans: found with a codec, None without one
        new_ids, new_anchor = codec.encode(text, spans) if codec is not None and spans is not None else (None, None)
        delta = Delta(text, reset=bool(held.parts), sequence_start=True, token_ids=new_ids,
                      reason=f"reopening the last answer: {why}" if held.parts else None)
        held = Held(ids=new_ids or [], anchor=new_anchor or (0, 0))
        held.append(text)
        held.offsets, held.tail = offsets[:-2], offsets[-2]
    held.rendered = len(messages)
    held.pending, held.reopened, held.rewind, held.answer_end, held.needs_reset = True, content, None, None, False
    return delta, held


def _open_rendering(frame: Frame, messages: list[Message]
                    ) -> tuple[Chat, str, list[int], list[tuple[int, int]] | None]:
    """The conversation rendered with its final message open: text, piece offsets, structural spans."""
    tagged, content = continued.tagged(normalize_messages(messages), "content")
    chat = frame.chat
    open_chat = Chat(tagged, tools=chat.tools, add_generation_prompt=False, date=chat.date, kwargs=chat.kwargs)
    frame.template.check(open_chat)
    rendered, offsets = frame.template.render_window(open_chat, 0)
    text = continued.cut(rendered, content)
    spans = None
    if frame.codec is not None:
        spans = [s for s in frame.codec.spans(frame.template, open_chat, 0, rendered, frame.injection)
                 if s[1] <= len(text)]
    return open_chat, text, offsets, spans
