"""One chat: the session, the backend that answers it and the store that keeps it.

A turn runs on the protocol the session manager uses too
(:class:`lmchat.turns.Turn`), with the conversation as its owner. Every turn
takes a snapshot first. If the turn cannot start (an overflow, a template
rule) the session is restored exactly: nothing reached the engine. If the
backend fails mid-turn the session is restored but its next delta resets,
since what the engine consumed is unknown. A finished or cancelled turn is
committed and saved at once, so a crash never loses more than the turn in
flight.
"""
from __future__ import annotations

import json
from collections.abc import Callable, Hashable, Mapping

import attrs

from ..backends.base import (
    Backend,
    SamplingParams,
    SessionLimit,
    check_constraint,
    engine_id,
    model_sampling,
    special_tokens,
)
from ..constraints import continued
from ..errors import ConstraintUnsupported, LmchatError, SessionError, SessionLengthExceeded, StoreConflict
from ..jsontypes import JSONObject
from ..repetition import RepetitionGuard
from ..session import Delta, Session, edits
from ..session.overflow import ROOM
from ..session.vocab import Tokenizer
from ..stores import SessionStore, version_of
from ..stores.base import Summary
from ..templates.base import BaseTemplate
from ..tools.answer_constraint import for_answer
from ..turns import Turn
from ..turns.result import TurnRecord
from . import settings
from .context import DEFAULT_OVERFLOW, ContextFull, advice, dropped_notice
from .rendering import Output
from .settings import SettingError
from .streaming import Outcome, Prefill, interrupt_flag, stream

NOTES = {
    "length": "[stopped at max_new_tokens: /continue extends the answer]",
    "cancelled": "[cancelled: the partial answer is kept]",
    "repetition": "[stopped: the answer kept repeating itself; the partial answer is kept]",
}


def printable(text: str) -> str:
    """``text`` with control characters escaped: a stored title or id never drives the terminal."""
    return "".join(ch if ch.isprintable() else repr(ch)[1:-1] for ch in str(text))


def turns(n: int, width: int = 0) -> str:
    """``1 turn``, ``2 turns`` (the count right-aligned in ``width``)."""
    return f"{n:>{width}} turn{'' if n == 1 else 's'}"


#: a /save file above this size is refused unread (a long session with its token ids saves a few MB)
MAX_SAVED_BYTES = 64 * 2**20


def read_saved(path: str) -> JSONObject:
    """The JSON object of a /save file, checked enough to restore from: a dict whose ``session_id`` is an id (1-128
    printable characters, no slash: it names files and store rows). Anything else is a :class:`SessionError`."""
    where = f"{printable(path)}: not a session saved by /save"
    with open(path, "rb") as f:
        raw = f.read(MAX_SAVED_BYTES + 1)  # bounded whatever the file is (a device, a FIFO)
    if len(raw) > MAX_SAVED_BYTES:
        raise SessionError(f"{where} (over {MAX_SAVED_BYTES // 2**20} MiB)")
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError) as exc:  # not UTF-8 JSON, or nested too deep for the parser
        why = "nested too deep" if isinstance(exc, RecursionError) else printable(str(exc)[:200])
        raise SessionError(f"{where} ({why})") from None
    if not isinstance(data, dict):
        raise SessionError(f"{where} (a JSON {type(data).__name__}, not an object)")
    sid = data.get("session_id")
    if not (isinstance(sid, str) and 0 < len(sid) <= 128 and sid.isprintable() and not {"/", "\\"} & set(sid)):
        raise SessionError(f"{where} (its session_id is {repr(sid)[:80]}, not 1-128 printable characters "
                           "without a slash)")
    return data


class Conversation:
    """The REPL's state; ``out`` is a :mod:`.rendering` output (plain or rich)."""

    def __init__(self, session: Session, backend: Backend, store: SessionStore, out: Output, *,
                 tokenizer: Tokenizer | None = None, version: int = 0) -> None:
        self.backend = backend
        self.overrides: dict[str, settings.Value] = {}  # /set values; the rest comes from the template
        self.session = self._fitted(session)
        self.store = store
        self.out = out
        self.tokenizer = tokenizer
        self.version = version  # the stored version of this session (0: not stored yet)
        self.origin: str | None = None  # the session this one was forked from (/fork): /sessions tells them apart
        self.debug = False
        self.failures = 0  # inputs that ended in an error (piped mode exits 1 if any)
        self.notes = NOTES  # what a turn's finish reason adds under its answer (a one-shot has its own)
        self.last_delta: Delta | None = None
        self.last: Outcome | None = None
        self.cached = False  # whether the backend may hold a cache for this session id (sent by this process)
        #: the toolbar's count of a conversation its next turn resends whole, with what it was computed for
        #: (:func:`.toolbar.conversation_size`; None: not computed yet)
        self.resent_size: tuple[Hashable, int] | None = None

    @property
    def params(self) -> SamplingParams:
        return settings.sampling(self.session.template, {**model_sampling(self.backend), **self.overrides},
                                 special_tokens(self.backend))

    def check_format(self, value: settings.Value | None) -> None:
        """Refuse a ``/set format`` value this backend would not enforce (a :class:`.settings.SettingError`, one
        line): every turn would fail, so the REPL says it at once and keeps the session as it was."""
        try:
            check_constraint(self.backend, for_answer(settings.constraint(settings.format_of(value)),
                                                      self.session.template, "format",
                                                      special_tokens(self.backend)))
        except ConstraintUnsupported as exc:
            raise SettingError(f"/set format: {exc.reason}") from None

    @property
    def overflow(self) -> str:
        """What a turn that does not fit does: ``/set overflow``, else the REPL's default (see :mod:`.context`)."""
        policy = self.overrides.get("overflow")
        return policy if isinstance(policy, str) else DEFAULT_OVERFLOW  # a policy's name (settings._overflow)

    @property
    def overflow_room(self) -> float:
        """The share of the context a drop leaves free: ``/set overflow_room``, else the session's default."""
        room = self.overrides.get("overflow_room")
        return room if isinstance(room, float) else ROOM  # a float (settings._number)

    def _fitted(self, session: Session) -> Session:
        """``session`` with this chat's overflow policy and the one limit the toolbar, ``/show`` and the engine
        agree on: all a backend that says how much one session can hold gives it (the REPL's only session),
        whatever the session was stored or templated with; else the template's."""
        limit = self.backend.session_len if isinstance(self.backend, SessionLimit) else None
        if limit:
            session.session_len = limit
        session.overflow, session.overflow_room = self.overflow, self.overflow_room
        return session

    # ------------------------------------------------------------------ turns
    def ask(self, text: str) -> None:
        self._turn(lambda: self.session.prompt(text, max_new_tokens=self.params.max_new_tokens))

    def retry(self) -> None:
        """Drop the last exchange and answer its user message again."""
        if not self.session.last_user():
            raise SessionError("nothing to retry: no message was sent yet")

        def start() -> Delta:
            dropped = self.session.undo()
            return self.session.extend(dropped[:1], max_new_tokens=self.params.max_new_tokens)

        self._turn(start)

    def continue_answer(self) -> None:
        """Generate more after the last answer: the session reopens it (:meth:`Session.reopen`). Under a format,
        the answer goes on where it was cut: the grammar starts past the text already written."""
        shown = self.session.messages[-1].get("content") if self.session.messages else None
        shown = shown if isinstance(shown, str) else ""
        params = self.params
        if params.constraint is not None:
            params = attrs.evolve(params, constraint=continued(params.constraint, shown))
        self._turn(self.session.reopen, shown, params)

    def _turn(self, start: Callable[[], Delta], shown: str = "", params: SamplingParams | None = None) -> None:
        """One turn: ``start`` computes the delta; ``shown`` is text to print before the reply (a reopened answer);
        ``params``: this turn's, if not the session's."""
        self._before = self.session.to_dict()
        # Ctrl-C only cancels from here on, so a prompted turn is always committed (or rolled back)
        with interrupt_flag() as interrupted:
            prefill = Prefill()
            try:
                turn = Turn(self, start, params or self.params, guard=RepetitionGuard(), progress=prefill)
            except SessionLengthExceeded as exc:
                self.discard(sent=False)
                raise ContextFull(advice(exc, self.overflow)) from None
            except ConstraintUnsupported as exc:  # a resumed /set format this backend cannot enforce
                self.discard(sent=False)
                raise SettingError(f"{exc.reason} (/set format off answers without it)") from None
            except BaseException:
                self.discard(sent=False)  # nothing was sent
                raise
            if turn.delta.dropped:
                session = self.session
                self.out.info(dropped_notice(turn.delta.dropped, session.session_len,
                                             "tokens" if session.counts_tokens else "characters",
                                             session.overflow_room))
            self.last_delta = turn.delta
            self.cached = True
            if self.debug:
                self.out.debug(describe_delta(turn.delta))
            self.out.begin_reply()
            if shown:
                self.out.reply_text(shown)  # the continued answer renders whole
            try:
                outcome = stream(turn, self.out.reply_text, interrupted, self.out.prefill, prefill)
            except BaseException:
                self.out.end_reply()
                raise
            self.out.end_reply(self.notes.get(outcome.finish_reason))
            self.last = outcome

    # ------------------------------------------------------------------ the turn protocol's owner
    def discard(self, *, sent: bool) -> None:
        """A turn did not commit: back to the session as it was (a reset next, when the engine got it)."""
        if sent:
            why = "the last generation failed: what the engine holds is unknown"
            self.session = edits.restored(self._before, self.tokenizer, why)
        else:
            self.session = Session.from_dict(self._before, tokenizer=self.tokenizer)

    def cancel_requested(self) -> bool:
        return False  # Ctrl-C cancels through the backend (see streaming)

    def failed(self, error: BaseException) -> None:
        self.out.error(f"the turn failed while stopping: {error}")

    # ------------------------------------------------------------------ session changes
    def replace(self, session: Session, version: int = 0) -> None:
        """Continue with another session (edited, forked, loaded) and save it."""
        self.cached = self.cached and session.session_id == self.session.session_id
        self.session, self.version = self._fitted(session), version
        self.last_delta = self.last = None
        self.save()

    def set_system(self, system: str | None) -> None:
        self.replace(edits.with_system(self.session, system, self.tokenizer), self.version)

    def set_template(self, template: BaseTemplate) -> str:
        """Switch templates (a reset); returns what happened to the backend's cache."""
        old = self.session
        self.replace(edits.with_template(old, template, self.tokenizer), self.version)
        if not self.cached:
            return f"template {template.name}: the backend held nothing for this session"
        self.backend.drop(old.session_id)
        self.cached = False
        return (
            f"template {template.name}: the backend cache of this session was dropped "
            f"({old.step} {'tokens' if old.counts_tokens else 'chars'}); "
            "the next turn sends the whole conversation"
        )

    def fork(self) -> str:
        old = self.session.session_id
        self.origin = old
        self.replace(edits.forked(self.session, self.tokenizer))
        return old

    def load_file(self, path: str) -> None:
        """Continue the session saved in ``path``. A file that is not one (not JSON, nested too deep, too big,
        wrong types, an id that is no id) is a :class:`SessionError` and the current session stays."""
        data = read_saved(path)
        where = f"{printable(path)}: not a session saved by /save"
        try:
            session = edits.restored(data, self.tokenizer, f"loaded from {path}")
        except (ValueError, KeyError, TypeError, AttributeError, RecursionError) as exc:  # not a snapshot
            raise SessionError(f"{where} ({type(exc).__name__}: {printable(str(exc)[:200])})") from None
        stored = self.store.load(session.session_id)
        self.restore_settings(data)
        self.replace(session, version_of(stored) if stored else 0)

    def snapshot(self) -> JSONObject:
        """The session as saved: its snapshot plus this chat's /set values."""
        return {**self.session.to_dict(), settings.SNAPSHOT_KEY: self._chat_record(),
                "engine": engine_id(self.backend)}

    def _chat_record(self) -> JSONObject:
        """What the REPL saves beside the session: its /set values, and the session it was forked from."""
        return {**settings.saved(self.overrides), **({"forked_from": self.origin} if self.origin else {})}

    def restore_settings(self, data: Mapping[str, object]) -> None:
        """Take the /set values saved with ``data`` (invalid ones are reported and ignored)."""
        self.overrides, problems = settings.restored(data)
        self.origin = forked_from(data)
        self._fitted(self.session)
        for line in problems:
            self.out.error(line)

    def save_file(self, path: str) -> None:
        with open(path, "w", encoding="utf-8") as f:
            json.dump(self.snapshot(), f, ensure_ascii=False, indent=2)
            f.write("\n")

    def save(self, record: TurnRecord | None = None) -> None:
        """Save to the store (compare-and-set on the version this process last saw); a failure is told, not raised."""
        if self.version == 0 and self.session.turns == 0:
            return  # nothing worth keeping yet
        try:
            self.version = self._write()
            self.session.mark_saved()
        except StoreConflict as exc:
            self.out.error(f"not saved: {exc}; /fork keeps this conversation under a new id")
        except LmchatError as exc:
            self.out.error(f"not saved: {exc}")


    def _write(self) -> int:
        """A turn's patch on top of the version this process saved (O(turn)); else the whole snapshot."""
        patch = self.session.changes() if self.version else None
        if patch is None:
            return self.store.save(self.snapshot(), expected_version=self.version)
        patch["set"][settings.SNAPSHOT_KEY] = self._chat_record()
        return self.store.append(self.session.session_id, patch, expected_version=self.version,
                                 summary=Summary.of_session(self.session))


def forked_from(data: Mapping[str, object]) -> str | None:
    """The id of the session a stored one was forked from (``/fork``), if it says."""
    section = data.get(settings.SNAPSHOT_KEY)
    origin = section.get("forked_from") if isinstance(section, Mapping) else None
    return origin if isinstance(origin, str) else None


def describe_delta(delta: Delta) -> str:
    """The delta exactly as sent (repr-escaped), with its reset flag and size."""
    head = "delta"
    if delta.reset:
        head += f" (reset: {delta.reason})"
    if delta.token_ids is not None:
        head += f" [{len(delta.token_ids)} tokens]"
    return f"{head}: {delta.text!r}"
