"""Session edits the REPL needs, written against the public snapshot format.

``Session.to_dict()`` is a documented JSON snapshot and ``Session.from_dict``
restores it exactly. Its ``needs_reset`` flag is how a session knows the
engine's cache no longer matches what it holds: setting it makes the next
delta a reset that carries the whole prompt, while the conversation stays.
That is what resuming after a restart needs (the engine lost its cache), and
what every edit of earlier turns needs (system prompt, template, a fork under
a new id, for which the engine holds nothing).
"""
from __future__ import annotations

import os
import uuid
from typing import Any, Mapping

import attrs

from ..errors import LmchatError, SessionError
from ..session import Delta, Session
from ..stores import VERSION_KEY
from ..templates.base import BaseTemplate


def restored(data: Mapping[str, Any], tokenizer: Any, reason: str) -> Session:
    """A session from its snapshot whose next delta resets (``reason`` says why), history intact."""
    data = {k: v for k, v in data.items() if k != VERSION_KEY}
    data.update(needs_reset=True, reset_reason=reason)
    return Session.from_dict(data, tokenizer=tokenizer)


def forked(session: Session, tokenizer: Any) -> Session:
    """The same conversation under a new id (the engine holds nothing for it yet)."""
    data = session.to_dict()
    data["session_id"] = uuid.uuid4().hex
    return restored(data, tokenizer, f"forked from session {session.session_id}")


def with_system(session: Session, system: str | None, tokenizer: Any) -> Session:
    """The conversation with its system prompt replaced (None: removed)."""
    data = session.to_dict()
    messages = list(data["messages"])
    if messages and messages[0]["role"] == "system":
        messages.pop(0)
    if system is not None:
        messages.insert(0, {"role": "system", "content": system})
    data.update(system=system, messages=messages)
    _check_renders(BaseTemplate.from_dict(data["template"]), data)
    return restored(data, tokenizer, "the system prompt changed")


def with_template(session: Session, template: BaseTemplate, tokenizer: Any) -> Session:
    """The conversation under another template; ``session_len`` becomes the new template's."""
    data = session.to_dict()
    data.update(template=template.to_dict(), session_len=None)
    _check_renders(template, data)
    return restored(data, tokenizer, f"the template changed to {template.name}")


def _check_renders(template: BaseTemplate, data: Mapping[str, Any]) -> None:
    """Refuse an edit the template cannot render (e.g. a system prompt it does not support) up front."""
    if data["messages"]:
        chat = template.make_chat(data["messages"], tools=data.get("tools"), **data.get("template_kwargs") or {})
        template.render(chat)


@attrs.frozen
class Continuation:
    """The last answer, prompted again as the start of a new one (``/continue``).

    The session has no way to reopen a committed answer, so the exchange is
    undone and its user message prompted again; the engine then receives that
    delta (a reset: undo drops the cache) followed by the answer as the model
    wrote it, ``prefix``, and generates after it. Committing ``prefix + new``
    with ``prefix_ids + new ids`` keeps the invariant: the session's context
    is exactly what the engine consumed and generated.
    """

    delta: Delta  # what the engine consumes: the prompt delta, then the prefix
    prefix: str
    prefix_ids: tuple[int, ...]


def reopen_last_answer(session: Session, max_new_tokens: int, tokenizer: Any) -> Continuation:
    """Undo the last exchange and prompt it again with its answer as the prefix of the next one.

    On error the session may be left without the exchange: callers restore it
    from a snapshot taken before.
    """
    messages = session.messages
    if not messages or messages[-1]["role"] != "assistant":
        raise SessionError("nothing to continue: the conversation does not end with an answer")
    held, held_ids = session.context, session.context_ids
    dropped = session.undo()
    delta = session.extend(dropped[:-1], max_new_tokens=max_new_tokens)
    content = dropped[-1].get("content") or ""
    if not isinstance(content, str):
        content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
    lead = session.template.lead or ""
    rest = held[len(delta.text):] if held.startswith(delta.text) else None
    prefix = lead + content  # the answer as the model writes it
    if rest is not None and not rest.startswith(prefix) and rest.startswith(content):
        prefix = content  # this time the model had not written the lead
    prefix_ids: tuple[int, ...] = ()
    if delta.token_ids is not None:
        n = len(delta.token_ids)
        if rest == prefix and held_ids[:n] == delta.token_ids:
            prefix_ids = tuple(held_ids[n:])  # no end marker followed it: the generated ids, verbatim
        else:
            from ..tokens import codec_for  # needs the tokenizers package: token sessions only

            prefix_ids = tuple(codec_for(tokenizer).encode_text(prefix, at_start=False))
    sent = attrs.evolve(
        delta,
        text=delta.text + prefix,
        token_ids=None if delta.token_ids is None else list(delta.token_ids) + list(prefix_ids),
        reason="/continue: the conversation is sent again with the last answer as the start of the new one",
    )
    return Continuation(sent, prefix, prefix_ids)


def saveable(template: BaseTemplate, source: str) -> BaseTemplate:
    """``template`` such that sessions on it round-trip through ``to_dict``.

    A template loaded from a file has no registered name, so a snapshot could
    not name it; it is registered as ``file:<absolute path>`` (again on each
    start, so ``--chat-template FILE --resume`` restores its sessions).
    """
    try:
        if BaseTemplate.from_dict(template.to_dict()) == template:
            return template
    except LmchatError:
        pass  # not registered under its name: register it below
    from ..jinja import JinjaTemplate, register_jinja  # jinja2 is imported only for file templates
    from ..loading import register_template
    from ..registry import get_template

    name = f"file:{os.path.abspath(source)}"
    if isinstance(template, JinjaTemplate):
        register_jinja(name, template, force=True)
        return get_template(name)
    return register_template(name, template, force=True)
