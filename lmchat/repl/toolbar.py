"""The bottom toolbar: what the engine holds, what the last turn cost, how fast it generated.

It says things in the user's words (why the last turn could not reuse the cache: "the conversation was
resent", "the oldest messages were dropped"), never the session's internals, and fits the terminal's
width: the least useful parts go first when it is narrow.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from ..session.vocab import Tokenizer
from .settings import describe_format, format_of

if TYPE_CHECKING:
    from ..session import Delta, Session
    from .conversation import Conversation

SEP = " │ "


def toolbar_text(conversation: Conversation, width: int | None = None) -> str:
    """E.g. ``1234/32768 tokens │ last turn: 1200 reused, 34 prefilled │ 41.5 tok/s │ qwen2.5 · echo``.

    When the last turn could not reuse all the engine held (a reset, an answer re-encoded, an overflow),
    why follows the counts. ``width``: the terminal's columns; parts are dropped (template and backend, then
    speed, then why) and the rest shortened until it fits.
    """
    session = conversation.session
    size = conversation_size(conversation)
    # no tokenizer: the session counts characters and checks no budget
    used = f"{size}/{session.session_len} tokens" if session.counts_tokens else f"{size} chars (no tokenizer)"
    last, why, speed = conversation.last, None, None
    turn = None
    if last is not None:
        turn = f"last turn: {last.reused} reused, {last.prefilled} prefilled"
        why = cache_miss(conversation.last_delta)
        value, unit = last.speed
        speed = f"{value:.1f} {unit}"
    names = f"{session.template.name} · {conversation.backend.name}"
    fmt = format_of(conversation.overrides.get("format"))
    # the format goes right after the names: a narrow terminal keeps the counts, which change every turn
    shown = f"format: {describe_format(fmt)}" if fmt else None
    candidates: list[list[str | None]] = [
        [used, _with(turn, why), speed, shown, names],
        [used, _with(turn, why), speed, shown],
        [used, _with(turn, why), speed],
        [used, _with(turn, why)],
        [used, turn],
        [used, f"{last.reused}+{last.prefilled}" if last else None],
    ]
    for parts in candidates:
        text = SEP.join(p for p in parts if p)
        if width is None or len(text) <= width - 1:  # the last column stays free: no wrap, no cut
            return text
    assert width is not None  # noqa: S101 - without a width the first candidate was returned
    return text[: max(1, width - 2)] + "…"


def _with(turn: str | None, why: str | None) -> str | None:
    return f"{turn} ({why})" if turn and why else turn


def cache_miss(delta: Delta | None) -> str | None:
    """Why the last turn did not reuse all the engine held, in a few plain words (None: it did)."""
    if delta is None or not (delta.reset or delta.discard):
        return None
    if delta.dropped:
        return f"context full: {delta.dropped} oldest messages dropped"
    reason = delta.reason or ""
    if not delta.reset:  # part of the cache was dropped: an answer re-encoded, or reopened by /continue
        return "answer reopened" if "reopen" in reason else "last answer re-encoded"
    for start, words in (("resumed", "resumed"), ("the system prompt", "system prompt changed"),
                         ("the template", "template changed"), ("forked", "forked"), ("loaded", "loaded"),
                         ("the last generation failed", "after an error"), ("reopening", "answer reopened")):
        if reason.startswith(start):
            return f"{words}: conversation resent"
    if "canonical" in reason:
        return "last answer re-encoded: conversation resent"
    return "conversation resent"  # after /undo, /reset, /retry


def conversation_size(conversation: Conversation) -> int:
    """What the engine will hold of the conversation: what it holds, or when its next turn resends the whole
    conversation (after /undo, /reset, /system...), the size of that (computed once per change)."""
    session = conversation.session
    if not session.needs_reset:
        return session.step
    # edits that keep the session object change its turns (/undo, /reset); the others replace it
    key = (id(session), session.turns, session.needs_reset, session.step)
    cached = conversation.resent_size
    if cached is not None and cached[0] == key:
        return cached[1]
    size = _resent_size(session, conversation.tokenizer)
    conversation.resent_size = (key, size)
    return size


def _resent_size(session: Session, tokenizer: Tokenizer | None) -> int:
    from ..session.tokens import codec_for, encode_prompt  # tokenizers: only with a tokenizer

    messages = session.messages
    if not messages:
        return 0
    template = session.template
    try:
        chat = template.make_chat(messages, tools=session.tools, add_generation_prompt=False, date=session.date,
                                  **session.template_kwargs)
        if session.counts_tokens and tokenizer is not None:
            return len(encode_prompt(template, chat, codec_for(tokenizer), session.injection)[1])
        template.check(chat)
        return len(template.render_window(chat, 0)[0])
    except Exception:  # noqa: BLE001 - a conversation the template refuses to render alone: show what is held
        return session.step
