"""Response ids as session states: which session a Responses request runs its turn on, and what it notes.

A response is the state of a session after one of its turns: ``resp_<sid>_<k>``
is the ``k``-th noted turn of session ``sid`` (:mod:`.items`), and the note
(``stream_turn(note=)``, saved in the turn's compare-and-set) holds where its
items are (``s``: the serial of its first input item, ``e``: one past its
answer) and what the request asked. Beside the notes, the session's ``extra``
says what kind of session it is (``responses`` or ``conversation``), ``head``
(1 when its first message is the system prompt of ``instructions`` or the
template's default, which is no item), and for conversations the items added
and not yet sent (``queue``), deleted items (``removed``) and which responses
a deletion cut (``cuts``), and the responses deleted (``deleted``). A branch's
``origin`` names the items it was forked with (:class:`Names`): they keep the
ids they had in the chain or conversation they came from, so that a
response's input items (its whole ancestry) read the same on every branch.

``previous_response_id`` naming the latest response of a ``responses``
session extends it with the new input (a delta, O(turn)); naming an older
one, or one of a conversation, forks the session at that response's last
message (the branch's first delta resets). With ``store: false`` the new
session, or the branch, is a one-off (``SessionManager.oneoff``): held in
memory for the turn only, never stored, so its response can never be read
or continued. Large fields that rarely change
(``model``, the request's fields, ``instructions``, ``tools``) are written in a note when they change and
referenced (``{"ref": k}``) otherwise.
"""
from __future__ import annotations

import bisect
import hashlib
import time
import uuid
from typing import Any

import attrs

from ..errors import SessionExists, SessionNotFound
from ..manager import OneOff
from ..manager.table import View
from ..session import Session
from ..session.edits import restored
from .errors import ApiError
from .items import Serials, conversation_id, parse_conversation_id, parse_response_id, response_id

KINDS = ("responses", "conversation")
#: note fields that rarely change: written when they do, referenced ({"ref": k}) otherwise
CARRIED = ("model", "req", "instructions", "tools")
_SWITCH: dict[str, bool] = {}


def new_sid(key: str | None = None, who: str | None = None, branch_of: str | None = None) -> str:
    """A new chain's session id: random, or derived from the request's Idempotency-Key and its owner (and, for
    a branch, the response it branches from), so that a retry finds the session its first attempt made."""
    if key is None:
        return uuid.uuid4().hex
    seed = f"{who or ''}\0{key}" + (f"\0{branch_of}" if branch_of is not None else "")
    return hashlib.sha256(seed.encode("utf-8", "surrogatepass")).hexdigest()[:32]


def replayed(mgr, who: str | None, key: str | None, previous: str | None, conversation: str | None) -> str | None:
    """The response an earlier attempt of this request (the same Idempotency-Key) stored, or None.

    It is the one right after ``previous`` (in its chain, or first in the branch the key made off it), the
    latest of ``conversation``, or the first of the chain the key names; its note holds the key. A retry
    then reads it back instead of running the turn again.
    """
    if key is None:
        return None
    if conversation is not None:
        places = [(parse_conversation_id(conversation), None)]
    elif previous is not None:
        parsed = parse_response_id(previous)
        places = [(parsed[0], parsed[1] + 1), (new_sid(key, who, branch_of=previous), 0)] if parsed else []
    else:
        places = [(new_sid(key, who), 0)]
    for sid, k in places:
        found = _inspect(mgr, sid, _keyed_note(key, k), who) if sid else None
        if found is not None:
            return response_id(sid, found)
    return None


def _keyed_note(key: str, k: int | None):
    """A reader: note ``k`` (None: the latest) if it holds ``key`` and its response is not deleted."""

    def read(v: View) -> int | None:
        n = len(v.notes) - 1 if k is None else k
        keyed = 0 <= n < len(v.notes) and v.notes[n].get("key") == key
        return n if keyed and n not in v.extra.get("deleted", ()) else None

    return read


def not_found(what: str, value: Any, param: str | None) -> ApiError:
    code = {"response": "response_not_found", "conversation": "conversation_not_found", "previous response":
            "previous_response_not_found", "item": "item_not_found"}[what]
    return ApiError(404, f"{what} {str(value)[:200]!r} not found", type="invalid_request_error", param=param,
                    code=code)


def thinking_switch(template) -> bool:
    """Whether the template renders ``enable_thinking`` (Qwen3's switch): found by rendering, once per template."""
    name = getattr(template, "name", "")
    if name not in _SWITCH:
        m = [{"role": "user", "content": "x"}]
        try:
            _SWITCH[name] = (template.messages2prompt(m, enable_thinking=False)
                             != template.messages2prompt(m, enable_thinking=True))
        except Exception:  # noqa: BLE001 - a template that refuses the keyword has no switch
            _SWITCH[name] = False
    return _SWITCH[name]


@attrs.frozen
class Want:
    """What a request wants the session's frame to be for its turn (its input aside)."""

    instructions: str | None
    tools: list[dict] | None
    thinking: bool | None  # None: the template's default
    overflow: str


@attrs.frozen
class Plan:
    """Where a request's turn runs: the session, the new response's index, its first input item's serial."""

    sid: str
    k: int
    serial: int
    expect: int | None = None  # the version the decision was made on (None: a session made for it)
    created: bool = False  # made for this request: ended if the turn does not start (a one-off: gone with it)
    queued: list = attrs.field(factory=list)  # a conversation's items the model has not seen, sent first
    last: dict | None = None  # the refs of the session's last note: {"instructions": (k, value), ...}
    conversation: str | None = None
    oneoff: OneOff | None = None  # store=false: the session the turn runs on, gone with it (``sid`` is its id)

    @property
    def target(self) -> str | OneOff:
        """What the turn runs on: the one-off, else the stored session ``sid``."""
        return self.sid if self.oneoff is None else self.oneoff


def resolve(notes: list, k: int, key: str) -> tuple[int, Any]:
    """(index of the note that holds it, value) of a carried field of note ``k``."""
    value = notes[k].get(key)
    if isinstance(value, dict) and "ref" in value:
        return value["ref"], notes[value["ref"]].get(key)
    return k, value


def carried(notes_last: dict | None, key: str, value: Any) -> Any:
    """What a new note holds for a carried field: a reference when the last note has the same value."""
    if notes_last is not None and key in notes_last and notes_last[key][1] == value and value is not None:
        return {"ref": notes_last[key][0]}
    return value


def _refs(notes: list) -> dict | None:
    if not notes:
        return None
    k = len(notes) - 1
    return {key: resolve(notes, k, key) for key in CARRIED}


def count_below(removed: list[int], serial: int) -> int:
    """How many items there are now before ``serial``."""
    return serial - bisect.bisect_left(removed, serial)


# ---------------------------------------------------------------------------------------------- item names
class Names:
    """The ids of a session's items: item ``i`` is named ``(sid, serial)``, as :mod:`.items` spells it.

    A branch's first items are copies of its ancestry's, and keep the ids they were returned with: ``origin``
    lists them as runs ``[sid, first serial, count]`` (a conversation's deleted items split its runs). The
    session's own items follow, numbered by :class:`~.items.Serials`. Stored with the branch, so that its names
    do not depend on its ancestors still being there, or unchanged.
    """

    def __init__(self, sid: str, origin: list | None, removed: list[int] | None):
        self.sid, self.origin, self.serials = sid, origin or [], Serials(removed)
        self.removed = self.serials.removed
        self.starts, self.inherited = [], 0  # where each run starts; how many items the origin names
        for _, _, count in self.origin:
            self.starts.append(self.inherited)
            self.inherited += count

    def of(self, i: int) -> tuple[str, int]:
        """(session id, serial) of item ``i``."""
        if i < self.inherited:
            j = bisect.bisect_right(self.starts, i) - 1
            sid, serial, _ = self.origin[j]
            return sid, serial + i - self.starts[j]
        return self.sid, self.serials.serial(i)

    def index(self, sid: str, serial: int) -> int | None:
        """Where the item ``(sid, serial)`` is (a deleted own item: where the next one is), None: not here."""
        for start, (run_sid, first, count) in zip(self.starts, self.origin):
            if run_sid == sid and first <= serial < first + count:
                return start + serial - first
        if sid != self.sid:
            return None
        at = count_below(self.removed, serial)
        return at if at >= self.inherited else None

    def runs(self, n: int) -> list[list]:
        """The origin of a branch holding the first ``n`` items: runs naming them as they are named here."""
        runs, i = [], 0
        for sid, first, count in self.origin:
            if i == n:
                break
            runs.append([sid, first, min(count, n - i)])
            i += runs[-1][2]
        while i < n:
            serial = self.serials.serial(i)
            later = bisect.bisect_right(self.removed, serial)
            gap = self.removed[later] - serial if later < len(self.removed) else n - i
            runs.append([self.sid, serial, min(gap, n - i)])
            i += runs[-1][2]
        return runs


# ---------------------------------------------------------------------------------------------- reads
def read_response(k: int):
    """A reader (for ``mgr.inspect``) of response ``k``: its note and the session around it, or None."""

    def read(v: View) -> dict | None:
        extra, notes = v.extra, v.notes
        if extra.get("kind") not in KINDS or k >= len(notes) or k in extra.get("deleted", ()):
            return None
        note, removed, head = notes[k], extra.get("removed") or [], extra.get("head", 0)
        m = head + count_below(removed, note["e"])
        stale = any(n > k and s < note["e"] for n, s in extra.get("cuts", ()))
        latest = (extra["kind"] == "responses" and k == len(notes) - 1 and v.messages == m
                  and not extra.get("queue"))
        return {"version": v.version, "note": note, "m": m, "head": head, "stale": stale, "latest": latest,
                "refs": _refs(notes), "template": v.session.template, "kind": extra["kind"], "notes": len(notes),
                "origin": extra.get("origin"), "removed": removed}

    return read


def read_conversation(v: View) -> dict | None:
    extra = v.extra
    if extra.get("kind") != "conversation":
        return None
    queue = list(extra.get("queue") or ())
    items = v.messages - extra.get("head", 0) + len(queue)
    return {"version": v.version, "k": len(v.notes), "serial": Serials(extra.get("removed")).serial(items),
            "queue": queue, "refs": _refs(v.notes), "template": v.session.template}


# ---------------------------------------------------------------------------------------------- planning
def plan(mgr, who: str | None, previous: str | None, conversation: str | None, store: bool, want: Want,
         check, key: str | None = None) -> Plan:
    """Where the request's turn runs (blocking: call it from a worker). ``check(template)`` refuses
    what the session's template cannot do, before anything is created."""
    if conversation is not None:
        sid = parse_conversation_id(conversation)
        info = _inspect(mgr, sid, read_conversation, who) if sid else None
        if info is None:
            raise not_found("conversation", conversation, "conversation")
        check(info["template"])
        return Plan(sid, info["k"], info["serial"], info["version"], queued=info["queue"], last=info["refs"],
                    conversation=conversation)
    if previous is None:
        template = mgr.default_template
        check(template)
        head = int(want.instructions is not None or template.default_system is not None)
        extra = {"kind": "responses", "head": head}
        if not store:
            oneoff = mgr.oneoff(who, system=want.instructions, tools=want.tools, extra=extra)
            return Plan(oneoff.session_id, 0, 0, created=True, oneoff=oneoff)
        sid = mgr.create(new_sid(key, who), who, system=want.instructions, tools=want.tools, extra=extra)
        return Plan(sid, 0, 0, created=True)
    parsed = parse_response_id(previous)
    info = _inspect(mgr, parsed[0], read_response(parsed[1]), who) if parsed else None
    if info is None:
        raise not_found("previous response", previous, "previous_response_id")
    if info["stale"]:
        raise ApiError(409, f"response {previous!r}: items of its conversation were deleted since: its state is "
                            "gone", param="previous_response_id", code="response_state_gone")
    check(info["template"])
    if not store:
        return _aside(mgr, who, previous, info)
    if info["latest"]:
        return Plan(parsed[0], info["notes"], info["note"]["e"], info["version"], last=info["refs"])
    return _branch(mgr, who, previous, info, key)


def _aside(mgr, who: str | None, previous: str, info: dict) -> Plan:
    """A ``store: false`` continuation of the response ``previous``: a one-off copy of its session up to that
    response (the stored chain is only read)."""
    sid, extra = parse_response_id(previous)[0], {"kind": "responses", "head": info["head"]}
    oneoff = mgr.oneoff(who, extra=extra, parent=sid, at=info["m"])
    return Plan(oneoff.session_id, 0, info["m"] - info["head"], created=True, oneoff=oneoff)


def _branch(mgr, who: str | None, previous: str, info: dict, key: str | None) -> Plan:
    """A new session holding the conversation up to the response ``previous`` (``info`` describes it); with an
    Idempotency-Key its id derives from the key, so that a retry finds it (:func:`replayed`)."""
    sid = parse_response_id(previous)[0]
    origin = Names(sid, info["origin"], info["removed"]).runs(info["m"] - info["head"])
    extra = {"kind": "responses", "head": info["head"], "origin": origin}
    try:
        branch = mgr.fork(sid, new_sid(key, who, branch_of=previous), who, at=info["m"], extra=extra)
    except SessionExists:  # an earlier attempt made the branch but its turn never landed: start another
        branch = mgr.fork(sid, new_sid(), who, at=info["m"], extra=extra)
    return Plan(branch, 0, info["m"] - info["head"], created=True)


def _inspect(mgr, sid: str, read, who: str | None):
    try:
        return mgr.inspect(sid, read, who)
    except SessionNotFound:
        return None


def branch_after_busy(mgr, who: str | None, previous: str, key: str | None = None) -> Plan:
    """A chain's latest response is being continued by another request: this one branches off it."""
    sid, k = parse_response_id(previous)
    info = _inspect(mgr, sid, read_response(k), who)
    if info is None:
        raise not_found("previous response", previous, "previous_response_id")
    return _branch(mgr, who, previous, info, key)


# ---------------------------------------------------------------------------------------------- the turn's edit
def edit_for(want: Want, tokenizer: Any, consume_queue: bool):
    """The ``edit`` of the turn: the session's system prompt, tools, thinking switch and overflow policy
    as the request wants them (an edited copy, whose delta resets when what is rendered changed), and a
    conversation's queue emptied (its items are the turn's first messages). O(1) when nothing changes."""

    def edit(v: View) -> tuple[Session | None, dict | None] | None:
        session, extra = v.session, v.extra
        head = extra.get("head", 0)
        first = session.first_message() if head else None
        current = first["content"] if first else None
        if want.instructions is not None:
            system = want.instructions
        else:
            system = session.template.default_system if head else None
        kwargs = dict(session.template_kwargs)
        kwargs.pop("enable_thinking", None)
        if want.thinking is not None:
            kwargs["enable_thinking"] = want.thinking
        reasons = [why for why, changed in (
            ("the instructions changed", system != current),
            ("the tools changed", (want.tools or None) != (session.tools or None)),
            ("the reasoning setting changed", kwargs != session.template_kwargs)) if changed]
        new_extra = {**extra, "queue": []} if consume_queue and extra.get("queue") else None
        if not reasons and want.overflow == session.overflow:
            return None if new_extra is None else (None, new_extra)
        data = session.to_dict()
        if system != current:
            messages = data["messages"][1:] if head else data["messages"]
            data["messages"] = ([{"role": "system", "content": system}] if system is not None else []) + messages
            data["system"] = system
            new_extra = {**(new_extra or extra), "head": int(system is not None)}
        data.update(tools=want.tools, template_kwargs=kwargs, overflow=want.overflow)
        if reasons and session.step:
            return restored(data, tokenizer, "; ".join(reasons)), new_extra
        return Session.from_dict(data, tokenizer=tokenizer), new_extra

    return edit


def note_for(p: Plan, n_input: int, *, model: str, previous: str | None, want: Want, request: dict,
             idempotency_key: str | None = None) -> tuple[dict, dict]:
    """What the turn notes (compact: fields equal to the last note's by reference, ``prev`` only when it is
    not the chain's previous response), and the same note whole, as a response object reads it."""
    whole = {"s": p.serial, "e": p.serial + n_input + 1, "at": round(time.time(), 3), "model": model,
             "prev": previous, "conv": p.conversation, "req": request, "instructions": want.instructions,
             "tools": want.tools}
    note = {"s": whole["s"], "e": whole["e"], "at": whole["at"]}
    if idempotency_key:  # a retry of this request finds the response by it (replayed)
        note["key"] = idempotency_key
    if previous is not None and not (p.k and previous == response_id(p.sid, p.k - 1)):
        note["prev"] = previous
    for key in CARRIED:
        if whole[key] is not None:
            note[key] = carried(p.last, key, whole[key])
    return note, whole


def expanded(v: View, sid: str, k: int) -> dict:
    """Note ``k`` whole: its carried fields resolved, its previous response and conversation named."""
    notes, extra = v.notes, v.extra
    note = {**notes[k], **{key: resolve(notes, k, key)[1] for key in CARRIED}}
    if "prev" not in note:
        note["prev"] = response_id(sid, k - 1) if k and extra.get("kind") == "responses" else None
    note["conv"] = conversation_id(sid) if extra.get("kind") == "conversation" else None
    return note
