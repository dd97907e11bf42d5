"""Replicas behind HAProxy: what routing costs, and the turn after a conversation's replica dies.

Starts what deploy/local.sh starts (redis-server, ``--replicas`` ``lmchat serve`` llama.cpp replicas on the
bundled model with one Redis store and one ``--kv-shared`` directory and key, HAProxy on deploy/haproxy.cfg), one
thread each (``--kv redis``: the shared tier in that Redis, database 1), plus a cold server (no host or disk
tier) as the reference. Then:

* routing: ``GET /health`` directly and through HAProxy, ``--pings`` times each, alternating (the balancer's
  own cost per request, no turn);
* ``--rounds`` times: a conversation of about ``--tokens`` prompt tokens (a long system prompt unique to the round,
  two turns) through the balancer (``X-Session-Id``); kill -9 the replica that answered it; the next turn through
  the balancer (answered by another replica, its prompt from the shared tier), against the same history sent to
  the cold server (a re-prefill of all of it). The killed replica is started again before the next round; with
  ``--replicas 1`` before that turn (a redeploy: the new process answers it from the shared tier).

The numbers are the client's wall-clock seconds (the failover turn includes HAProxy's retry and redispatch) and
the answering replica's own counts (``usage.prompt_tokens_details``). More replicas cannot be faster on a 2-core
machine: no throughput is reported.
"""
from __future__ import annotations

import argparse
import os
import secrets
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from .common import ROOT, answering, save, table

RULE = "Rule {i}: answer the customer politely, name the part and its price, and keep every answer short."


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Deployment:
    """redis-server, the replicas, the cold server and HAProxy, in a temporary directory."""

    def __init__(self, replicas: int, ctx: int, kv: str) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="lmchat-bench-scaling-"))
        self.procs: dict[str, subprocess.Popen] = {}
        self.ports: dict[str, int] = {}
        self.ctx = ctx
        key = self.dir / "kv.key"
        key.write_text(secrets.token_hex(32) + "\n")
        key.chmod(0o600)
        redis_port = free_port()
        self.procs["redis"] = subprocess.Popen(
            ["redis-server", "--port", str(redis_port), "--bind", "127.0.0.1", "--dir", str(self.dir), "--save", ""],
            stdout=subprocess.DEVNULL)
        tier = ["--kv-shared"] if kv == "dir" else ["--kv-shared", f"redis://127.0.0.1:{redis_port}/1"]
        self.shared = ["--store", f"redis://127.0.0.1:{redis_port}/0", "--kv-dir", str(self.dir / "kv"), *tier,
                       "--kv-key-file", str(key)]
        self.names = [f"replica-{i}" for i in range(1, replicas + 1)]
        for name in self.names:
            self.start(name)
        self.start("cold", ["--store", "memory", "--kv-host-mb", "0", "--kv-disk-mb", "0"])
        for name in [*self.names, "cold"]:
            answering(self.procs[name], self.ports[name], name, 300)
        config = self.dir / "haproxy.cfg"
        config.write_text((ROOT / "deploy" / "haproxy.cfg").read_text() + "".join(
            f"    server {n} 127.0.0.1:{self.ports[n]}\n" for n in self.names))
        self.ports["haproxy"], self.ports["stats"] = free_port(), free_port()
        env = {**os.environ, "LMCHAT_LB_BIND": f"127.0.0.1:{self.ports['haproxy']}",
               "LMCHAT_LB_STATS_BIND": f"127.0.0.1:{self.ports['stats']}"}
        self.procs["haproxy"] = subprocess.Popen(["haproxy", "-db", "-f", str(config)], env=env,
                                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        answering(self.procs["haproxy"], self.ports["haproxy"], "haproxy", 30)

    def start(self, name: str, args: list[str] | None = None) -> None:
        self.ports.setdefault(name, free_port())
        env = {**os.environ, "PYTHONPATH": str(ROOT), "LMCHAT_DATA_DIR": str(self.dir / f"data-{name}"),
               "LMCHAT_API_KEYS": ""}
        command = [sys.executable, "-m", "lmchat", "serve", "--backend", "llamacpp", "--threads", "1",
                   "--ctx", str(self.ctx), "--sessions", "2", "--port", str(self.ports[name]),
                   "--log-level", "warning", "--replica-name", name, *(self.shared if args is None else args)]
        self.procs[name] = subprocess.Popen(command, stdout=subprocess.DEVNULL, cwd=ROOT, env=env)

    def restart(self, client, name: str) -> None:
        self.start(name)
        answering(self.procs[name], self.ports[name], name, 300)
        self.routed(client, name)

    def routed(self, client, name: str, seconds: float = 60) -> None:
        """Wait until HAProxy's health checks see ``name`` up (a restarted replica takes its conversations back
        only then: a round started before would begin on another)."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            rows = client.get(f"{self.url('stats')}/;csv").text.splitlines()
            if any(r.startswith(f"replicas,{name},") and ",UP," in r for r in rows):
                return
            time.sleep(0.2)
        raise RuntimeError(f"HAProxy did not see {name} up")

    def url(self, name: str) -> str:
        return f"http://127.0.0.1:{self.ports[name]}"

    def kill(self, name: str) -> None:
        self.procs[name].send_signal(signal.SIGKILL)
        self.procs[name].wait()

    def close(self) -> None:
        for proc in reversed(self.procs.values()):
            if proc.poll() is None:
                proc.terminate()
        for proc in self.procs.values():
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
        shutil.rmtree(self.dir, ignore_errors=True)


def turn(client, url: str, session: str | None, history: list[dict], max_tokens: int) -> dict:
    headers = {"X-Session-Id": session} if session else {}
    started = time.perf_counter()
    r = client.post(f"{url}/v1/chat/completions", headers=headers, timeout=900,
                    json={"model": "m", "messages": history, "temperature": 0, "max_tokens": max_tokens})
    seconds = time.perf_counter() - started
    r.raise_for_status()
    body = r.json()
    details = body["usage"]["prompt_tokens_details"]
    return {"seconds": seconds, "replica": r.headers.get("x-lmchat-replica"),
            "prompt": body["usage"]["prompt_tokens"], "cached": details["cached_tokens"],
            "source": details["cached_from"], "miss": details["cache_miss_reason"],
            "answer": body["choices"][0]["message"]["content"]}


def pings(client, deployment: Deployment, n: int) -> dict:
    direct, routed = [], []
    for _ in range(n):
        for url, out in ((deployment.url(deployment.names[0]), direct), (deployment.url("haproxy"), routed)):
            started = time.perf_counter()
            client.get(f"{url}/health").raise_for_status()
            out.append(time.perf_counter() - started)
    return {"direct_ms": round(1000 * statistics.median(direct), 2),
            "haproxy_ms": round(1000 * statistics.median(routed), 2)}


def run_round(client, deployment: Deployment, k: int, args: argparse.Namespace) -> dict:
    rules = max(1, args.tokens // 22)  # a rule is about 22 tokens of the bundled model
    system = f"Shop {k}-{secrets.token_hex(4)}. " + " ".join(RULE.format(i=i) for i in range(1, rules + 1))
    history = [{"role": "system", "content": system}]
    session = f"bench-{k}-{secrets.token_hex(4)}"
    lb = deployment.url("haproxy")
    turns = []
    for question in ("Do you repair brakes?", "How much does it cost?"):
        history.append({"role": "user", "content": question})
        turns.append(turn(client, lb, session, history, args.max_tokens))
        history.append({"role": "assistant", "content": turns[-1]["answer"]})
    victim = turns[-1]["replica"]
    time.sleep(0.5)  # the last turn's state is written just after it ends
    deployment.kill(victim)
    history.append({"role": "user", "content": "And gears?"})
    alone = len(deployment.names) == 1  # no other replica: the next turn waits for it to be started again
    if alone:
        deployment.restart(client, victim)
    after = turn(client, lb, session, history, args.max_tokens)
    cold = turn(client, deployment.url("cold"), None, history, args.max_tokens)
    if not alone and k + 1 < args.rounds:
        deployment.restart(client, victim)
    return {"first_turn": turns[0], "victim": victim, "after_kill": after, "cold": cold,
            "same_answer": after["answer"] == cold["answer"]}


def report(result: dict) -> str:
    rows = [[r["victim"], r["after_kill"]["replica"], r["after_kill"]["prompt"],
             f"{r['after_kill']['cached']} ({r['after_kill']['source']})", round(r["after_kill"]["seconds"], 2),
             round(r["cold"]["seconds"], 2), round(r["cold"]["seconds"] / r["after_kill"]["seconds"], 1),
             r["same_answer"]] for r in result["rounds"]]
    out = table(["killed", "answered by", "prompt tokens", "from the shared tier", "turn after the kill (s)",
                 "re-prefill on a cold server (s)", "x faster", "same answer"], rows)
    ping = result["routing"]
    return out + (f"\n\nshared KV tier: {result['args']['kv']}; routing: GET /health {ping['direct_ms']} ms "
                  f"direct, {ping['haproxy_ms']} ms through HAProxy "
                  f"(medians of {result['pings']}); load average {result['load_before']} before, "
                  f"{result['load_after']} after")


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m bench scaling", description=__doc__.split("\n\n")[0])
    p.add_argument("--replicas", type=int, default=2)
    p.add_argument("--tokens", type=int, default=2000, help="the conversation's prompt tokens, about")
    p.add_argument("--ctx", type=int, default=8192, help="each replica's --ctx (two sequences)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--max-tokens", type=int, default=16)
    p.add_argument("--pings", type=int, default=200)
    p.add_argument("--kv", choices=["dir", "redis"], default="dir", help="the shared KV tier: a directory, or Redis")
    args = p.parse_args(argv)
    for tool in ("redis-server", "haproxy"):
        if shutil.which(tool) is None:
            print(f"{tool} is missing (apt-get install {tool})", file=sys.stderr)
            return 1
    import httpx

    load_before = os.getloadavg()
    deployment = Deployment(args.replicas, args.ctx, args.kv)
    try:
        with httpx.Client() as client:
            routing = pings(client, deployment, args.pings)
            rounds = [run_round(client, deployment, k, args) for k in range(args.rounds)]
    finally:
        deployment.close()
    result = {"args": vars(args), "routing": routing, "pings": args.pings, "rounds": rounds,
              "load_before": [round(x, 1) for x in load_before], "load_after": [round(x, 1) for x in os.getloadavg()]}
    # scaling.json and scaling-redis.json: the first runs, two replicas, before the count was in the name
    save("scaling" + ("" if args.kv == "dir" else f"-{args.kv}") + f"-{args.replicas}", result)
    print(report(result))
    return 0
