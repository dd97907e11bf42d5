"""Stateful interactive sessions: the conversation plus what the engine holds.

The invariant, for every template: after each :meth:`Session.prompt`,
either ``not d.reset and context_before + d.text == full`` or
``d.reset and d.text == full``, where ``full`` is
``template.messages2prompt(all messages so far, add_generation_prompt=True)``.

Deltas cost O(turn): only the pieces from ``template.rerender_from`` on are
rendered, and compared with the matching tail of the context. When they do
not extend it (the template rewrote history, or a generated answer differs
from its canonical rendering) the delta is a reset carrying the full prompt.
"""
from __future__ import annotations

import bisect
import datetime as _dt
import uuid
from typing import Any, Iterable, Mapping

import attrs

from .errors import SessionError
from .messages import Message, normalize_messages
from .registry import get_template
from .templates.base import BaseTemplate, Chat

FORMAT_VERSION = 1


@attrs.frozen
class Delta:
    """What the engine must consume for one turn.

    ``text`` extends the engine's context unless ``reset``, in which case the
    engine drops what it holds for the session and ``text`` is the whole prompt.
    ``sequence_start`` is true for the first delta of a sequence (and for resets).
    ``reason`` says why a reset happened.
    """

    text: str
    reset: bool = False
    sequence_start: bool = False
    reason: str | None = None


class Session:
    """One conversation with one model, kept in step with the engine's KV cache."""

    def __init__(
        self,
        template: BaseTemplate | str,
        *,
        system: str | None = None,
        tools: list[dict] | None = None,
        date: _dt.date | None = None,
        session_id: str | None = None,
        template_kwargs: Mapping[str, Any] | None = None,
    ):
        self.template = get_template(template) if isinstance(template, str) else template
        self.session_id = session_id or uuid.uuid4().hex
        if isinstance(date, _dt.datetime):
            date = date.date()
        self.date = date or _dt.date.today()  # frozen so the prompt prefix never changes at midnight
        self.template_kwargs: dict[str, Any] = dict(template_kwargs or {})
        self._chat = Chat([], tools=None if tools is None else list(tools), date=self.date, kwargs=self.template_kwargs)
        self._system = system
        if system is not None:
            self._chat.messages.append({"role": "system", "content": system})
        self._clear_context()

    # ------------------------------------------------------------------ state
    def _clear_context(self) -> None:
        self._parts: list[str] = []  # the context as the deltas and answers that built it
        self._starts: list[int] = []  # offset of each part
        self._length = 0
        self._offsets: list[int] = []  # where each rendered message's piece starts in the context
        self._rendered = 0  # messages covered by the last rendering
        self._tail = 0  # where the last rendering's tail (generation prompt) starts
        self._pending = False  # a prompt awaits its answer
        self._needs_reset = False

    @property
    def tools(self) -> list[dict] | None:
        return self._chat.tools

    @property
    def messages(self) -> list[Message]:
        """The conversation so far (copies; editing them does not change the session)."""
        return [dict(m) for m in self._chat.messages]

    @property
    def context(self) -> str:
        """Everything the engine holds for this session since the last reset."""
        return "".join(self._parts)

    @property
    def step(self) -> int:
        """Size of what the engine holds, in characters."""
        return self._length

    @property
    def pending(self) -> bool:
        """True between a prompt and the commit of its answer."""
        return self._pending

    @property
    def turns(self) -> int:
        """Number of committed assistant answers."""
        return sum(1 for m in self._chat.messages if m["role"] == "assistant")

    def _append(self, text: str) -> None:
        if text:
            self._starts.append(self._length)
            self._parts.append(text)
            self._length += len(text)

    def _context_from(self, pos: int) -> str:
        j = bisect.bisect_right(self._starts, pos) - 1
        if j < 0:
            return "".join(self._parts)[pos:]
        return "".join(self._parts[j:])[pos - self._starts[j]:]

    # ------------------------------------------------------------------ turns
    def prompt(self, content: Any, role: str = "user") -> Delta:
        """Add one message and return the delta the engine must consume."""
        return self.extend([{"role": role, "content": content}])

    def extend(self, messages: Iterable[Mapping[str, Any]]) -> Delta:
        """Add messages (e.g. several tool results) and return one delta."""
        chat = self._chat
        n_old = len(chat.messages)
        new = normalize_messages(list(messages), start=n_old)
        chat.messages.extend(new)
        try:
            delta = self._delta()
        except Exception:
            del chat.messages[n_old:]  # bad input loses nothing already held
            raise
        self._pending = True
        return delta

    def _delta(self) -> Delta:
        chat, template = self._chat, self.template
        if self._needs_reset or not self._parts:
            return self._full("reset requested" if self._needs_reset else None)
        k = template.rerender_from(chat, self._rendered)
        if k <= 0:
            return self._full_if_changed()
        start = self._offsets[k] if k < len(self._offsets) else self._tail
        text, offsets = template.render_window(chat, k)
        held = self._context_from(start)
        if not text.startswith(held):
            return self._full(_divergence(held, text, start))
        delta = text[len(held):]
        self._offsets[k:] = [start + o for o in offsets[:-1]]
        self._tail = start + offsets[-1]
        self._rendered = len(chat.messages)
        self._append(delta)
        return Delta(delta)

    def _full_if_changed(self) -> Delta:
        text, offsets = self._render_full()
        held = self.context
        if not text.startswith(held):
            return self._full(_divergence(held, text, 0), rendered=(text, offsets))
        delta = text[len(held):]
        self._offsets = offsets[:-1]
        self._tail = offsets[-1]
        self._rendered = len(self._chat.messages)
        self._append(delta)
        return Delta(delta)

    def _render_full(self) -> tuple[str, list[int]]:
        self.template.check(self._chat)
        return self.template.render_window(self._chat, 0)

    def _full(self, reason: str | None, rendered=None) -> Delta:
        text, offsets = rendered or self._render_full()
        was_holding = bool(self._parts) or self._needs_reset
        self._clear_context()
        self._append(text)
        self._offsets = offsets[:-1]
        self._tail = offsets[-1]
        self._rendered = len(self._chat.messages)
        return Delta(text, reset=was_holding, sequence_start=True, reason=reason if was_holding else None)

    def commit(self, answer: str, *, stop: str | None = None, **fields: Any) -> None:
        """Record the model's answer for the pending prompt.

        ``answer`` is the text the model generated after the generation prompt,
        without the stop word. The context gains it plus the end-of-turn marker
        that stopped it (``stop``, by default ``template.eoa``), which the engine
        keeps. The stored message content is the answer without the template's
        ``lead`` (text the model writes before the content proper). ``fields``
        are stored on the assistant message (e.g. parsed ``tool_calls`` or
        ``reasoning_content``); the next delta shows whether the template
        renders them as the model wrote them.
        """
        if not self._pending:
            raise SessionError("commit() without a pending prompt: call prompt() first")
        if not isinstance(answer, str):
            raise SessionError(f"the answer must be a string, got {type(answer).__name__}")
        lead = self.template.lead
        content = answer[len(lead):] if lead and answer.startswith(lead) else answer
        message = {**fields, "role": "assistant", "content": content}
        self._chat.messages.extend(normalize_messages([message], len(self._chat.messages)))
        self._append(answer + (self.template.eoa if stop is None else stop))
        self._pending = False

    def undo(self) -> list[Message]:
        """Drop the last exchange (from the last user message on); the next delta resets."""
        msgs = self._chat.messages
        last_user = max((i for i, m in enumerate(msgs) if m["role"] == "user"), default=None)
        if last_user is None:
            raise SessionError("nothing to undo: the session has no user message")
        dropped = msgs[last_user:]
        del msgs[last_user:]
        self._pending = False
        self._needs_reset = True
        return dropped

    def reset(self) -> None:
        """Start the conversation over (the system prompt and tools stay); the next delta resets."""
        del self._chat.messages[int(self._system is not None):]
        self._pending = False
        self._needs_reset = bool(self._parts)

    # ------------------------------------------------------------------ persistence
    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready snapshot; :meth:`from_dict` restores an identical session."""
        return {
            "version": FORMAT_VERSION,
            "session_id": self.session_id,
            "template": self.template.to_dict(),
            "date": self.date.isoformat(),
            "system": self._system,
            "tools": self._chat.tools,
            "template_kwargs": self.template_kwargs,
            "messages": self._chat.messages,
            "context": self._parts,
            "offsets": self._offsets,
            "tail": self._tail,
            "rendered": self._rendered,
            "pending": self._pending,
            "needs_reset": self._needs_reset,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "Session":
        if data.get("version") != FORMAT_VERSION:
            raise SessionError(f"unsupported session format version {data.get('version')!r}")
        session = cls(
            BaseTemplate.from_dict(data["template"]),
            tools=data.get("tools"),
            date=_dt.date.fromisoformat(data["date"]),
            session_id=data["session_id"],
            template_kwargs=data.get("template_kwargs"),
        )
        session._system = data.get("system")
        session._chat.messages[:] = normalize_messages(data["messages"])
        for part in data["context"]:
            session._append(part)
        session._offsets = list(data["offsets"])
        session._tail = data["tail"]
        session._rendered = data["rendered"]
        session._pending = data["pending"]
        session._needs_reset = data["needs_reset"]
        return session


def _divergence(held: str, text: str, base: int) -> str:
    i = next((j for j, (a, b) in enumerate(zip(held, text)) if a != b), min(len(held), len(text)))
    return (
        f"the template renders earlier turns differently at context offset {base + i}: "
        f"held {held[i:i + 24]!r}, now {text[i:i + 24]!r}"
    )
