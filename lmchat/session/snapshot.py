"""A session as JSON (``Session.to_dict``) and back (``Session.from_dict``).

The snapshot holds the conversation (``messages``: what the engine is given;
``earlier``: what an overflow policy dropped from it, which a snapshot written
before sessions kept it lacks), the template (by registered name and
changed fields), every constructor option and the held state
(:class:`~.state.Held`): a restored session continues exactly where the
snapshot left it. It shares nothing with the live session. A snapshot from
elsewhere (a stored row, a saved file) is checked as it is read: anything
unreadable is a :class:`~lmchat.errors.SnapshotError` naming it, never
another exception.
"""
from __future__ import annotations

import copy
import datetime as _dt
import itertools
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from .. import validation
from ..errors import LmchatError, SnapshotError, SnapshotTemplateUnknown, UnknownTemplate
from ..jsontypes import JSONObject
from ..messages import Message, in_call_form, normalize_messages
from ..templates.base import BaseTemplate
from . import patches
from .overflow import ROOM
from .policy import SessionPolicy
from .state import SMALL_FIELDS, Held
from .vocab import Tokenizer

if TYPE_CHECKING:
    from .core import Session

FORMAT_VERSION = 1


def to_dict(session: Session) -> JSONObject:
    chat = session._chat
    return {
        "version": FORMAT_VERSION,
        "session_id": session.session_id,
        "template": session.template.to_dict(),
        "date": session.date.isoformat(),
        "system": session._system,
        "tools": copy.deepcopy(chat.tools),
        "template_kwargs": copy.deepcopy(session.template_kwargs),
        "messages": copy.deepcopy(chat.messages),
        "earlier": copy.deepcopy(session._earlier),
        **session._held.to_dict(with_ids=session._codec is not None),
        **options(session),
    }


def patch(session: Session) -> patches.Patch | None:
    """What changed since the session was last saved, as a patch (:mod:`.patches`), or None when it never
    was: O(turn) for a turn (the small fields are not taken from :meth:`Held.to_dict`, which copies the
    history; only those that changed are set)."""
    lows = session._changes.lows
    if lows is None:
        return None
    held = session._held
    lists: dict[str, Sequence[object]] = {"messages": session._chat.messages, "earlier": session._earlier,
                                   "context": held.parts,
                                   "offsets": held.offsets, "context_ids": held.ids}
    if session._codec is None:
        lows = {k: v for k, v in lows.items() if k != "context_ids"}
    last = session._changes.small
    # small_values has one value per key of SMALL; last, none before the first save
    changed: JSONObject = {
        key: list(value) if isinstance(value, tuple) else value
        for key, (value, was) in zip(patches.SMALL, itertools.zip_longest(small_values(session), last,
                                                                          fillvalue=_UNSAVED), strict=True)
        if value != was}
    return patches.make(lists, lows, changed)


_UNSAVED = object()  # no value saved (compares unequal to any)
#: the snapshot keys of the small fields the session's Held keeps -> its attribute names
_HELD = {key: name for name, key in SMALL_FIELDS}


def messages_of(data: Mapping[str, object], key: str = "messages") -> list[Message]:
    """A snapshot's ``messages`` (or ``earlier``): the list itself, so an edit of it edits the snapshot."""
    messages = data.get(key)
    if not isinstance(messages, list):
        raise SnapshotError(f"a session snapshot's {key!r} is a list, got {type(messages).__name__}")
    return messages


def small_values(session: Session) -> tuple[object, ...]:
    """The small fields (:data:`.patches.SMALL`, in its order) as the session holds them: tuples are shared,
    not copied, so what :meth:`Session.mark_saved` keeps per session costs one tuple."""
    held, opts = session._held, options(session)
    return tuple(getattr(held, _HELD[key]) if key in _HELD else opts[key] for key in patches.SMALL)


def options(session: Session) -> JSONObject:
    """The constructor options a snapshot keeps (besides the template, tools and the like)."""
    return {
        "session_len": session.session_len if session._codec is not None or session._explicit_len else None,
        "overflow": session.overflow,
        "max_new_tokens": session.max_new_tokens,
        "injection": session.injection,
        "max_message_chars": session.max_message_chars,
        "drift": session.drift,
        "overflow_room": session.overflow_room,
    }


def from_dict(cls: type, data: Mapping[str, object], tokenizer: Tokenizer | None) -> Session:
    if not isinstance(data, Mapping):
        raise SnapshotError(f"a session snapshot is a JSON object, got {type(data).__name__}")
    if data.get("version") != FORMAT_VERSION:
        raise SnapshotError(f"unsupported session format version {data.get('version')!r}")
    try:
        return _restore(cls, data, tokenizer)
    except UnknownTemplate as exc:  # the snapshot's data is bad, whoever reads it (a stored row: a 5xx, not a 400)
        raise SnapshotTemplateUnknown(exc) from None
    except LmchatError:
        raise
    except (KeyError, TypeError, ValueError, AttributeError, IndexError, RecursionError) as exc:
        what = f"missing {exc}" if isinstance(exc, KeyError) else f"{type(exc).__name__}: {exc}"
        raise SnapshotError(f"session {str(data.get('session_id'))[:64]!r}: not a readable snapshot ({what})"
                            ) from None


# Any: a snapshot's fields go to Session() as they are, which checks them (validation, Held.from_dict); what
# fails is the SnapshotError from_dict raises
def _restore(cls: type[Session], data: Mapping[str, Any], tokenizer: Tokenizer | None) -> Session:
    session = cls(
        BaseTemplate.from_dict(data["template"]),
        tools=data.get("tools"),
        date=_dt.date.fromisoformat(data["date"]),
        session_id=data["session_id"],
        template_kwargs=data.get("template_kwargs"),
        tokenizer=tokenizer,
        policy=SessionPolicy(
            session_len=data.get("session_len"),
            overflow=data.get("overflow", "error"),
            max_new_tokens=data.get("max_new_tokens", 0),
            injection=data.get("injection", "split"),
            max_message_chars=data.get("max_message_chars", validation.DEFAULT_MAX_CHARS),
            drift=data.get("drift", "rewind"),
            overflow_room=data.get("overflow_room", ROOM),  # a session saved before it was an option
        ),
    )
    session._system = data.get("system")
    # calls stored before the template declared its arguments' form (DeepSeek's as objects) render again
    session._chat.messages[:] = in_call_form(normalize_messages(data["messages"]), session.template.call_arguments)
    # a snapshot from before sessions kept what they dropped has none
    session._keep_earlier(in_call_form(normalize_messages(data.get("earlier") or []), session.template.call_arguments))
    with_ids = tokenizer is not None and data.get("context_ids") is not None
    held = session._held = Held.from_dict(dict(data), with_ids=with_ids)
    if (tokenizer is not None) != (data.get("context_ids") is not None) and held.parts:
        held.needs_reset = True
        held.reset_reason = "restored without the token ids the engine holds"
    return session
