"""What a session hands the engine (:class:`Delta`) and what it holds (:class:`Held`).

``Held`` is declared once: a reset starts a fresh one, a snapshot writes its
fields (under the names of the snapshot format) and a restore reads them back.
"""
from __future__ import annotations

import bisect
from collections.abc import Mapping
from typing import Any

import attrs

from ..jsontypes import JSONObject
from ..messages import Message


@attrs.frozen
class Delta:
    """What the engine must consume for one turn.

    ``text`` extends the engine's context unless ``reset``, in which case the
    engine drops what it holds for the session and ``text`` is the whole prompt.
    ``sequence_start`` is true for the first delta of a sequence (and for resets).
    ``reason`` says why the engine could not simply extend what it held (a
    reset, a drift rewind, an overflow). With a tokenizer, ``token_ids`` are
    the ids of ``text`` (content never parsed as special tokens). ``removed``:
    the messages an overflow policy dropped from the front to fit the turn, which
    were the session's messages ``[removed_at:removed_at + dropped]`` (after its
    system prompt, which stays); the session holds them no more.
    ``discard=(start, count)`` is a range the engine removes from what it
    holds before appending the delta (no reset): old turns shifted out by the
    ``'shift'`` overflow policy, drifted ids rewound, the end marker of an
    answer reopened; it counts token ids with a tokenizer, else characters.
    ``shiftable=(start, count)``, on a reset only: a ``'shift'`` that could
    not be one delta (the last answer's ids drifted, so two ranges were to
    go): the engine may, instead of prefilling the whole prompt, drop those
    ``count`` ids at ``start`` from what it held before the reset and keep
    the rest where it still equals the prompt (a context shift, the session
    policy's accepted approximation); an engine that cannot ignores it.
    """

    text: str
    reset: bool = False
    sequence_start: bool = False
    reason: str | None = None
    token_ids: list[int] | None = None
    removed: tuple[Message, ...] = ()
    removed_at: int = 0
    discard: tuple[int, int] | None = None
    shiftable: tuple[int, int] | None = None

    @property
    def dropped(self) -> int:
        """How many messages the overflow policy removed."""
        return len(self.removed)


@attrs.define
class Plan:
    """A computed delta and the state it leads to, applied only once it is accepted."""

    delta: Delta
    offsets: list[int]  # piece starts from ``window`` on, then the tail start (context offsets)
    window: int
    full: bool = False
    anchor: tuple[int, int] = (0, 0)
    shift: tuple[int, int] | None = None  # (keep, resume): the context keeps [:keep] + [resume:]


def _snapshot(key: str, **kwargs: Any) -> Any:  # Any: an attrs field and its arguments, as attrs.field types them
    """A held field, written to snapshots under ``key``."""
    return attrs.field(metadata={"key": key}, **kwargs)


# no setattr hooks: fields are assigned on every turn (``length`` per appended part), and every value assigned
# after construction is already of its type (``anchor``'s converter serves restored snapshots, at __init__)
@attrs.define(on_setattr=attrs.setters.NO_OP)
class Held:
    """What the engine holds for a session since its last reset, and where the conversation stands."""

    parts: list[str] = _snapshot("context", factory=list)  # the context as the deltas and answers that built it
    offsets: list[int] = _snapshot("offsets", factory=list)  # where each rendered message's piece starts
    rendered: int = _snapshot("rendered", default=0)  # messages covered by the last rendering
    tail: int = _snapshot("tail", default=0)  # where the last rendering's tail (generation prompt) starts
    pending: bool = _snapshot("pending", default=False)  # a prompt awaits its answer
    needs_reset: bool = _snapshot("needs_reset", default=False)
    reset_reason: str | None = _snapshot("reset_reason", default=None)
    ids: list[int] = _snapshot("context_ids", factory=list)  # the token twin of the context
    anchor: tuple[int, int] = _snapshot("anchor", default=(0, 0), converter=tuple)  # (chars, ids) after the last marker
    rewind: tuple[int, int] | None = _snapshot("rewind", default=None)  # drift 'rewind': (start, count) to drop
    # the last answer's end before its stop marker: (chars, ids, anchor chars, anchor ids), for reopen()
    answer_end: tuple[int, int | None, int, int] | None = _snapshot("answer_end", default=None)
    reopened: str | None = _snapshot("reopened", default=None)  # content of the answer being continued
    starts: list[int] = attrs.field(factory=list, repr=False)  # offset of each part (derived)
    length: int = attrs.field(default=0, repr=False)  # characters held (derived)

    def __attrs_post_init__(self) -> None:
        if self.parts and not self.starts:
            parts, self.parts = self.parts, []
            for part in parts:
                self.append(part)

    # ------------------------------------------------------------------ text
    def append(self, text: str) -> None:
        if text:
            self.starts.append(self.length)
            self.parts.append(text)
            self.length += len(text)

    @property
    def context(self) -> str:
        return "".join(self.parts)

    def context_from(self, pos: int) -> str:
        """The held text from offset ``pos`` on, joining only the parts it spans."""
        j = bisect.bisect_right(self.starts, pos) - 1
        if j < 0:
            return self.context[pos:]
        return "".join(self.parts[j:])[pos - self.starts[j]:]

    def truncate(self, chars: int) -> None:
        """Keep the first ``chars`` characters of the context."""
        kept = self.context[:chars]
        self.parts, self.starts, self.length = [], [], 0
        self.append(kept)

    # ------------------------------------------------------------------ snapshots
    def to_dict(self, with_ids: bool) -> JSONObject:
        out: JSONObject = {}
        for a in attrs.fields(Held):
            key = a.metadata.get("key")
            if key is None:
                continue
            value = getattr(self, a.name)
            if a.name == "ids" and not with_ids:
                value = None
            out[key] = list(value) if isinstance(value, (list, tuple)) else value
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, object], with_ids: bool) -> Held:
        values: dict[str, Any] = {}  # Held's arguments, each checked against _KINDS below
        for a in attrs.fields(cls):
            key = a.metadata.get("key")
            if key is None or data.get(key) is None:
                continue
            value = data[key]
            values[a.name] = _tuple(value) if a.name in ("rewind", "answer_end") else value
        if not with_ids:
            values.pop("ids", None)
            values.pop("rewind", None)
        for name, kind in _KINDS.items():
            value = values.get(name)
            items = value if isinstance(value, (list, tuple)) else [value]
            if value is not None and not all(_is(v, kind) or (name == "answer_end" and v is None) for v in items):
                raise ValueError(f"{name!r} holds {value!r:.60}")
        for name in ("anchor", "rewind"):
            if values.get(name) is not None and len(values[name]) != 2:
                raise ValueError(f"{name!r} is a pair, got {values[name]!r:.60}")
        return cls(**values)


def _is(value: object, kind: type) -> bool:
    return isinstance(value, bool) if kind is bool else isinstance(value, kind) and not isinstance(value, bool)


def _tuple(value: object) -> tuple[object, ...]:
    if not isinstance(value, (list, tuple)):
        raise TypeError(f"expected a list, got {type(value).__name__}")  # from_dict's caller names the snapshot
    return tuple(value)


#: what each held field is made of (a snapshot from elsewhere is checked before it is used)
_KINDS = {"parts": str, "offsets": int, "ids": int, "anchor": int, "rewind": int, "answer_end": int,
          "rendered": int, "tail": int, "pending": bool, "needs_reset": bool, "reset_reason": str, "reopened": str}


#: (attribute, snapshot key) of Held's small fields: not the lists that grow with the conversation
SMALL_FIELDS = tuple((a.name, a.metadata["key"]) for a in attrs.fields(Held)
                     if "key" in a.metadata and a.name not in ("parts", "offsets", "ids"))
