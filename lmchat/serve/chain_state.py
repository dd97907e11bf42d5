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

from typing import TypeVar, cast

import attrs

from ..errors import StoreCorrupt
from ..jsontypes import JSON, JSONObject
from ..manager.table import View
from ..messages import Message
from .json_read import listed, obj, optional, seconds, serial, string, strings
from .wire import Tools, TurnCounts

T = TypeVar("T")

#: the format this module writes; 1 is release 1's (no ``format`` key)
FORMAT = 2
#: the format of a record holding dropped items (written only then)
DROPPED_FORMAT = 3
#: the kinds of session the two APIs make (the manager refuses a turn of another kind on them)
KINDS = ("responses", "conversation")


def _version(data: JSONObject) -> int:
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

    def to_json(self) -> JSONObject:
        return {"session": self.session, "first_serial": self.first_serial, "count": self.count}

    @classmethod
    def from_json(cls, data: JSON) -> Run:
        if isinstance(data, list):
            return cls(*data)
        data = obj(data)
        return cls(string(data["session"]), serial(data["first_serial"]), serial(data["count"]))


@attrs.frozen
class Cut:
    """An item the model had seen was deleted from a conversation: the responses noted before it (``responses``
    of them) whose state held it (those ending after ``serial``) can no longer be continued.

    JSON ``{"responses": n, "serial": s}`` (release 1: ``[n, s]``).
    """

    responses: int
    serial: int

    def to_json(self) -> JSONObject:
        return {"responses": self.responses, "serial": self.serial}

    @classmethod
    def from_json(cls, data: JSON) -> Cut:
        if isinstance(data, list):
            return cls(*data)
        data = obj(data)
        return cls(serial(data["responses"]), serial(data["serial"]))

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

    def to_json(self) -> JSONObject:
        return {"first_serial": self.first_serial, "end_serial": self.end_serial}

    @classmethod
    def from_json(cls, data: JSON) -> Dropped:
        data = obj(data)
        return cls(serial(data["first_serial"]), serial(data["end_serial"]))


@attrs.frozen
class DroppedMessage:
    """The message of a dropped item (:class:`Dropped`), kept in the note of the turn that dropped it.

    JSON ``{"serial": s, "message": {...}}`` (the message as the session held it).
    """

    serial: int
    message: Message

    def to_json(self) -> JSONObject:
        return {"serial": self.serial, "message": self.message}

    @classmethod
    def from_json(cls, data: JSON) -> DroppedMessage:
        data = obj(data)
        message = data["message"]
        if not isinstance(message, dict):
            raise ValueError(f"a dropped message is an object, not {type(message).__name__}")
        return cls(serial(data["serial"]), message)


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
    queue: tuple[Message, ...] = ()
    deleted_responses: tuple[int, ...] = ()
    origin: tuple[Run, ...] = ()
    created_at: int = 0
    metadata: dict[str, str] = attrs.field(factory=dict)
    dropped: tuple[Dropped, ...] = ()

    @property
    def head(self) -> int:
        """How many messages come before the first item (the system prompt that is none)."""
        return int(self.system_head)

    def to_json(self) -> JSONObject:
        data: JSONObject = {"kind": self.kind, "format": DROPPED_FORMAT if self.dropped else FORMAT,
                                "system_head": self.system_head}
        lists = {"deleted_items": list(self.deleted_items), "cuts": [c.to_json() for c in self.cuts],
                 "queue": list(self.queue), "deleted_responses": list(self.deleted_responses),
                 "origin": [r.to_json() for r in self.origin], "dropped": [d.to_json() for d in self.dropped]}
        data.update((key, value) for key, value in lists.items() if value)
        if self.kind == "conversation":
            data.update(created_at=self.created_at, metadata=self.metadata)
        return data

    @classmethod
    def from_json(cls, data: JSONObject | None) -> SessionState | None:
        """The state in a session's ``extra``; None for a session neither API made (chat, interactive)."""
        if not data or data.get("kind") not in KINDS:
            return None
        if _version(data) == 1:
            data = {"kind": data["kind"], "system_head": data.get("head", 0), "deleted_items": data.get("removed"),
                    "cuts": data.get("cuts"), "queue": data.get("queue"), "deleted_responses": data.get("deleted"),
                    "origin": data.get("origin"), "created_at": data.get("created_at"),
                    "metadata": data.get("metadata")}
        return cls(string(data["kind"]), bool(data.get("system_head")),
                   tuple(sorted(serial(s) for s in listed(data.get("deleted_items")))),
                   tuple(Cut.from_json(c) for c in listed(data.get("cuts"))),
                   tuple(obj(m) for m in listed(data.get("queue"))),
                   tuple(sorted(serial(k) for k in listed(data.get("deleted_responses")))),
                   tuple(Run.from_json(r) for r in listed(data.get("origin"))), serial(data.get("created_at") or 0),
                   strings(data.get("metadata")), tuple(Dropped.from_json(d) for d in listed(data.get("dropped"))))


@attrs.frozen
class Same:
    """A note's field equal to the one note ``response`` holds (written once, when it changes).

    JSON ``{"same_as": k}`` (release 1: ``{"ref": k}``).
    """

    response: int

    def to_json(self) -> dict[str, int]:
        return {"same_as": self.response}


def _carried(value: JSON, want: type[T], key: str = "same_as") -> T | Same | None:
    """A carried field as stored: a value of type ``want``, or a reference (``key``, as the note's format spells
    it)."""
    if isinstance(value, dict) and len(value) == 1 and isinstance(value.get(key), int):
        return Same(value[key])
    if value is None or isinstance(value, want):
        return value
    raise ValueError(f"{str(value)[:40]!r} is no {want.__name__}")


def _carried_json(value: object) -> object:
    return value.to_json() if isinstance(value, Same) else value


#: the note fields that rarely change: written when they do, :class:`Same` otherwise
CARRIED = ("model", "request", "instructions", "tools")
#: a note's carried fields resolved: field -> (index of the note that holds it, its value)
Carried = dict[str, tuple[int, object]]


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
    model: str | Same | None = None
    request: JSONObject | Same | None = None
    instructions: str | Same | None = None
    tools: Tools | Same | None = None
    turn: TurnCounts | None = None
    dropped: tuple[DroppedMessage, ...] = ()

    def to_json(self) -> JSONObject:
        data: JSONObject = {"format": DROPPED_FORMAT if self.dropped else FORMAT,
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
    def from_json(cls, data: JSONObject) -> Note:
        old = _version(data) == 1
        names, ref = (("model", "req", "instructions", "tools"), "ref") if old else (CARRIED, "same_as")
        model, instructions = _carried(data.get(names[0]), str, ref), _carried(data.get(names[2]), str, ref)
        request, tools = _carried(data.get(names[1]), dict, ref), _carried(data.get(names[3]), list, ref)
        if old:
            return cls(serial(data["s"]), serial(data["e"]), seconds(data["at"]), optional(data.get("key"), str),
                       optional(data.get("prev"), str), model, request, instructions, tools, _turn(data.get("turn")))
        return cls(serial(data["first_serial"]), serial(data["end_serial"]), seconds(data["created_at"]),
                   optional(data.get("idempotency_key"), str), optional(data.get("previous_response_id"), str),
                   model, request, instructions, tools, _turn(data.get("turn")),
                   tuple(DroppedMessage.from_json(d) for d in listed(data.get("dropped"))))



def _turn(value: object) -> TurnCounts | None:
    """A note's ``turn`` as the manager wrote it (:func:`.responses_model.turn_of`, and ``chars``)."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise ValueError(f"a turn is an object, not {type(value).__name__}")
    finish = value.get("finish_reason")
    if finish is not None and not isinstance(finish, str):
        raise ValueError(f"finish_reason {str(finish)[:40]!r} is no string")
    # kept as stored: the counts are read where a response needs them, a newer lmchat's keys stay
    return cast(TurnCounts, value)


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
        return Note.from_json(obj(v.notes[k]))
    except UNREADABLE as exc:
        raise _corrupt(v, f"note of response {k}", exc) from None


def resolve(v: View, k: int, field: str) -> tuple[int, object]:
    """(index of the note that holds it, value) of a carried ``field`` of note ``k`` of the session."""
    value = getattr(note_of(v, k), field)
    if isinstance(value, Same):
        if not 0 <= value.response < len(v.notes):
            raise _corrupt(v, f"note of response {k}", ValueError(f"same_as {value.response} names no note"))
        return value.response, getattr(note_of(v, value.response), field)
    return k, value


def resolved(v: View, k: int) -> Note:
    """Note ``k`` of the session with its carried fields resolved (values, no :class:`Same`)."""

    def value(field: str, want: type[T]) -> T | None:
        found = resolve(v, k, field)[1]
        if found is None or isinstance(found, want):
            return found
        raise _corrupt(v, f"note of response {k}", ValueError(f"its {field} is a same_as of a same_as"))

    return attrs.evolve(note_of(v, k), model=value("model", str), request=value("request", dict),
                        instructions=value("instructions", str), tools=value("tools", list))


def dropped_messages(v: View) -> dict[int, Message]:
    """serial -> message of every dropped item whose message the session's notes keep (O(notes): read only where a
    dropped item is)."""
    found: dict[int, Message] = {}
    for k, raw in enumerate(v.notes):
        if isinstance(raw, dict) and "dropped" in raw:
            found.update((d.serial, d.message) for d in note_of(v, k).dropped)
    return found
