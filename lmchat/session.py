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
import copy
import datetime as _dt
import uuid
from typing import Any, Iterable, Mapping

import attrs

from . import budget, validation
from .errors import SessionError, SessionLengthExceeded, TemplateConfigError
from .messages import Message, normalize_messages
from .registry import get_template
from .templates.base import BaseTemplate, Chat

FORMAT_VERSION = 1
OVERFLOW_POLICIES = ("error", "truncate", "shift")
#: what a session does when the engine's ids of an answer differ from its canonical encoding
DRIFT_POLICIES = ("rewind", "reset", "keep")


@attrs.frozen
class Delta:
    """What the engine must consume for one turn.

    ``text`` extends the engine's context unless ``reset``, in which case the
    engine drops what it holds for the session and ``text`` is the whole prompt.
    ``sequence_start`` is true for the first delta of a sequence (and for resets).
    ``reason`` says why a reset happened. With a tokenizer, ``token_ids`` are
    the ids of ``text`` (content never parsed as special tokens). ``dropped``
    counts the messages an overflow policy removed from the front; with the
    ``'shift'`` policy ``discard=(start, count)`` is the token range the engine
    removes from its cache before appending ``token_ids`` (no reset).
    """

    text: str
    reset: bool = False
    sequence_start: bool = False
    reason: str | None = None
    token_ids: list[int] | None = None
    dropped: int = 0
    discard: tuple[int, int] | None = None


@attrs.define
class _Plan:
    """A computed delta and the state it leads to, applied only once it is accepted."""

    delta: Delta
    offsets: list[int]  # piece starts from ``window`` on, then the tail start (context offsets)
    window: int
    full: bool = False
    anchor: tuple[int, int] = (0, 0)
    shift: tuple[int, int] | None = None  # (keep, resume): the context keeps [:keep] + [resume:]


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
        tokenizer: Any = None,
        session_len: int | None = None,
        overflow: str = "error",
        max_new_tokens: int = 0,
        injection: str = "split",
        max_message_chars: int | None = validation.DEFAULT_MAX_CHARS,
        drift: str = "rewind",
    ):
        self.template = get_template(template) if isinstance(template, str) else template
        if overflow not in OVERFLOW_POLICIES:
            raise TemplateConfigError(f"must be one of {', '.join(OVERFLOW_POLICIES)}, got {overflow!r}", field="overflow")
        if drift not in DRIFT_POLICIES:
            raise TemplateConfigError(f"must be one of {', '.join(DRIFT_POLICIES)}, got {drift!r}", field="drift")
        self.drift = drift
        if injection not in validation.INJECTION_POLICIES:
            raise TemplateConfigError(
                f"must be one of {', '.join(validation.INJECTION_POLICIES)}, got {injection!r}", field="injection"
            )
        validation.validate_tools(tools)
        self.overflow = overflow
        self.injection = injection
        self.max_message_chars = max_message_chars
        self.max_new_tokens = max_new_tokens
        self.session_len = session_len or self.template.session_len
        self._codec = None
        if tokenizer is not None:
            from .tokens import codec_for  # tokenizers is only needed with a tokenizer

            self._codec = codec_for(tokenizer)
        self.session_id = session_id or uuid.uuid4().hex
        if isinstance(date, _dt.datetime):
            date = date.date()
        self.date = date or _dt.date.today()  # frozen so the prompt prefix never changes at midnight
        self.template_kwargs: dict[str, Any] = dict(template_kwargs or {})
        self._chat = Chat([], tools=None if tools is None else list(tools), date=self.date, kwargs=self.template_kwargs)
        if system is None:
            system = self.template.default_system  # meta_instruction on a template that does not render it
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
        self._reset_reason: str | None = None
        self._ids: list[int] = []  # the token twin of the context
        self._anchor = (0, 0)  # (chars, ids) just after the last structural special token
        self._rewind: tuple[int, int] | None = None  # drift policy 'rewind': (start, count) the engine drops

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
    def context_ids(self) -> list[int] | None:
        """The token ids the engine holds (None without a tokenizer)."""
        return list(self._ids) if self._codec is not None else None

    @property
    def step(self) -> int:
        """Size of what the engine holds: tokens with a tokenizer, else characters."""
        return len(self._ids) if self._codec is not None else self._length

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
    def prompt(self, content: Any, role: str = "user", *, max_new_tokens: int | None = None) -> Delta:
        """Add one message and return the delta the engine must consume."""
        return self.extend([{"role": role, "content": content}], max_new_tokens=max_new_tokens)

    def extend(self, messages: Iterable[Mapping[str, Any]], *, max_new_tokens: int | None = None) -> Delta:
        """Add messages (e.g. several tool results) and return one delta.

        With a tokenizer, the turn must fit: ``step + len(delta ids) +
        max_new_tokens <= session_len``, otherwise the overflow policy applies.
        """
        chat = self._chat
        n_old = len(chat.messages)
        new = normalize_messages(list(messages), start=n_old)
        validation.validate_messages(chat.messages, new, start=n_old, max_chars=self.max_message_chars)
        if self.injection == "reject":
            validation.injected_specials(new, self._special_strings(), n_old, self._output_markers())
        chat.messages.extend(new)
        self._turn_start = n_old
        try:
            plan = self._plan()
            plan = self._fit(plan, self.max_new_tokens if max_new_tokens is None else max_new_tokens)
        except Exception:
            del chat.messages[n_old:]  # bad input loses nothing already held
            raise
        self._apply(plan)
        self._pending = True
        return plan.delta

    def _plan(self) -> _Plan:
        """The next delta, computed without touching the session's state."""
        chat, template = self._chat, self.template
        if self._needs_reset or not self._parts:
            return self._plan_full(self._reset_reason or ("reset requested" if self._needs_reset else None))
        k = template.rerender_from(chat, self._rendered)
        if k <= 0:
            template.check(chat)
            start = 0
        else:
            start = self._offsets[k] if k < len(self._offsets) else self._tail
        text, offsets = template.render_window(chat, k)
        held = self._context_from(start)
        if not text.startswith(held):
            return self._plan_full(_divergence(held, text, start), (text, offsets) if k <= 0 else None)
        plan = _Plan(Delta(text[len(held):]), [start + o for o in offsets], max(k, 0))
        if self._codec is not None and not self._plan_ids(plan, text, len(held)):
            return self._plan_full("the new turn changes how the held tokens split (token boundary)")
        if self._rewind is not None:
            start, count = self._rewind
            plan.delta = attrs.evolve(
                plan.delta, token_ids=self._ids[start:] + plan.delta.token_ids, discard=(start, count),
                reason=f"the engine's ids of the last answer differ from its canonical encoding from token {start} "
                       f"on (retokenization drift): {count} ids dropped from its cache, "
                       f"{len(self._ids) - start} canonical ids sent instead",
            )
        return plan

    def _plan_ids(self, plan: _Plan, window: str, held: int) -> bool:
        """Token ids of an extending delta; False when the held ids are not a prefix."""
        codec = self._codec
        spans = codec.spans(self.template, self._chat, plan.window, window, self.injection)
        if any(a < held < b for a, b in spans):
            return False
        char0, id0 = self._anchor
        lead = self._context_from(char0)  # held text after the last structural token
        shift = len(lead) - held
        tail_spans = [(a + shift, b + shift) for a, b in spans if a >= held]
        ids, anchor = codec.encode(lead + plan.delta.text, tail_spans, base=char0)
        held_ids = self._ids[id0:]
        if ids[: len(held_ids)] != held_ids:
            return False
        plan.delta = attrs.evolve(plan.delta, token_ids=ids[len(held_ids):])
        plan.anchor = (char0 + anchor[0], id0 + anchor[1]) if anchor else self._anchor
        return True

    def _plan_full(self, reason: str | None, rendered=None) -> _Plan:
        text, offsets = rendered or self._render_full()
        holding = bool(self._parts) or self._needs_reset
        delta = Delta(text, reset=holding, sequence_start=True, reason=reason if holding else None)
        plan = _Plan(delta, offsets, 0, full=True)
        if self._codec is not None:
            spans = self._codec.spans(self.template, self._chat, 0, text, self.injection)
            ids, anchor = self._codec.encode(text, spans)
            plan.delta = attrs.evolve(delta, token_ids=ids)
            plan.anchor = anchor or (0, 0)
        return plan

    def _render_full(self) -> tuple[str, list[int]]:
        self.template.check(self._chat)
        return self.template.render_window(self._chat, 0)

    def _fit(self, plan: _Plan, max_new_tokens: int) -> _Plan:
        """Apply the overflow policy when the turn does not fit in ``session_len``."""
        if self._codec is None or self.session_len is None:
            return plan
        used = 0 if plan.full else plan.delta.discard[0] if plan.delta.discard else len(self._ids)
        new = len(plan.delta.token_ids)
        if used + new + max_new_tokens <= self.session_len:
            return plan
        if self.overflow == "shift" and not plan.full and self._rewind is None:
            return budget.shift(self, max_new_tokens, used, new)
        if self.overflow in ("truncate", "shift"):  # a reset has nothing in the cache to shift
            return budget.truncate(self, max_new_tokens, used, new)
        raise SessionLengthExceeded(used=used, new=new, max_new_tokens=max_new_tokens, limit=self.session_len)

    def _apply(self, plan: _Plan) -> None:
        if plan.full:
            self._clear_context()
        if plan.shift:
            keep, resume = plan.shift
            kept, (start, count) = self.context[:keep] + self.context[resume:], plan.delta.discard
            ids = self._ids[:start] + self._ids[start + count:]
            self._clear_context()
            self._append(kept)
            self._ids = ids
        self._append(plan.delta.text)
        self._offsets[plan.window:] = plan.offsets[:-1]
        self._tail = plan.offsets[-1]
        self._rendered = len(self._chat.messages)
        if plan.delta.token_ids is not None:
            if self._rewind is not None and not plan.full:
                del self._ids[self._rewind[0]:]  # the delta re-sends them
            self._ids += plan.delta.token_ids
            self._anchor = plan.anchor
        self._rewind = None

    def _special_strings(self) -> set[str]:
        """What the 'reject' policy refuses: the template's markers and the tokenizer's added tokens."""
        markers = validation.template_markers(self.template)
        return markers | set(self._codec.special) if self._codec is not None else markers

    def _output_markers(self) -> frozenset[str]:
        """What an assistant message may hold all the same: its model's output markup."""
        from .tools.registry import output_markers

        found = set(output_markers(self.template))
        if self._codec is not None:
            found |= self._codec.output_tokens(self.template)
        return frozenset(found)

    def commit(
        self, answer: str, token_ids: list[int] | None = None, *, stop: str | None = None, **fields: Any
    ) -> None:
        """Record the model's answer for the pending prompt.

        ``answer`` is the text the model generated after the generation prompt,
        without the stop word. The context gains it plus the end-of-turn marker
        that stopped it (``stop``, by default ``template.eoa``), which the engine
        keeps. The stored message content is the answer without the template's
        ``lead`` (text the model writes before the content proper). ``fields``
        are stored on the assistant message (e.g. parsed ``tool_calls``).

        ``token_ids`` are the generated ids (without the stop token): they are
        kept verbatim, as the engine holds them. When they differ from the
        canonical encoding of the answer (decode/encode drift), the next delta
        is a reset, so the engine never continues from ids that the full prompt
        would not produce.
        """
        if not self._pending:
            raise SessionError("commit() without a pending prompt: call prompt() first")
        if not isinstance(answer, str):
            raise SessionError(f"the answer must be a string, got {type(answer).__name__}")
        stop = self.template.eoa if stop is None else stop
        lead = self.template.lead
        content = answer[len(lead):] if lead and answer.startswith(lead) else answer
        message = {"role": "assistant", "content": content, **fields}  # fields may override the content
        validation.validate_messages(self._chat.messages, [message], start=len(self._chat.messages), max_chars=None)
        self._chat.messages.extend(normalize_messages([message], len(self._chat.messages)))
        if self._codec is not None:
            self._commit_ids(answer, stop, token_ids)
        self._append(answer + stop)
        self._pending = False

    def _commit_ids(self, answer: str, stop: str, token_ids: list[int] | None) -> None:
        codec = self._codec
        char0, id0 = self._anchor
        open_text = self._context_from(char0)  # held text after the last structural token
        text = open_text + answer + stop
        stop_at = len(open_text) + len(answer)
        # the answer's own output markup (tool-call markers, think tags) is markup, as the model wrote it
        spans = [(len(open_text) + a, len(open_text) + b)
                 for a, b in codec.special_spans(answer, keep=codec.output_tokens(self.template))]
        spans += [(stop_at, len(text))] if stop in codec.special else []
        ids, anchor = codec.encode(text, spans, base=char0)
        held = self._ids[id0:]
        canonical = ids[len(held):] if ids[: len(held)] == held else None
        stop_ids = [codec.special[stop]] if stop in codec.special else codec.encode_text(stop, at_start=False)
        if token_ids is not None:
            new = [int(t) for t in token_ids] + stop_ids
        else:
            new = canonical if canonical is not None else codec.encode_text(answer, at_start=False) + stop_ids
        anchor = (char0 + anchor[0], id0 + anchor[1]) if anchor else self._anchor
        if new != canonical:
            new, anchor = self._drifted(new, canonical, anchor, char0 + len(text))
        self._ids += new
        self._anchor = anchor

    def _drifted(self, new: list[int], canonical: list[int] | None, anchor, end: int):
        """The engine's ids of an answer differ from the canonical encoding: apply the drift policy.

        Returns the ids the session holds from now on and its next anchor.
        """
        if self.drift == "keep":
            # token-in/token-out: the engine's own ids stay; the next delta is encoded after them
            return new, (end, len(self._ids) + len(new))
        if self.drift == "rewind" and canonical is not None:
            same = next((i for i, (a, b) in enumerate(zip(new, canonical)) if a != b), min(len(new), len(canonical)))
            self._rewind = (len(self._ids) + same, len(new) - same)
            return canonical, anchor
        self._needs_reset = True
        self._reset_reason = "the held ids differ from the canonical encoding of the answer (retokenization drift)"
        return new, anchor

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
            "tools": copy.deepcopy(self._chat.tools),
            "template_kwargs": copy.deepcopy(self.template_kwargs),
            "messages": copy.deepcopy(self._chat.messages),
            "context": list(self._parts),
            "offsets": list(self._offsets),
            "tail": self._tail,
            "rendered": self._rendered,
            "pending": self._pending,
            "needs_reset": self._needs_reset,
            "reset_reason": self._reset_reason,
            "session_len": self.session_len,
            "overflow": self.overflow,
            "max_new_tokens": self.max_new_tokens,
            "injection": self.injection,
            "max_message_chars": self.max_message_chars,
            "drift": self.drift,
            "context_ids": list(self._ids) if self._codec is not None else None,
            "anchor": list(self._anchor),
            "rewind": list(self._rewind) if self._rewind else None,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, tokenizer: Any = None) -> "Session":
        """Restore a snapshot; pass the tokenizer again for token-level sessions.

        A snapshot taken without token ids but restored with a tokenizer (or the
        reverse) makes the next delta a reset, since the engine's ids are unknown.
        """
        if data.get("version") != FORMAT_VERSION:
            raise SessionError(f"unsupported session format version {data.get('version')!r}")
        session = cls(
            BaseTemplate.from_dict(data["template"]),
            tools=data.get("tools"),
            date=_dt.date.fromisoformat(data["date"]),
            session_id=data["session_id"],
            template_kwargs=data.get("template_kwargs"),
            tokenizer=tokenizer,
            session_len=data.get("session_len"),
            overflow=data.get("overflow", "error"),
            max_new_tokens=data.get("max_new_tokens", 0),
            injection=data.get("injection", "split"),
            max_message_chars=data.get("max_message_chars", validation.DEFAULT_MAX_CHARS),
            drift=data.get("drift", "rewind"),
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
        session._reset_reason = data.get("reset_reason")
        ids = data.get("context_ids")
        if tokenizer is not None and ids is not None:
            session._ids = list(ids)
            session._anchor = tuple(data["anchor"])
            session._rewind = tuple(data["rewind"]) if data.get("rewind") else None
        elif (tokenizer is not None) != (ids is not None) and session._parts:
            session._needs_reset = True
            session._reset_reason = "restored without the token ids the engine holds"
        return session


def _divergence(held: str, text: str, base: int) -> str:
    i = next((j for j, (a, b) in enumerate(zip(held, text)) if a != b), min(len(held), len(text)))
    return (
        f"the template renders earlier turns differently at context offset {base + i}: "
        f"held {held[i:i + 24]!r}, now {text[i:i + 24]!r}"
    )
