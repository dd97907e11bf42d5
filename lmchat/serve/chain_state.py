"""What the Responses and Conversations APIs keep beside a session, typed: :class:`SessionState` (the session's
``extra``) and one :class:`Note` per response (the session's notes), each read by ``from_json`` and written
by ``to_json``.

Both carry the format they were written in (``"format"``, :data:`FORMAT`). Records without one were written by
release 1 (one-letter keys: ``{"s", "e", "at"}`` notes, ``{"ref": k}`` references, ``head``, ``removed``...):
``from_json`` reads them as they are and nothing rewrites them, so a store keeps answering across the upgrade;
a session's state is written in the current format the next time it changes (its old notes stay as they were:
notes are only appended, so one session may hold both formats). A record that holds dropped items
(``truncation: "auto"``) is written in :data:`DROPPED_FORMAT`, the same keys and those: an lmchat that reads
formats 1 and 2 only would misread such a session, and refuses it instead.

A record this lmchat cannot read (another format, a missing or mistyped key) is a ``ValueError`` here, and
:func:`state_of` and :func:`note_of` turn it into ``StoreCorrupt`` naming the session (500 ``store_corrupt``).
"""
from __future__ import annotations

from typing import Any

import attrs

from ..errors import StoreCorrupt
from ..manager.table import View

#: the format this module writes; 1 is release 1's (no ``format`` key)
FORMAT = 2
#: the format of a record holding dropped items (written only then)
DROPPED_FORMAT = 3
#: the kinds of session the two APIs make (the manager refuses a turn of another kind on them)
KINDS = ("responses", "conversation")


def _version(data: dict[str, Any]) -> int:
    version = data.get("format", 1)
    if isinstance(version, bool) or version not in (1, FORMAT, DROPPED_FORMAT):
        raise ValueError(f"format {str(version)[:40]!r}: this lmchat reads formats 1 to {DROPPED_FORMAT}")
    return 1 if version == 1 else FORMAT


@attrs.frozen
class Run:
    """Items a branch holds as copies of its ancestry's: ``count`` items named ``(session, first_serial + i)``.

    JSON ``{"session": sid, "first_serial": n, "count": c}`` (release 1: ``[sid, n, c]``).
    """

    session: str
    first_serial: int
    count: int

    def to_json(self) -> dict[str, Any]:
        return {"session": self.session, "first_serial": self.first_serial, "count": self.count}

    @classmethod
    def from_json(cls, data: Any) -> Run:
        if isinstance(data, list):
            return cls(*data)
        return cls(data["session"], data["first_serial"], data["count"])


@attrs.frozen
class Cut:
    """An item the model had seen was deleted from a conversation: the responses noted before it (``responses``
    of them) whose state held it (those ending after ``serial``) can no longer be continued.

    JSON ``{"responses": n, "serial": s}`` (release 1: ``[n, s]``).
    """

    responses: int
    serial: int

    def to_json(self) -> dict[str, Any]:
        return {"responses": self.responses, "serial": self.serial}

    @classmethod
    def from_json(cls, data: Any) -> Cut:
        if isinstance(data, list):
            return cls(*data)
        return cls(data["responses"], data["serial"])

    def stales(self, k: int, end_serial: int) -> bool:
        """Whether response ``k``, whose items end before ``end_serial``, held the deleted item."""
        return k < self.responses and self.serial < end_serial


@attrs.frozen
class Dropped:
    """Items ``truncation: "auto"`` dropped from the session to fit a turn: the items of serials ``first_serial``
    to ``end_serial`` (deleted ones aside). They are still items (listed, read back, deleted), which the model no
    longer sees; the notes of the turns that dropped them hold their messages (:attr:`Note.dropped`).

    JSON ``{"first_serial": a, "end_serial": b}``.
    """

    first_serial: int
    end_serial: int

    def to_json(self) -> dict[str, Any]:
        return {"first_serial": self.first_serial, "end_serial": self.end_serial}

    @classmethod
    def from_json(cls, data: Any) -> Dropped:
        return cls(_int(data["first_serial"]), _int(data["end_serial"]))


@attrs.frozen
class DroppedMessage:
    """The message of a dropped item (:class:`Dropped`), kept in the note of the turn that dropped it.

    JSON ``{"serial": s, "message": {...}}`` (the message as the session held it).
    """

    serial: int
    message: dict[str, Any]

    def to_json(self) -> dict[str, Any]:
        return {"serial": self.serial, "message": self.message}

    @classmethod
    def from_json(cls, data: Any) -> DroppedMessage:
        message = data["message"]
        if not isinstance(message, dict):
            raise ValueError(f"a dropped message is an object, not {type(message).__name__}")
        return cls(_int(data["serial"]), message)


def _int(value: Any) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise ValueError(f"{str(value)[:40]!r} is no serial")
    return value


@attrs.frozen
class SessionState:
    """A Responses chain's or a conversation's session, as its ``extra`` says (JSON keys as the fields, but
    ``kind``: see :data:`KINDS`; release 1's key in brackets).

    - ``system_head`` [``head``]: the session's first message is a system prompt that is no item (the request's
      ``instructions``, or the template's default).
    - ``deleted_items`` [``removed``]: serials of a conversation's deleted items, sorted (the others keep theirs).
    - ``cuts``: the deletions of items the model had seen (:class:`Cut`).
    - ``queue``: a conversation's messages added and not yet sent: the first messages of its next turn.
    - ``deleted_responses`` [``deleted``]: indices of the session's responses that were deleted.
    - ``origin``: a branch's first items, which keep the ids they had where they came from (:class:`Run`).
    - ``created_at``, ``metadata``: a conversation's own.
    - ``dropped``: the items the session no longer holds, dropped to fit a turn (:class:`Dropped`).
    """

    kind: str
    system_head: bool = False
    deleted_items: tuple[int, ...] = ()
    cuts: tuple[Cut, ...] = ()
    queue: tuple[dict[str, Any], ...] = ()
    deleted_responses: tuple[int, ...] = ()
    origin: tuple[Run, ...] = ()
    created_at: int = 0
    metadata: dict[str, Any] = attrs.field(factory=dict)
    dropped: tuple[Dropped, ...] = ()

    @property
    def head(self) -> int:
        """How many messages come before the first item (the system prompt that is none)."""
        return int(self.system_head)

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"kind": self.kind, "format": DROPPED_FORMAT if self.dropped else FORMAT,
                                "system_head": self.system_head}
        lists = {"deleted_items": list(self.deleted_items), "cuts": [c.to_json() for c in self.cuts],
                 "queue": list(self.queue), "deleted_responses": list(self.deleted_responses),
                 "origin": [r.to_json() for r in self.origin], "dropped": [d.to_json() for d in self.dropped]}
        data.update((key, value) for key, value in lists.items() if value)
        if self.kind == "conversation":
            data.update(created_at=self.created_at, metadata=self.metadata)
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any] | None) -> SessionState | None:
        """The state in a session's ``extra``; None for a session neither API made (chat, interactive)."""
        if not data or data.get("kind") not in KINDS:
            return None
        if _version(data) == 1:
            data = {"kind": data["kind"], "system_head": data.get("head", 0), "deleted_items": data.get("removed"),
                    "cuts": data.get("cuts"), "queue": data.get("queue"), "deleted_responses": data.get("deleted"),
                    "origin": data.get("origin"), "created_at": data.get("created_at"),
                    "metadata": data.get("metadata")}
        return cls(data["kind"], bool(data.get("system_head")),
                   tuple(sorted(_int(s) for s in data.get("deleted_items") or ())),
                   tuple(Cut.from_json(c) for c in data.get("cuts") or ()), tuple(data.get("queue") or ()),
                   tuple(sorted(_int(k) for k in data.get("deleted_responses") or ())),
                   tuple(Run.from_json(r) for r in data.get("origin") or ()), data.get("created_at") or 0,
                   dict(data.get("metadata") or {}), tuple(Dropped.from_json(d) for d in data.get("dropped") or ()))

    def evolve(self, **changes: Any) -> SessionState:
        return attrs.evolve(self, **changes)


@attrs.frozen
class Same:
    """A note's field equal to the one note ``response`` holds (written once, when it changes).

    JSON ``{"same_as": k}`` (release 1: ``{"ref": k}``).
    """

    response: int

    def to_json(self) -> dict[str, Any]:
        return {"same_as": self.response}


def _carried(value: Any, key: str = "same_as") -> Any:
    """A carried field as stored: a value, or a reference (``key``, as the note's format spells it)."""
    if isinstance(value, dict) and len(value) == 1 and isinstance(value.get(key), int):
        return Same(value[key])
    return value


def _carried_json(value: Any) -> Any:
    return value.to_json() if isinstance(value, Same) else value


#: the note fields that rarely change: written when they do, :class:`Same` otherwise
CARRIED = ("model", "request", "instructions", "tools")


@attrs.frozen
class Note:
    """One response: the state of its session after its turn (``stream_turn(note=)``, saved with the turn).

    JSON keys as the fields, and ``format`` (release 1's key in brackets):

    - ``first_serial`` [``s``]: the serial of its first input item; ``end_serial`` [``e``]: one past its answer's.
    - ``created_at`` [``at``]: when it was made (seconds since the epoch).
    - ``idempotency_key`` [``key``]: the request's Idempotency-Key: a retry finds the response by it.
    - ``previous_response_id`` [``prev``]: only when it is not the chain's previous response (a branch's first).
    - ``model``, ``request`` [``req``: the request's fields a response repeats], ``instructions``, ``tools``:
      a value, or :class:`Same` as an earlier note's (None: not given).
    - ``turn``: the turn's counts, which the manager adds under this key when the turn commits (None: running).
    - ``dropped``: the messages of the items this turn dropped to fit (a branch's first turn: and those the
      branch was made with dropped), :class:`DroppedMessage` s.
    """

    first_serial: int
    end_serial: int
    created_at: float
    idempotency_key: str | None = None
    previous_response_id: str | None = None
    model: Any = None
    request: Any = None
    instructions: Any = None
    tools: Any = None
    turn: dict[str, Any] | None = None
    dropped: tuple[DroppedMessage, ...] = ()

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"format": DROPPED_FORMAT if self.dropped else FORMAT,
                                "first_serial": self.first_serial, "end_serial": self.end_serial,
                                "created_at": self.created_at}
        for key in ("idempotency_key", "previous_response_id", *CARRIED, "turn"):
            value = getattr(self, key)
            if value is not None:
                data[key] = _carried_json(value)
        if self.dropped:
            data["dropped"] = [d.to_json() for d in self.dropped]
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Note:
        if _version(data) == 1:
            model, request, instructions, tools = (_carried(data.get(key), "ref")
                                                   for key in ("model", "req", "instructions", "tools"))
            return cls(data["s"], data["e"], data["at"], data.get("key"), data.get("prev"), model, request,
                       instructions, tools, data.get("turn"))
        model, request, instructions, tools = (_carried(data.get(key)) for key in CARRIED)
        return cls(_int(data["first_serial"]), _int(data["end_serial"]), data["created_at"],
                   data.get("idempotency_key"), data.get("previous_response_id"), model, request, instructions, tools,
                   data.get("turn"), tuple(DroppedMessage.from_json(d) for d in data.get("dropped") or ()))


#: what a record that cannot be read raises while it is parsed
UNREADABLE = (KeyError, IndexError, TypeError, ValueError, AttributeError)


def _corrupt(v: View, what: str, exc: BaseException) -> StoreCorrupt:
    why = f"no {exc.args[0]!r}" if isinstance(exc, KeyError) and exc.args else str(exc)
    return StoreCorrupt(f"session {v.session.session_id}: its stored {what} cannot be read ({why[:200]}): "
                        "delete it")


def state_of(v: View) -> SessionState | None:
    """The session's state (None: a session neither API made); unreadable, ``StoreCorrupt``."""
    try:
        return SessionState.from_json(v.extra)
    except UNREADABLE as exc:
        raise _corrupt(v, "Responses state", exc) from None


def note_of(v: View, k: int) -> Note:
    """Note ``k`` of the session (one it has); unreadable, ``StoreCorrupt``."""
    try:
        return Note.from_json(v.notes[k])
    except UNREADABLE as exc:
        raise _corrupt(v, f"note of response {k}", exc) from None


def resolve(v: View, k: int, field: str) -> tuple[int, Any]:
    """(index of the note that holds it, value) of a carried ``field`` of note ``k`` of the session."""
    value = getattr(note_of(v, k), field)
    if isinstance(value, Same):
        if not 0 <= value.response < len(v.notes):
            raise _corrupt(v, f"note of response {k}", ValueError(f"same_as {value.response} names no note"))
        return value.response, getattr(note_of(v, value.response), field)
    return k, value


def dropped_messages(v: View) -> dict[int, dict[str, Any]]:
    """serial -> message of every dropped item whose message the session's notes keep (O(notes): read only where a
    dropped item is)."""
    found: dict[int, dict[str, Any]] = {}
    for k, raw in enumerate(v.notes):
        if isinstance(raw, dict) and "dropped" in raw:
            found.update((d.serial, d.message) for d in note_of(v, k).dropped)
    return found
