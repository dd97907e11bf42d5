"""Session edits both the REPL and the server make, written against the snapshot format.

``Session.to_dict()`` is a documented JSON snapshot and ``Session.from_dict``
restores it exactly. Its ``needs_reset`` flag is how a session knows the
engine's cache no longer matches what it holds: setting it makes the next
delta a reset that carries the whole prompt, while the conversation stays.
That is what resuming after a restart needs (the engine lost its cache), and
what every edit of earlier turns needs (system prompt, template, a fork under
a new id, for which the engine holds nothing).

:func:`commit_generation` is the one rule that turns what an engine streamed
into a commit.
"""
from __future__ import annotations

import uuid
from collections.abc import Mapping

import attrs

from ..messages import Message
from ..templates.base import BaseTemplate
from .core import Session
from .snapshot import messages_of
from .vocab import Tokenizer

#: keys a store adds to a snapshot (its version, the owner, the engine): not part of the session
STORE_KEYS = ("store_version", "owner", "engine", "chat")


def restored(data: Mapping[str, object], tokenizer: Tokenizer | None, reason: str) -> Session:
    """A session from its snapshot whose next delta resets (``reason`` says why), history intact."""
    data = {k: v for k, v in data.items() if k not in STORE_KEYS}
    data.update(needs_reset=True, reset_reason=reason)
    return Session.from_dict(data, tokenizer=tokenizer)


def forked(session: Session, tokenizer: Tokenizer | None, new_id: str | None = None) -> Session:
    """The same conversation under a new id (the engine holds nothing for it yet)."""
    data = session.to_dict()
    data["session_id"] = new_id or uuid.uuid4().hex
    return restored(data, tokenizer, f"forked from session {session.session_id}")


def with_system(session: Session, system: str | None, tokenizer: Tokenizer | None) -> Session:
    """The conversation with its system prompt replaced (None: removed)."""
    data = session.to_dict()
    messages = list(messages_of(data))
    if messages and messages[0]["role"] == "system":
        messages.pop(0)
    if system is not None:
        messages.insert(0, {"role": "system", "content": system})
    data.update(system=system, messages=messages)
    _check_renders(session.template, messages, session)
    return restored(data, tokenizer, "the system prompt changed")


def with_template(session: Session, template: BaseTemplate, tokenizer: Tokenizer | None) -> Session:
    """The conversation under another template; ``session_len`` becomes the new template's."""
    data = session.to_dict()
    data.update(template=template.to_dict(), session_len=None)
    _check_renders(template, messages_of(data), session)
    return restored(data, tokenizer, f"the template changed to {template.name}")


def _check_renders(template: BaseTemplate, messages: list[Message], session: Session) -> None:
    """Refuse an edit the template cannot render (e.g. a system prompt it does not support) up front: the
    session's ``messages`` as edited, with its tools and template arguments."""
    if messages:
        chat = template.make_chat(messages, tools=session.tools, **session.template_kwargs)
        template.render(chat)


@attrs.frozen
class Generation:
    """What an engine produced for one turn: the text, its ids, why it ended, which stop fired."""

    text: str
    token_ids: tuple[int, ...] = ()
    finish_reason: str = "stop"
    stop: str | None = None


def commit_generation(session: Session, generation: Generation, **fields: object) -> None:
    """Commit a generation as the engine holds it.

    The generated ids are kept when the session counts tokens and the engine
    gave ids for its text (else the session encodes the text canonically).
    The end marker is committed only when the model emitted it (``finish_reason
    == 'stop'``): an answer cut short (``max_new_tokens``, a cancel, a
    repetition stop) is held without one, and the next delta brings the
    template's. ``fields`` go on the message (parsed tool calls).
    """
    text, ids = generation.text, generation.token_ids
    keep_ids = session.counts_tokens and (ids or not text)
    stop = generation.stop if generation.finish_reason == "stop" else ""  # None: the template's eoa
    session.commit(text, token_ids=list(ids) if keep_ids else None, stop=stop, **fields)
