"""Stateful interactive sessions: the conversation plus what the engine holds.

The invariant, for every template: after each :meth:`Session.prompt`,
either ``not d.reset and context_before + d.text == full`` or
``d.reset and d.text == full``, where ``full`` is
``template.messages2prompt(all messages so far, add_generation_prompt=True)``.

Deltas cost O(turn) (:mod:`.planning`); a turn that does not fit in
``session_len`` meets the overflow policy (:mod:`.overflow`); generated ids
that are not the canonical encoding of their text meet the drift policy.
"""
from __future__ import annotations

import datetime as _dt
import uuid
from collections.abc import Iterable, Mapping
from typing import Any

from .. import validation
from ..errors import SessionError
from ..jsontypes import JSONObject
from ..messages import Message, flatten_text, in_call_form, normalize_messages
from ..registry import as_template
from ..templates.base import BaseTemplate
from ..templates.chat import Chat, as_date
from . import commits, overflow, patches, reopening, snapshot
from .markers import output_markers, special_strings
from .planning import Frame, next_plan
from .policy import SessionPolicy
from .state import Delta, Held, Plan
from .vocab import Tokenizer

OVERFLOW_POLICIES = overflow.POLICIES


class Session:
    """One conversation with one model, kept in step with the engine's KV cache."""

    def __init__(
        self,
        template: BaseTemplate | str,
        *,
        system: str | None = None,
        tools: list[JSONObject] | None = None,
        date: _dt.date | None = None,
        session_id: str | None = None,
        template_kwargs: Mapping[str, object] | None = None,
        tokenizer: Tokenizer | None = None,
        policy: SessionPolicy | None = None,
    ):
        policy = policy or SessionPolicy()
        self.template = as_template(template)
        validation.validate_tools(tools)
        # the policy's fields stay attributes of their own: ``lmchat chat``'s commands change them mid-conversation
        self.overflow = policy.overflow
        self.overflow_room = policy.overflow_room
        self.injection = policy.injection
        self.drift = policy.drift
        self.max_message_chars = policy.max_message_chars
        self.max_new_tokens = policy.max_new_tokens
        self.session_len = policy.session_len or self.template.session_len
        # without a tokenizer the session counts characters: only a length asked for is enforced in them
        self._explicit_len = policy.session_len is not None
        self._codec = None
        if tokenizer is not None:
            from .tokens import codec_for  # tokenizers is only needed with a tokenizer

            self._codec = codec_for(tokenizer)
        self.session_id = session_id or uuid.uuid4().hex
        self.date = as_date(date) or _dt.date.today()  # frozen so the prompt prefix never changes at midnight
        # Any: the template's own keyword arguments (enable_thinking...), which make_chat takes as **kwargs and
        # each template reads by name
        self.template_kwargs: dict[str, Any] = dict(template_kwargs or {})
        self._chat = Chat([], tools=None if tools is None else list(tools), date=self.date, kwargs=self.template_kwargs)
        if system is None:
            system = self.template.default_system  # meta_instruction on a template that does not render it
        self._system = system
        if system is not None:
            self._chat.messages.append({"role": "system", "content": system})
        self._held = Held()
        self._changes = patches.Changes()  # per list, where it changed since mark_saved()
        # turns: (messages counted, answers, the last one)
        self._counted: tuple[int, int, Message | None] = (0, 0, None)
        #: the messages the overflow policy took from what the engine is given, oldest first: they came after the
        #: system prompt and before ``messages[1:]`` (the transcript is the user's: the session keeps them)
        self._earlier: list[Message] = []
        self._earlier_answers = 0

    # ------------------------------------------------------------------ state
    @property
    def tools(self) -> list[JSONObject] | None:
        return self._chat.tools

    @property
    def messages(self) -> list[Message]:
        """The conversation the engine is given (copies; editing them does not change the session): all of it,
        but for the messages an overflow policy dropped to fit a turn (:attr:`earlier`)."""
        return [dict(m) for m in self._chat.messages]

    @property
    def earlier(self) -> list[Message]:
        """Copies of the messages an overflow policy dropped from what the engine is given, oldest first. The
        session keeps them (its snapshot too): they sat after the system prompt, before the other messages."""
        return [dict(m) for m in self._earlier]

    def transcript(self) -> list[Message]:
        """Every message of the conversation, those the engine is no longer given included, in order (copies)."""
        messages = self._chat.messages
        first = 1 if messages and messages[0]["role"] == "system" else 0
        return [dict(m) for m in (*messages[:first], *self._earlier, *messages[first:])]

    @property
    def context(self) -> str:
        """Everything the engine holds for this session since the last reset."""
        return self._held.context

    @property
    def context_ids(self) -> list[int] | None:
        """The token ids the engine holds (None without a tokenizer)."""
        return list(self._held.ids) if self._codec is not None else None

    @property
    def counts_tokens(self) -> bool:
        """Whether the session holds token ids (it has a tokenizer): ``context_ids is not None`` without its
        copy of the whole history."""
        return self._codec is not None

    @property
    def step(self) -> int:
        """Size of what the engine holds: tokens with a tokenizer, else characters."""
        return len(self._held.ids) if self._codec is not None else self._held.length

    @property
    def pending(self) -> bool:
        """True between a prompt (or :meth:`reopen`) and the commit of its answer."""
        return self._held.pending

    @property
    def needs_reset(self) -> str | None:
        """Why the next delta will be a reset (the engine's cache no longer matches), or None."""
        held = self._held
        return (held.reset_reason or "reset requested") if held.needs_reset and held.parts else None

    @property
    def drift_rewind(self) -> tuple[int, int, tuple[int, ...]] | None:
        """After a commit that met retokenization drift under ``drift='rewind'``: ``(start, count, ids)``,
        the engine's ``count`` ids from ``start`` are to be replaced by ``ids``, the canonical encoding the
        session holds (the next delta's ``discard`` and ids say the same); else None. A backend that keeps
        a prefix cache may swap them at once (:class:`~lmchat.backends.base.PrefixCache`)."""
        held = self._held
        if held.rewind is None or held.pending:
            return None
        start, count = held.rewind
        return start, count, tuple(held.ids[start:])

    def first_message(self) -> Message | None:
        """A copy of the first message (None in an empty conversation)."""
        return dict(self._chat.messages[0]) if self._chat.messages else None

    def messages_since(self, start: int) -> list[Message]:
        """Copies of the messages from index ``start`` on (O(turn) where ``messages`` is O(history))."""
        return [dict(m) for m in self._chat.messages[start:]]

    def last_user(self) -> str:
        """The text of the last user message ('' when there is none): a backward scan, O(turn)."""
        for message in reversed(self._chat.messages):
            if message["role"] == "user":
                content = message.get("content")
                return content if isinstance(content, str) else flatten_text(content)
        return ""

    @property
    def turns(self) -> int:
        """Number of committed assistant answers (those in :attr:`earlier` included)."""
        # counted on from where the last count ended (O(turn)); an edit before that point puts another object there
        messages = self._chat.messages
        n, count, last = self._counted
        if not (0 < n <= len(messages) and messages[n - 1] is last):
            n, count = 0, 0
        count += sum(1 for i in range(n, len(messages)) if messages[i]["role"] == "assistant")
        self._counted = (len(messages), count, messages[-1] if messages else None)
        return count + self._earlier_answers

    def _frame(self) -> Frame:
        return Frame(self.template, self._chat, self._codec, self.injection)

    # ------------------------------------------------------------------ turns
    def prompt(self, content: object, role: str = "user", *, max_new_tokens: int | None = None) -> Delta:
        """Add one message and return the delta the engine must consume."""
        return self.extend([{"role": role, "content": content}], max_new_tokens=max_new_tokens)

    def extend(self, messages: Iterable[Mapping[str, object]], *, max_new_tokens: int | None = None) -> Delta:
        """Add messages (e.g. several tool results) and return one delta.

        With a tokenizer, the turn must fit: ``step + len(delta ids) +
        max_new_tokens <= session_len``, otherwise the overflow policy applies.
        Without one, a ``session_len`` given to the session is enforced in
        characters (``step + len(delta.text) <= session_len``).
        """
        chat = self._chat
        n_old = len(chat.messages)
        new = in_call_form(normalize_messages(list(messages), start=n_old), self.template.call_arguments)
        validation.validate_messages(chat.messages, new, start=n_old, max_chars=self.max_message_chars)
        if self.injection == "reject":
            validation.injected_specials(new, special_strings(self.template, self._codec), n_old,
                                         output_markers(self.template, self._codec))
        chat.messages.extend(new)
        parts, ids = len(self._held.parts), len(self._held.ids)
        try:
            frame = self._frame()
            plan = next_plan(frame, self._held)
            if self._codec is not None or self._explicit_len:
                answer = self.max_new_tokens if max_new_tokens is None else max_new_tokens
                # an answer's size in characters is unknown: a character budget counts the prompt only
                budget = overflow.Budget(self.session_len, answer if self._codec is not None else 0,
                                         self.overflow, n_old, "tokens" if self._codec is not None else "characters",
                                         int(self.overflow_room * self.session_len))
                plan = overflow.fit(frame, self._held, plan, budget)
        except Exception:
            del chat.messages[n_old:]  # bad input loses nothing already held
            raise
        rewind = self._held.rewind
        self._apply(plan)
        self._held.pending = True
        if plan.delta.removed:
            self._keep_earlier(plan.delta.removed)
        if plan.full or plan.shift or plan.delta.dropped:
            self._changes.lower(messages=0, context=0, offsets=0, context_ids=0)
        else:
            self._changes.lower(messages=n_old, context=parts, offsets=plan.window,
                       context_ids=rewind[0] if rewind else ids)
        return plan.delta

    def _keep_earlier(self, removed: Iterable[Message]) -> None:
        """Keep the messages an overflow policy dropped (appended: a store's patch carries only them)."""
        self._changes.lower(earlier=len(self._earlier))
        for message in removed:
            self._earlier.append(message)
            self._earlier_answers += message["role"] == "assistant"

    def _apply(self, plan: Plan) -> None:
        held = self._held
        if plan.full:
            held = self._held = Held()
        if plan.shift:
            keep, resume = plan.shift
            assert plan.delta.discard is not None  # a shift discards the dropped turns' ids
            context, (start, count) = held.context, plan.delta.discard
            held.truncate(0)
            held.append(context[:keep] + context[resume:])
            del held.ids[start:start + count]
        held.append(plan.delta.text)
        held.offsets[plan.window:] = plan.offsets[:-1]
        held.tail = plan.offsets[-1]
        held.rendered = len(self._chat.messages)
        if plan.delta.token_ids is not None:
            if held.rewind is not None and not plan.full:
                del held.ids[held.rewind[0]:]  # the delta re-sends them
            held.ids += plan.delta.token_ids
            held.anchor = plan.anchor
        held.rewind = held.answer_end = None

    def commit(
        self, answer: str, token_ids: list[int] | None = None, *, stop: str | None = None, **fields: object
    ) -> None:
        """Record the model's answer for the pending prompt.

        ``answer`` is the text the model generated after the generation prompt
        (after the reopened answer, following :meth:`reopen`), without the stop
        word. The context gains it plus the end-of-turn marker that stopped it
        (``stop``, by default ``template.eoa``; ``''`` when the answer was cut
        short, as the engine then holds no marker). The stored message content
        is the answer without the template's ``lead`` (text the model writes
        before the content proper; :meth:`~lmchat.templates.base.BaseTemplate.answer_fields`
        splits what else the template's model writes around it, e.g. gpt-oss's
        reasoning channel). ``fields`` are stored on the assistant
        message (e.g. parsed ``tool_calls``).

        ``token_ids`` are the generated ids (without the stop token). When they
        differ from the canonical encoding of the answer (decode/encode drift),
        the ``drift`` policy applies (see docs/tokens.md).
        """
        held = self._held
        if not held.pending:
            raise SessionError("commit() without a pending prompt: call prompt() first")
        if not isinstance(answer, str):
            raise SessionError(f"the answer must be a string, got {type(answer).__name__}")
        stop = self.template.eoa if stop is None else stop
        if held.reopened is not None:
            stored: JSONObject = {"content": held.reopened + answer}
        else:
            stored = self.template.answer_fields(answer)  # the content without the lead (gpt-oss: split)
        message = {"role": "assistant", **stored, **fields}  # fields may override the content
        [message] = in_call_form([message], self.template.call_arguments)
        validation.validate_messages(self._chat.messages, [message], start=len(self._chat.messages), max_chars=None)
        self._chat.messages.extend(normalize_messages([message], len(self._chat.messages)))
        self._changes.lower(messages=len(self._chat.messages) - 1, context=len(held.parts), context_ids=len(held.ids))
        end = held.length + len(answer)
        ids_end = anchor = None
        if self._codec is not None:
            ids_end, anchor = commits.commit_ids(self._frame(), held, self.drift, answer, stop, token_ids)
        held.append(answer + stop)
        held.answer_end = (end, ids_end, *anchor) if anchor else (end, None, 0, 0)
        held.pending, held.reopened = False, None

    def reopen(self) -> Delta:
        """Take the last answer back, open, for the engine to continue it (``/continue``).

        The conversation ends with that answer rendered as transformers'
        ``continue_final_message`` renders it, and the session is pending again:
        :meth:`commit` records the continuation, which joins the answer. The
        delta is usually empty text with ``discard`` dropping the end marker
        the engine holds after the answer; a reset carrying the whole prompt
        when what the engine holds does not end with the open answer (a
        template that trims answers, a reset pending).
        """
        if self._held.pending:
            raise SessionError("reopen() with a pending prompt: commit its answer first")
        messages = self._chat.messages
        if not messages or messages[-1]["role"] != "assistant":
            raise SessionError("nothing to continue: the conversation does not end with an answer")
        old = self._held
        delta, self._held = reopening.reopen(self._frame(), old)
        self._changes.lower(messages=len(messages), context=patches.first_change(old.parts, self._held.parts),
                   offsets=patches.first_change(old.offsets, self._held.offsets),
                   context_ids=patches.first_change(old.ids, self._held.ids))
        return delta

    def undo(self) -> list[Message]:
        """Drop the last exchange (from the last user message on); the next delta resets."""
        msgs = self._chat.messages
        last_user = max((i for i, m in enumerate(msgs) if m["role"] == "user"), default=None)
        if last_user is None:
            raise SessionError("nothing to undo: the session has no user message")
        dropped = msgs[last_user:]
        del msgs[last_user:]
        self._changes.lower(messages=last_user)
        self._held.pending, self._held.reopened = False, None
        self._held.needs_reset = True
        return dropped

    def reset(self) -> None:
        """Start the conversation over (the system prompt and tools stay); the next delta resets."""
        del self._chat.messages[int(self._system is not None):]
        self._earlier.clear()
        self._earlier_answers = 0
        self._changes.lower(messages=int(self._system is not None), earlier=0)
        self._held.pending, self._held.reopened = False, None
        self._held.needs_reset = bool(self._held.parts)

    # ------------------------------------------------------------------ persistence
    def mark_saved(self) -> None:
        """The snapshot was saved: :meth:`changes` counts from here."""
        self._changes.saved(snapshot.small_values(self))

    def changes(self) -> patches.Patch | None:
        """What changed since :meth:`mark_saved` as a snapshot patch (:mod:`.patches`): O(turn) for a turn.

        None when the session was never marked saved (restored, forked, edited:
        only a whole snapshot describes it).
        """
        return snapshot.patch(self)

    def to_dict(self) -> JSONObject:
        """A JSON-ready snapshot that shares nothing with the session; :meth:`from_dict` restores it."""
        return snapshot.to_dict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, object], *, tokenizer: Tokenizer | None = None) -> Session:
        """Restore a snapshot; pass the tokenizer again for token-level sessions.

        A snapshot taken without token ids but restored with a tokenizer (or the
        reverse) makes the next delta a reset, since the engine's ids are unknown.
        Anything unreadable is a :class:`~lmchat.errors.SnapshotError` naming it.
        """
        return snapshot.from_dict(cls, data, tokenizer)

