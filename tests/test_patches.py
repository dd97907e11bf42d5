"""Snapshot patches: applying what a session says it changed gives exactly its new snapshot."""
from __future__ import annotations

import json

import attrs
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import lmchat
from lmchat import Session, SessionPolicy
from lmchat.session import patches

from . import tokenizers_fixtures as tf
from .hypothesis_profiles import examples

OPS = st.lists(st.tuples(st.sampled_from(["turn", "turn", "cut", "undo", "reopen", "reset", "bad", "reload"]),
                         st.text(alphabet="ab <|>\n中", max_size=12)), min_size=1, max_size=25)


def json_copy(value):
    return json.loads(json.dumps(value))


def as_constructed(held):
    """What Held's constructor makes of the values a live one holds: its converters run there only (Held has no
    setattr hooks), so a value assigned later in another type (a list for a tuple) would differ."""
    return type(held)(**{a.name: getattr(held, a.name) for a in attrs.fields(type(held)) if a.init})


@settings(max_examples=examples(40), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(name=st.sampled_from(lmchat.template_names()), tokens=st.booleans(), overflow=st.sampled_from(
    ["error", "truncate", "shift"]), drift=st.sampled_from(["rewind", "reset", "keep"]), ops=OPS)
def test_changes_patch_the_saved_snapshot_into_the_current_one(name, tokens, overflow, drift, ops):
    tok = tf.smollm2() if tokens else None
    session = Session(name, tokenizer=tok,
                      policy=SessionPolicy(session_len=200 if tokens else None, overflow=overflow, drift=drift))
    stored = json_copy(session.to_dict())
    session.mark_saved()
    for op, text in ops:
        try:
            if op in ("turn", "cut"):
                session.prompt(text or ".", max_new_tokens=8)
                ids = tok.encode("H" + text, add_special_tokens=False) if tok and op == "cut" else None
                session.commit("H" + text, token_ids=ids, stop="" if op == "cut" else None)
            elif op == "undo":
                session.undo()
            elif op == "reopen":
                session.reopen()
                session.commit(text)
            elif op == "reset":
                session.reset()
            elif op == "reload":  # a manager restarted, or another replica: it goes on from the stored snapshot
                if not session.pending:
                    session = Session.from_dict(stored, tokenizer=tok)
                    session.mark_saved()
            else:
                session.prompt({"not": "text"})
        except (ValueError, lmchat.SessionError):
            pass  # refused: the session is as it was, and so must the patch say
        assert session._held == as_constructed(session._held)
        # turns is counted on from the last count: every edit above must still give the full count
        assert session.turns == sum(m["role"] == "assistant" for m in session.transcript())  # dropped answers count too
        if session.pending:
            continue
        patch = json_copy(session.changes())
        stored = patches.apply(stored, patch)
        session.mark_saved()
        assert stored == json_copy(session.to_dict())


def test_a_turn_patch_does_not_grow_with_the_history():
    session = Session("qwen2.5", tokenizer=tf.smollm2())
    session.mark_saved()
    sizes = []
    for i in range(200):
        session.prompt(f"question {i}")
        session.commit(f"answer {i}")
        sizes.append(len(json.dumps(session.changes())))
        session.mark_saved()
    assert max(sizes[-20:]) <= max(sizes[:20]) + 64  # the turn number's digits, not the history


def _objects(value) -> list:
    """Every dict and list inside ``value`` (what a copy must not share)."""
    if isinstance(value, dict):
        return [value, *(o for v in value.values() for o in _objects(v))]
    if isinstance(value, list):
        return [value, *(o for v in value for o in _objects(v))]
    return []


JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
                    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner, max_size=4),
                    max_leaves=30)


@given(JSON)
def test_json_copy_is_an_equal_value_that_shares_no_container(value):
    from lmchat.messages import json_copy

    copied = json_copy(value)
    assert copied == value and json.dumps(copied) == json.dumps(value)
    originals = {id(o) for o in _objects(value)}
    assert not originals & {id(o) for o in _objects(copied)}


def test_json_copy_deep_copies_what_is_not_json():
    from lmchat.messages import json_copy

    inner = [1, 2]
    value = {"t": (inner, "x"), "s": {3}}
    copied = json_copy(value)
    assert copied == value and copied["t"][0] is not inner and copied["s"] is not value["s"]
