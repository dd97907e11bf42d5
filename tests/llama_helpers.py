"""What the tests of the llamacpp backend share: turns taken as the REPL and the session manager take them
(prompt, generate, commit: :mod:`.backend_turns`), and the reference,
llama-cpp-python's own ``Llama.generate`` on the same GGUF.

Threads default to 1 (``LMCHAT_TEST_THREADS``): on a machine whose cores are busy with other work,
llama.cpp's OpenMP threads waiting for each other make 2 threads many times slower than 1.
"""
from __future__ import annotations

import os
import time

import lmchat
from lmchat.backends import GenerationRequest, SamplingParams

from .backend_turns import commit

THREADS = int(os.environ.get("LMCHAT_TEST_THREADS", "1"))
QUESTIONS = ["What is 2 + 2?", "Hi!", "Name three colours.", "What is the capital of Italy?"]
STOPS = ("<|im_end|>", "<|endoftext|>")


#: (model file, context size, ids, n) -> the reference's answer from an empty cache: what a prefill computes depends
#: on nothing else (test_the_reference_is_what_whole_prefills_compute), so a worker computes each answer once; the
#: hostile-file cases, for one, all ask the same prompt of a damaged cache and compare with the same answer
_ANSWERS: dict[tuple, list[int]] = {}


def llama_greedy(llm, ids, n=24, fresh=False):
    """The greedy answer a prefill computes, by llama-cpp-python's own ``Llama.eval`` (``fresh``: without the
    prefix it cached from earlier calls): the prompt, then each new id beside the one before it, fed again. Two
    rows, never one: llama.cpp computes a sequence's single row with another attention kernel than two or more
    (lmchat/backends/llamacpp/probe.py), so ``Llama.generate``'s one-row steps are not what a prefill of the
    answer computes; two-row steps are, bit for bit (tests/test_batch_invariance.py checks it against whole
    prefills)."""
    if not fresh:  # what it answers may depend on what the cache held
        return _computed(llm, ids, n, fresh)
    key = (llm.model_path, llm.n_ctx(), tuple(ids), n)
    if key not in _ANSWERS:
        _ANSWERS[key] = _computed(llm, ids, n, fresh)
    return list(_ANSWERS[key])


def _computed(llm, ids, n, fresh):
    import numpy as np
    from llama_cpp import llama_cpp as L

    if fresh:
        llm.reset()
    held = list(llm.input_ids[:llm.n_tokens])
    keep = 0
    while keep < min(len(held), len(ids) - 2) and held[keep] == ids[keep]:
        keep += 1
    llm.n_tokens = keep  # eval cuts the cache there: at least two ids are computed
    llm.eval(ids[keep:])
    out = []
    while True:
        logits = np.ctypeslib.as_array(L.llama_get_logits_ith(llm.ctx, -1), shape=(llm.n_vocab(),))
        token = int(np.argmax(logits))
        if llm.token_eos() == token or token in (0, 2, 4):
            break
        out.append(token)
        if len(out) == n:
            break
        previous = int(llm.input_ids[llm.n_tokens - 1])
        llm.n_tokens -= 1
        llm.eval([previous, token])
    return out


def new_session(backend, **kw):
    return lmchat.Session(backend.template_name, tokenizer=backend.tokenizer, **kw)


def greedy(n=24, stop=STOPS):
    return SamplingParams(temperature=0, max_new_tokens=n, stop=stop)


def turn(backend, session, content, params=None):
    """One turn: prompt, generate, commit. Returns (generated ids, last chunk, delta)."""
    delta = session.prompt(content)
    chunks = list(backend.generate(GenerationRequest.from_session(session, delta, params or greedy())))
    commit(backend, session, chunks)
    return [i for c in chunks for i in c.token_ids], chunks[-1], delta


def settled(backend, timeout: float = 120.0) -> dict:
    """Wait until the engine has settled every idle sequence (prefilled its decoded answer again, as it does
    while a client reads the answer) and return its stats: a test that counts prefilled ids then knows which
    of the two exact paths the next turn takes (before settling it prefills the answer itself)."""
    deadline = time.monotonic() + timeout
    while (stats := backend.stats())["unsettled_tokens"]:
        assert time.monotonic() < deadline, f"{stats['unsettled_tokens']} ids still unsettled"
        time.sleep(0.01)
    return stats


def decoded(ids, last):
    """How many of a turn's generated ids were fed one at a time (the last one never is, unless a stop
    word or the end marker, which are not in ``ids``, came after it)."""
    return len(ids) - (last.finish_reason != "stop")


def request_ids(session, ids, last):
    """The ids the engine was asked to hold for the turn just committed (before its answer)."""
    return session.context_ids[:len(session.context_ids) - len(ids) - (last.finish_reason == "stop")]


def converse(backend, questions=QUESTIONS, params=None, **kw):
    session = new_session(backend, **kw)
    outs = [turn(backend, session, q, params) for q in questions]
    backend.drop(session.session_id)
    return [o[0] for o in outs], outs, session


def reference_llama():
    """llama-cpp-python's own high-level API on the bundled GGUF, loaded as lmchat loads it, its attention the
    engine's (flash attention where the build computes it row by row: the two kernels add in other orders, so
    each is compared with itself) (close it)."""
    from llama_cpp import Llama

    from lmchat.backends.bundled import default_gguf
    from lmchat.backends.llamacpp._lib import lib, llama_without_amx, rowwise_flash_attn

    llama_without_amx()  # on an AMX CPU, llama-cpp-python's defaults crash
    return Llama(model_path=str(default_gguf()), n_ctx=4096, n_batch=512, n_threads=THREADS,
                 n_threads_batch=THREADS, flash_attn=rowwise_flash_attn(lib()), verbose=False)
