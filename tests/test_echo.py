"""The echo backend: deterministic answers, stop words, max_new_tokens, cancel, stateful counts."""
from __future__ import annotations

import threading

import pytest

import lmchat
from lmchat.backends import Backend, GenerationRequest, SamplingParams, get_backend
from lmchat.backends.echo import EchoBackend
from lmchat.errors import ConfigError

from . import tokenizers_fixtures as tf
from .backend_turns import commit


def run(backend, session, content, **params):
    """One turn: prompt, generate, commit; returns (text, last chunk, delta, all chunks)."""
    delta = session.prompt(content)
    request = GenerationRequest.from_session(session, delta, SamplingParams.from_template(session.template, **params))
    chunks = list(backend.generate(request))
    text = "".join(c.text for c in chunks)
    commit(backend, session, chunks)
    return text, chunks[-1], delta, chunks


def test_get_backend_builds_it_and_it_meets_the_protocol():
    backend = get_backend("echo")
    assert isinstance(backend, EchoBackend) and isinstance(backend, Backend)
    assert backend.tokenizer is None
    with pytest.raises(ConfigError, match="unknown backend 'nope'"):
        get_backend("nope")


def test_answers_the_last_user_message_word_by_word():
    backend, session = EchoBackend(), lmchat.Session("smollm2")
    text, last, _, chunks = run(backend, session, "Hello there, friend")
    assert text == "echo: Hello there, friend"
    assert [c.text for c in chunks[:-1]] == ["echo: ", "Hello ", "there, ", "friend"]
    assert (last.finish_reason, last.stop) == ("stop", None)  # its own end: the template's marker is committed
    assert (last.prefilled, last.reused) == (len(session.context) - len(text) - len("<|im_end|>"), 0)


def test_counts_like_a_stateful_engine_in_characters():
    backend, session = EchoBackend(), lmchat.Session("smollm2")
    run(backend, session, "one")
    _, last, delta, _ = run(backend, session, "two")
    # the engine holds the context and the answer; the end marker it never fed comes with the delta
    assert last.prefilled == len("<|im_end|>") + len(delta.text)
    assert last.reused + last.prefilled == len(session.context) - len("echo: two<|im_end|>")
    backend.drop(session.session_id)
    _, last, _, _ = run(backend, session, "three")
    assert last.reused == 0  # dropped: everything is prefilled again
    session.reset()
    _, last, delta, _ = run(backend, session, "four")
    assert delta.reset and last.reused == 0 and last.prefilled == len(delta.text)


def test_max_new_tokens_counts_words_and_stops_cut_across_pieces():
    backend, session = EchoBackend(), lmchat.Session("smollm2")
    text, last, _, _ = run(backend, session, "alpha beta gamma", max_new_tokens=2)
    assert (text, last.finish_reason) == ("echo: alpha ", "length")
    text, last, _, _ = run(backend, session, "alpha beta gamma", stop=["ta ga"])
    assert (text, last.finish_reason, last.stop) == ("echo: alpha be", "stop", "ta ga")


def test_with_a_tokenizer_it_streams_ids_that_commit_without_drift():
    tok = tf.smollm2()
    backend, session = EchoBackend(tokenizer=tok), lmchat.Session("smollm2", tokenizer=tok)
    text, last, _, chunks = run(backend, session, "Bonjour à tous 😀")
    ids = [i for c in chunks for i in c.token_ids]
    assert text == "echo: Bonjour à tous 😀" and backend.codec.decode(ids) == text
    assert last.prefilled == len(session.context_ids) - len(ids) - 1
    _, last, delta, _ = run(backend, session, "again")
    assert not delta.reset and last.prefilled == len(delta.token_ids) + 1
    text, last, _, chunks = run(backend, session, "one two three four", max_new_tokens=3)
    assert last.finish_reason == "length" and sum(len(c.token_ids) for c in chunks) == 3


def test_cancel_from_another_thread_keeps_the_partial_answer():
    backend, session = EchoBackend(delay=0.01), lmchat.Session("smollm2")
    delta = session.prompt(" ".join(f"w{i}" for i in range(500)))
    request = GenerationRequest.from_session(session, delta, SamplingParams.from_template(session.template))
    pieces, last = [], None
    for chunk in backend.generate(request):
        pieces.append(chunk.text)
        if len(pieces) == 3:
            canceller = threading.Thread(target=backend.cancel, args=(session.session_id,))
            canceller.start()
            canceller.join()
        last = chunk
    assert last.finish_reason == "cancelled" and last.stop is None
    assert "".join(pieces) == "echo: w0 w1 "


def test_a_request_without_a_user_message_echoes_the_delta():
    session = lmchat.Session("smollm2")
    delta = session.prompt("hi")
    request = GenerationRequest(session_id="s", delta=delta, params=SamplingParams())
    assert "".join(c.text for c in EchoBackend().generate(request)) == "echo: " + delta.text
