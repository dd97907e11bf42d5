"""Prefix KV cache over HTTP: ``lmchat serve`` vs llama.cpp's ``llama-server`` vs llama-cpp-python's server.

Same GGUF (default: the bundled SmolLM2), same thread count, greedy (temperature 0, no repetition penalty),
short answers (``--max-tokens``), OpenAI ``/v1/chat/completions`` streamed over HTTP on 127.0.0.1 (httpx; the
time to first token is the time to the first chunk carrying content). The servers never run at the same time:
each workload starts each server fresh (its own process, a new temporary data dir), measures it and
stops it, then the next server; the order of the servers rotates from one workload to the next.

Rounds (``--repeat N``, default 1): each workload runs N times on each server, the servers taking turns in
each round, the order rotated from one round to the next (round 1: A, B, C; round 2: B, C, A). Every figure
printed and every target checked is the median over the rounds of that figure (a per-turn cell's counts and
TTFT, a total, a percentile, a wall time, a ratio, an RSS); the errors are every round's. The load average
(1, 5 and 15 minutes) at each round's start is printed then and heads the tables: figures mean little
without the load they were measured under. The JSON (bench/results/kv_cache.json, ``kv_cache_quick.json``
with ``--quick``, ``NAME.json`` with ``--out NAME``) keeps
``results[workload][server] = {"median": ..., "rounds": [one result a round]}``,
``load_averages[workload]`` (a triple a round) and ``answers_equal_to_llama_server``.

Answers: every server decodes greedily without a penalty, so each answer should be llama-server's token for
token. For ``stateless``, ``stateless_think`` and ``branch`` the report counts lmchat's answer texts equal to
llama-server's of the same round, turn by turn. Informational, not a target: llama-server runs flash
attention (``-fa auto``), whose sums may round differently, and once one answer differs, the histories (so
the later prompts) differ too.

Workloads (``--only NAME``, repeatable):

* ``stateless``: one client resending its whole history every turn, no session id, ``--turns`` turns:
  per turn the prompt tokens, the cached ones and the evaluated ones (prompt - cached), and TTFT;
* ``stateless_think``: the same, the client taking ``--think`` seconds (default 0.5) between an answer and
  its next request (a person reading, an agent running a tool): lmchat's engine settles the answer meanwhile;
* ``shared_system``: ``--conversations`` stateless conversations at once (all in flight), sharing a
  ~1,000-token system prompt, ``--shared-turns`` turns each: prompt tokens evaluated, TTFT p50/p99, wall;
* ``sessions``: ``--session-conversations`` concurrent conversations with session ids (lmchat: header
  ``X-Session-Id`` with the full history resent; the others: the same resent history), ``--session-turns``
  turns each: wall time, TTFT p50/p99, the server process's CPU seconds;
* ``branch``: a ``--turns``-turn stateless conversation, then a request whose history is its first
  ``--branch-at`` turns and a new question: that request's TTFT over the median TTFT of turns 2..N;
* ``restart``: a ~``--restart-tokens``-token conversation (lmchat: with a session id), one more turn
  (warm), a graceful stop (SIGTERM) and a start on the same data dir, the next turn (restart); then a
  fresh server on a new data dir answers exactly that last request (re-prefill). Ratio restart / re-prefill;
* ``memory``: RSS after the start and after a load (sessions with a shared ~1,000-token system prompt),
  the peak RSS (VmHWM), and lmchat's ``GET /metrics`` lines naming ``kv_``, ``cache`` or ``tokens_``.

Counts: lmchat's ``usage.prompt_tokens_details.cached_tokens``, and the ``settled`` column: answer
tokens lmchat's engine prefilled again with spare capacity (its ``lmchat_kv_settled_tokens_total``; the
llama.cpp servers keep the keys and values they decoded, so they have no such work); llama-server's
``timings`` (``prompt_n`` evaluated, ``cache_n`` reused); llama-cpp-python reports no usage when
streaming, so its counts come from its log (``prefix-match hit, remaining N`` and ``prompt eval time =
... / N tokens``), one request at a time (it serves one request at a time; its concurrent workloads report
totals only).

Server options: slots = 4 (``--slots``), 8 in ``sessions``; KV per slot 4,096 tokens.
lmchat: ``lmchat serve --port P --threads T --sessions SLOTS --log-level warning`` (its other defaults:
the llamacpp backend, the bundled model, an SQLite store in ``$LMCHAT_DATA_DIR``, a temporary dir here).
llama-server (``bench/build_llama_server.sh`` builds it): ``-m GGUF --host 127.0.0.1 --port P -t T -tb T
-c SLOTS*4096 -np SLOTS --cache-reuse 256`` and its defaults (prompt cache in RAM ``--cache-ram`` 8192 MiB,
jinja template from the GGUF), requests with ``cache_prompt: true``. llama-cpp-python:
``python -m llama_cpp.server --model GGUF --n_ctx 4096 --n_threads T --n_threads_batch T
--interrupt_requests False`` (one context, reused up to the longest common prefix; without
``--interrupt_requests False`` a new request aborts the running one).
"""
from __future__ import annotations

import argparse
import asyncio
import atexit
import contextlib
import importlib.util
import json
import math
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from .common import RESULTS, ROOT, _cpu_model, save, table

SERVERS = ("lmchat", "llama-server", "llama-cpp-python")
WORKLOADS = ("stateless", "stateless_think", "shared_system", "sessions", "branch", "restart", "memory")
LLAMA_SERVER = Path(os.environ.get("LLAMA_SERVER_HOME", Path.home() / ".cache" / "lmchat" / "llama-server")) \
    / "bin" / "llama-server"
SLOT_CTX = 4096
READY_SECONDS = 300
STOP_SECONDS = 30
#: llama-cpp-python's server, loading its model as lmchat does on an Intel AMX CPU (elsewhere a no-op)
LCP_SERVER = ("import runpy\ntry:\n    from lmchat.backends.llamacpp._lib import llama_without_amx\n"
              "    llama_without_amx()\nexcept ImportError:\n    pass\n"
              "runpy.run_module('llama_cpp.server', run_name='__main__', alter_sys=True)")
LCP_MODULES = ("llama_cpp", "fastapi", "uvicorn", "sse_starlette", "starlette_context", "pydantic_settings")
#: llama-cpp-python's log (verbose, its server's default)
LCP_HIT = re.compile(r"Llama\.generate: (\d+) prefix-match hit, remaining (\d+) prompt tokens to eval")
LCP_FULL = "Llama.generate: full prompt already cached"
LCP_PERF = re.compile(r"prompt eval time =\s*[\d.]+ ms /\s*(\d+) tokens")

#: plain greedy on every server, so all three decode the same answers and the counts compare the same work:
#: lmchat gives the bundled model a repetition penalty of 1.2 (lmchat/backends/bundled.py) and
#: llama-cpp-python's server a repeat_penalty of 1.1 unless the request says otherwise
NO_PENALTY = {"lmchat": {"repetition_penalty": 1.0}, "llama-server": {"repeat_penalty": 1.0},
              "llama-cpp-python": {"repeat_penalty": 1.0}}

SYSTEM = ("You are a concise assistant. Answer every question in one short sentence, without lists, "
          "code or preamble, and never repeat the question.")
_TOPICS = ("opening hours", "allergens", "gluten-free bread", "custom cakes", "delivery areas", "refunds",
           "loyalty points", "catering orders", "seasonal menus", "gift cards")
#: ~1,000 tokens (SmolLM2's tokenizer), shared by every conversation of shared_system and memory
LONG_SYSTEM = ("You are the customer assistant of the Northwind Bakery, a chain of forty bakeries. "
               "Answer in one short sentence, politely, without lists or code. Follow these rules:\n" + "".join(
                   f"Rule {i}: when a customer asks about {_TOPICS[i % len(_TOPICS)]} at bakery number {i * 7 + 3}, "
                   f"say that the staff on shift {i % 3 + 1} can help between {8 + i % 4} and {17 + i % 3} o'clock, "
                   f"and mention the reference code NW-{1000 + i * 37}.\n" for i in range(18)))
_CITIES = ("Lisbon", "Oslo", "Kyoto", "Quito", "Accra", "Perth", "Tunis", "Lima", "Hanoi", "Riga")
_GOODS = ("apples", "copper wire", "coffee beans", "paper", "olive oil", "wool", "rice", "glass", "salt", "tea")


def question(conversation: int, turn: int) -> str:
    return (f"Conversation {conversation}, question {turn}: tell me one interesting fact about the number "
            f"{turn * 7 + conversation}, in one sentence.")


def document(tokens: int) -> str:
    """Shipping notes of about ``tokens`` tokens (SmolLM2's tokenizer: ~2.8 characters a token), to summarize."""
    notes, i = [], 0
    while sum(len(n) for n in notes) < tokens * 2.8:
        notes.append(f"Note {i}: shipment {i * 13 % 97} of {_GOODS[i % 10]} left {_CITIES[i % 10]} for "
                     f"{_CITIES[(i * 3 + 1) % 10]} on day {i + 1}, carrying {(i * 37) % 900 + 100} crates. ")
        i += 1
    return "Here are my shipping notes.\n" + "".join(notes) + "\nWhich city appears most often? One sentence."


# ---------------------------------------------------------------------------------------------- servers

def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


_LIVE: set = set()


def _kill_all() -> None:
    for server in list(_LIVE):
        server.kill()


atexit.register(_kill_all)


def _on_term(signum, frame):  # SIGTERM to the benchmark: finally blocks and atexit stop the servers
    raise SystemExit(128 + signum)


def _cpu_ticks() -> tuple[int, int]:
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return sum(fields[:8]), fields[3] + fields[4]  # all (without guest time), idle + iowait


def busy_cpus(seconds: float = 1.0) -> float | None:
    """CPUs that other processes keep busy (sampled while no server of ours runs)."""
    try:
        total0, idle0 = _cpu_ticks()
        time.sleep(seconds)
        total1, idle1 = _cpu_ticks()
    except (OSError, ValueError, IndexError):
        return None
    spent = total1 - total0
    return round((1 - (idle1 - idle0) / spent) * (os.cpu_count() or 1), 2) if spent > 0 else None


def wait_idle(args) -> float | None:
    """The CPUs other processes use now; waits up to ``--wait-idle`` seconds for it to fall below 0.25."""
    deadline = time.monotonic() + args.wait_idle
    busy = busy_cpus()
    while busy is not None and busy > 0.25 and time.monotonic() < deadline:
        busy = busy_cpus(2.0)
    if busy is not None and busy > 0.25:
        print(f"(machine busy: {busy:.2f} CPUs used by other processes)", end=" ", flush=True)
    BUSY.append(busy)
    return busy


BUSY: list = []
#: CPUs other processes used while a server was measured (machine busy time - the server's - this process's)
DURING: list = []


def busy_seconds() -> float | None:
    try:
        all_ticks, idle = _cpu_ticks()
    except (OSError, ValueError, IndexError):
        return None
    return (all_ticks - idle) / os.sysconf("SC_CLK_TCK")


def _amx_cpu() -> bool:
    try:
        return " amx_int8" in Path("/proc/cpuinfo").read_text()
    except OSError:
        return False


class Server:
    """One server process on a free loopback port, its output in a log file."""

    def __init__(self, kind: str, args, *, slots: int, data_dir: Path | None = None):
        self.kind, self.args, self.slots = kind, args, slots
        self.data_dir = data_dir or Path(tempfile.mkdtemp(prefix=f"kv-cache-{kind}-"))
        self.owns_dir = data_dir is None
        self.proc = self.log = None
        self.busy_before = None
        self.model = "default"
        self.options: list[str] = []

    def command(self) -> tuple[list[str], dict]:
        a, t = self.args, str(self.args.threads)
        env = {**os.environ, "OMP_NUM_THREADS": t, "PYTHONUNBUFFERED": "1"}
        if self.kind == "lmchat":
            self.options = ["--threads", t, "--sessions", str(self.slots)]
            if a.model:
                self.options += ["--model", a.model]
            env.update(LMCHAT_DATA_DIR=str(self.data_dir), XDG_CACHE_HOME=str(self.data_dir / "cache"),
                       LMCHAT_API_KEYS="", PYTHONPATH=str(ROOT) + os.pathsep + env.get("PYTHONPATH", ""))
            return [sys.executable, "-m", "lmchat", "serve", "--host", "127.0.0.1", "--port", str(self.port),
                    "--log-level", "warning", *self.options], env
        if self.kind == "llama-server":
            self.options = ["-t", t, "-tb", t, "-c", str(self.slots * SLOT_CTX), "-np", str(self.slots),
                            "--cache-reuse", "256"]
            if _amx_cpu():  # lmchat's engine and llama-cpp-python run without llama.cpp's AMX buffers there
                self.options.append("--no-repack")
            return [str(a.llama_server), "-m", a.gguf, "--host", "127.0.0.1", "--port", str(self.port),
                    *self.options], env
        self.options = ["--n_ctx", str(SLOT_CTX), "--n_threads", t, "--n_threads_batch", t,
                        "--interrupt_requests", "False"]
        env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
        return [sys.executable, "-c", LCP_SERVER, "--model", a.gguf, "--host", "127.0.0.1",
                "--port", str(self.port), *self.options], env

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> float:
        """Start and wait until it answers (then one warm-up request); seconds until it answered."""
        import httpx

        self.busy_before = wait_idle(self.args)

        self.port = free_port()
        command, env = self.command()
        self.log = self.data_dir / f"{self.kind}-{self.port}.log"
        started = time.perf_counter()
        # the child writes through its own copy of the descriptor: ours closes at once, output() reads the path
        with open(self.log, "w", encoding="utf-8") as log:
            self.proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         env=env, cwd=ROOT)
        _LIVE.add(self)
        path = "/v1/models" if self.kind == "llama-cpp-python" else "/health"
        deadline = time.monotonic() + READY_SECONDS
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.kind} exited with {self.proc.returncode}: {self.tail()}")
            if time.monotonic() > deadline:
                self.kill()
                raise RuntimeError(f"{self.kind} did not answer {path} within {READY_SECONDS} s: {self.tail()}")
            try:
                if httpx.get(self.url + path, timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            time.sleep(0.1)
        ready = time.perf_counter() - started
        models = httpx.get(self.url + "/v1/models", timeout=10).json().get("data") or [{}]
        self.model = models[0].get("id") or "default"
        # the first request allocates (buffers, graphs): not part of any measurement; no system prompt,
        # so that it shares at most the template's first marker with the workloads' prompts
        body = {"model": self.model, "messages": [{"role": "user", "content": "Hello"}], "max_tokens": 1,
                "temperature": 0}
        r = httpx.post(self.url + "/v1/chat/completions", json=body, timeout=120)
        if r.status_code != 200:
            raise RuntimeError(f"{self.kind}: warm-up request failed: {r.status_code} {r.text[:300]}")
        return ready

    def tail(self, chars: int = 1500) -> str:
        return self.output()[-chars:].strip()

    def output(self) -> str:
        if self.log is None:
            return ""
        return self.log.read_text(encoding="utf-8", errors="replace")

    def mark(self) -> int:
        return len(self.output())

    def lcp_counts(self, mark: int, requests: int | None = None, wait: float = 2.0) -> list[tuple]:
        """llama-cpp-python's (reused, evaluated) per request since ``mark``, from its log."""
        deadline = time.monotonic() + wait
        while True:
            found = _lcp_parse(self.output()[mark:])
            if requests is None or len(found) >= requests or time.monotonic() > deadline:
                return found
            time.sleep(0.05)

    def stop(self) -> float | None:
        """SIGTERM, as a user stopping it would (SIGKILL after STOP_SECONDS); seconds it took."""
        if self.proc is None or self.proc.poll() is not None:
            _LIVE.discard(self)
            return None
        started = time.perf_counter()
        self.proc.terminate()
        try:
            self.proc.wait(timeout=STOP_SECONDS)
        except subprocess.TimeoutExpired:
            print(f"  ({self.kind} still running {STOP_SECONDS} s after SIGTERM: killed)", flush=True)
            self.kill()
        _LIVE.discard(self)
        return time.perf_counter() - started

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=10)
        _LIVE.discard(self)

    def cleanup(self) -> None:
        self.stop()
        if self.owns_dir and not self.args.keep_logs:
            shutil.rmtree(self.data_dir, ignore_errors=True)

    # -- process statistics (Linux /proc; psutil when installed)
    def cpu_seconds(self) -> float | None:
        try:
            import psutil

            t = psutil.Process(self.proc.pid).cpu_times()
            return t.user + t.system
        except ImportError:
            pass
        except Exception:
            return None
        try:
            fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
            return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        except (OSError, IndexError, ValueError):
            return None

    def memory(self) -> dict:
        """RSS now and its peak (VmHWM), MiB."""
        out = {}
        try:
            for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
                key, _, value = line.partition(":")
                if key in ("VmRSS", "VmHWM"):
                    out["rss_mib" if key == "VmRSS" else "peak_rss_mib"] = round(int(value.split()[0]) / 1024, 1)
        except (OSError, ValueError, IndexError):
            pass
        return out

    def metrics(self) -> dict:
        """lmchat's /metrics samples naming kv_, cache or tokens_ (histogram buckets left out)."""
        if self.kind != "lmchat":
            return {}
        import httpx

        try:
            text = httpx.get(self.url + "/metrics", timeout=10).text
        except httpx.HTTPError as e:
            return {"error": str(e)}
        out = {}
        for line in text.splitlines():
            if not line or line.startswith("#"):
                continue
            name, _, value = line.rpartition(" ")
            base = name.split("{", 1)[0]
            if base.endswith("_bucket") or not any(k in base for k in ("kv_", "cache", "tokens_")):
                continue
            with contextlib.suppress(ValueError):
                out[name] = float(value)
        return out


def _lcp_parse(log: str) -> list[tuple]:
    """(reused, evaluated) per request in llama-cpp-python's log: its server runs one request at a time, and
    logs for each a prefix-match line (unless the cache was reset) and then its perf counters."""
    out, pending = [], None
    for line in log.splitlines():
        if m := LCP_HIT.search(line):
            pending = (int(m.group(1)), int(m.group(2)))
        elif LCP_FULL in line:
            pending = (None, 0)
        elif m := LCP_PERF.search(line):
            out.append(pending if pending is not None else (0, int(m.group(1))))
            pending = None
    return out


# ---------------------------------------------------------------------------------------------- client

class Deadline:
    def __init__(self, seconds: float):
        self.end = time.monotonic() + seconds
        self.hit = False

    def over(self) -> bool:
        if time.monotonic() > self.end:
            self.hit = True
        return self.hit


async def chat(client, srv: Server, messages: list, *, args, session: str | None = None,
               attribute: bool = False) -> dict:
    """One streamed chat completion: TTFT, the answer, and the prompt's token counts."""
    body = {"model": srv.model, "messages": messages, "max_tokens": args.max_tokens, "temperature": 0,
            "stream": True, "stream_options": {"include_usage": True}}
    body.update(NO_PENALTY[srv.kind])
    headers = {}
    if srv.kind == "llama-server":
        body["cache_prompt"] = True
    if session and srv.kind == "lmchat":
        headers["X-Session-Id"] = session
    mark = srv.mark() if attribute and srv.kind == "llama-cpp-python" else None
    started = time.perf_counter()
    first, pieces, usage, timings, finish = None, [], None, None, None
    async with client.stream("POST", srv.url + "/v1/chat/completions", json=body, headers=headers) as r:
        if r.status_code != 200:
            raise RuntimeError(f"HTTP {r.status_code}: {(await r.aread()).decode(errors='replace')[:300]}")
        async for line in r.aiter_lines():
            if not line.startswith("data:"):
                continue
            data = line[5:].strip()
            if data == "[DONE]":
                break
            chunk = json.loads(data)
            if chunk.get("error"):
                raise RuntimeError(f"stream error: {json.dumps(chunk['error'])[:300]}")
            for choice in chunk.get("choices") or ():
                delta = choice.get("delta") or {}
                piece = delta.get("content") or delta.get("reasoning_content")
                if piece:
                    if first is None:
                        first = time.perf_counter() - started
                    pieces.append(delta.get("content") or "")
                finish = choice.get("finish_reason") or finish
            usage = chunk.get("usage") or usage
            timings = chunk.get("timings") or timings
    total = time.perf_counter() - started
    row = {"ttft_s": first if first is not None else total, "total_s": total, "text": "".join(pieces),
           "finish": finish, "prompt": None, "cached": None, "evaluated": None}
    details = (usage or {}).get("prompt_tokens_details") or {}
    if usage and details.get("cached_tokens") is not None:
        row.update(prompt=usage["prompt_tokens"], cached=details["cached_tokens"],
                   evaluated=usage["prompt_tokens"] - details["cached_tokens"])
    elif timings and "prompt_n" in timings:
        row.update(prompt=timings["prompt_n"] + timings.get("cache_n", 0), cached=timings.get("cache_n", 0),
                   evaluated=timings["prompt_n"])
    elif mark is not None:
        counts = srv.lcp_counts(mark, requests=1)
        if counts:
            reused, evaluated = counts[-1]
            row.update(cached=reused, evaluated=evaluated,
                       prompt=None if reused is None else reused + evaluated)
    elif usage and usage.get("prompt_tokens") is not None:
        row["prompt"] = usage["prompt_tokens"]
    return row


def _client(n: int, args):
    import httpx

    return httpx.AsyncClient(timeout=httpx.Timeout(args.request_timeout, connect=10),
                             limits=httpx.Limits(max_connections=n + 4, max_keepalive_connections=n + 4))


async def conversation(client, srv: Server, args, deadline: Deadline, *, c: int, turns: int, system: str,
                       session: str | None = None, attribute: bool = False, first_user: str | None = None,
                       think: float = 0.0):
    """``turns`` turns, each resending the whole history, ``think`` seconds apart; rows and the final history.
    Stops at an error."""
    messages = [{"role": "system", "content": system}]
    rows = []
    for t in range(1, turns + 1):
        if deadline.over():
            break
        messages.append({"role": "user", "content": first_user if (t == 1 and first_user) else question(c, t)})
        try:
            row = await chat(client, srv, messages, args=args, session=session, attribute=attribute)
        except Exception as e:  # noqa: BLE001 - reported, the workload goes on without this conversation
            rows.append({"turn": t, "error": f"{type(e).__name__}: {e}"[:400]})
            messages.pop()
            break
        row["turn"] = t
        rows.append(row)
        messages.append({"role": "assistant", "content": row["text"]})
        if think and t < turns:
            await asyncio.sleep(think)
    return rows, messages


# ---------------------------------------------------------------------------------------------- statistics

def pct(values: list, q: float):
    """Nearest-rank percentile (None for no values)."""
    values = sorted(v for v in values if v is not None)
    if not values:
        return None
    return values[min(len(values), max(1, math.ceil(q / 100 * len(values)))) - 1]


def total(rows: list, key: str):
    values = [r.get(key) for r in rows if "error" not in r]
    return None if not values or any(v is None for v in values) else sum(values)


def ms(seconds) -> str:
    return "-" if seconds is None else f"{seconds * 1e3:.0f} ms"


def num(value) -> str:
    return "?" if value is None else f"{value:g}" if isinstance(value, float) else str(value)


def errors(rows: list) -> list[str]:
    return [r["error"] for r in rows if "error" in r]


# ---------------------------------------------------------------------------------------------- workloads

def with_server(kind: str, args, slots: int, fn, data_dir: Path | None = None) -> dict:
    srv = Server(kind, args, slots=slots, data_dir=data_dir)
    try:
        ready = srv.start()
        cpu0, busy0, own0, t0 = srv.cpu_seconds(), busy_seconds(), time.process_time(), time.monotonic()
        result = fn(srv)
        cpu1, busy1, own1, t1 = srv.cpu_seconds(), busy_seconds(), time.process_time(), time.monotonic()
        if None not in (cpu0, cpu1, busy0, busy1) and t1 > t0:
            others = max(0.0, (busy1 - busy0) - (cpu1 - cpu0) - (own1 - own0))
            result["other_cpus_during"] = round(others / (t1 - t0), 2)
            DURING.append(result["other_cpus_during"])
        result.update(startup_s=round(ready, 2), options=srv.options, busy_cpus_before=srv.busy_before,
                      **srv.memory())
        if cpu0 is not None and cpu1 is not None:
            result["cpu_s"] = round(cpu1 - cpu0, 2)
        if srv.kind == "lmchat":
            result["metrics"] = srv.metrics()
        return result
    finally:
        srv.cleanup()


def w_stateless(kind: str, args, think: float = 0.0) -> dict:
    def run(srv):
        async def go():
            async with _client(1, args) as client:
                return await conversation(client, srv, args, Deadline(args.max_seconds), c=0, turns=args.turns,
                                          system=SYSTEM, attribute=True, think=think)
        rows, _ = asyncio.run(go())
        return {"rows": rows, "errors": errors(rows),
                "totals": {k: total(rows, k) for k in ("prompt", "cached", "evaluated", "ttft_s")}}
    return with_server(kind, args, args.slots, run)


def _many(srv, args, *, n: int, turns: int, system: str, sessions: bool) -> dict:
    """``n`` conversations at once (all in flight), each ``turns`` turns."""
    tag = uuid.uuid4().hex[:8]

    async def go():
        deadline = Deadline(args.max_seconds)
        async with _client(n, args) as client:
            limit = asyncio.Semaphore(n)

            async def one(c):
                async with limit:
                    return await conversation(client, srv, args, deadline, c=c, turns=turns, system=system,
                                              session=f"kv-bench-{tag}-{c}" if sessions else None)
            started = time.perf_counter()
            done = await asyncio.gather(*(one(c) for c in range(n)))
            return done, time.perf_counter() - started, deadline.hit

    mark = srv.mark()
    cpu0 = srv.cpu_seconds()
    done, wall, late = asyncio.run(go())
    cpu1 = srv.cpu_seconds()
    rows = [r for conv, _ in done for r in conv]
    ok = [r for r in rows if "error" not in r]
    ttft = [r["ttft_s"] for r in ok]
    out = {"requests": len(ok), "wall_s": round(wall, 3), "ttft_p50_s": pct(ttft, 50), "ttft_p99_s": pct(ttft, 99),
           "prompt": total(ok, "prompt"), "cached": total(ok, "cached"), "evaluated": total(ok, "evaluated"),
           "errors": errors(rows), "deadline_hit": late,
           "workload_cpu_s": None if cpu0 is None or cpu1 is None else round(cpu1 - cpu0, 2)}
    if srv.kind == "llama-cpp-python":  # one request at a time: its log's per-request counts add up
        counts = srv.lcp_counts(mark, requests=len(ok))
        out.update(evaluated=sum(e for _, e in counts),
                   cached=None if any(r is None for r, _ in counts) else sum(r for r, _ in counts))
        out["prompt"] = None if out["cached"] is None else out["cached"] + out["evaluated"]
        out["counted_requests"] = len(counts)
    return out


def w_shared_system(kind: str, args) -> dict:
    return with_server(kind, args, args.slots, lambda srv: _many(
        srv, args, n=args.conversations, turns=args.shared_turns, system=LONG_SYSTEM, sessions=False))


def w_sessions(kind: str, args) -> dict:
    return with_server(kind, args, args.session_conversations, lambda srv: _many(
        srv, args, n=args.session_conversations, turns=args.session_turns, system=SYSTEM, sessions=True))


def w_branch(kind: str, args) -> dict:
    def run(srv):
        async def go():
            async with _client(1, args) as client:
                rows, messages = await conversation(client, srv, args, Deadline(args.max_seconds), c=0,
                                                    turns=args.turns, system=SYSTEM, attribute=True)
                if errors(rows):
                    return rows, None
                keep = 1 + 2 * min(args.branch_at, len(rows))
                branch = messages[:keep] + [{"role": "user", "content":
                                             "A different question instead: name one planet, in one sentence."}]
                try:
                    row = await chat(client, srv, branch, args=args, attribute=True)
                except Exception as e:  # noqa: BLE001
                    row = {"error": f"{type(e).__name__}: {e}"[:400]}
                return rows, row
        rows, branch = asyncio.run(go())
        median = statistics.median([r["ttft_s"] for r in rows[1:] if "error" not in r] or [float("nan")])
        out = {"rows": rows, "branch": branch, "median_ttft_s": median, "errors": errors(rows)}
        if branch and "error" not in branch:
            out["ratio"] = branch["ttft_s"] / median
        elif branch:
            out["errors"].append(branch["error"])
        return out
    return with_server(kind, args, args.slots, run)


def w_restart(kind: str, args) -> dict:
    """Warm turn, restart turn (same data dir), then the same request on a cold server (fresh data dir)."""
    session = f"kv-bench-restart-{uuid.uuid4().hex[:8]}" if kind == "lmchat" else None
    data_dir = Path(tempfile.mkdtemp(prefix=f"kv-cache-restart-{kind}-"))
    out: dict = {"errors": []}

    async def one(srv, messages, sid):
        async with _client(1, args) as client:
            return await chat(client, srv, messages, args=args, session=sid, attribute=True)

    try:
        srv = Server(kind, args, slots=args.slots, data_dir=data_dir)
        try:
            out["startup_s"] = round(srv.start(), 2)

            async def build():
                async with _client(1, args) as client:
                    deadline = Deadline(args.max_seconds)
                    # turn 1 carries the document; then short turns until the history holds the target
                    rows, messages = await conversation(client, srv, args, deadline, c=0, turns=1, system=SYSTEM,
                                                        session=session, attribute=True,
                                                        first_user=document(args.restart_tokens - 150))
                    t = 2
                    while not errors(rows) and t <= 6 and (rows[-1].get("prompt") or 0) < args.restart_tokens - 60 \
                            and not deadline.over():
                        messages.append({"role": "user", "content": question(0, t)})
                        row = await chat(client, srv, messages, args=args, session=session, attribute=True)
                        rows.append(row)
                        messages.append({"role": "assistant", "content": row["text"]})
                        t += 1
                    return rows, messages
            rows, messages = asyncio.run(build())
            out["build"] = rows
            if errors(rows):
                out["errors"] += errors(rows)
                return out
            messages.append({"role": "user", "content": "Thanks. Which day had the most crates? One sentence."})
            warm = asyncio.run(one(srv, messages, session))
            messages.append({"role": "assistant", "content": warm["text"]})
            out["warm"] = warm
            out["stop_s"] = srv.stop()
        finally:
            srv.cleanup()
        messages.append({"role": "user", "content": "And which city sent the most copper wire? One sentence."})
        srv = Server(kind, args, slots=args.slots, data_dir=data_dir)  # the same data dir: what survived
        try:
            out["restart_startup_s"] = round(srv.start(), 2)
            out["restart"] = asyncio.run(one(srv, messages, session))
        finally:
            srv.cleanup()
        srv = Server(kind, args, slots=args.slots)  # a fresh data dir: nothing to reuse
        try:
            srv.start()
            sid = f"kv-bench-cold-{uuid.uuid4().hex[:8]}" if session else None
            out["cold"] = asyncio.run(one(srv, messages, sid))
        finally:
            srv.cleanup()
        out["ratio_restart_cold"] = out["restart"]["ttft_s"] / out["cold"]["ttft_s"]
        out["ratio_warm_cold"] = out["warm"]["ttft_s"] / out["cold"]["ttft_s"]
    except Exception as e:  # noqa: BLE001
        out["errors"].append(f"{type(e).__name__}: {e}"[:600])
    finally:
        if not args.keep_logs:
            shutil.rmtree(data_dir, ignore_errors=True)
    return out


def w_memory(kind: str, args) -> dict:
    def run(srv):
        idle = srv.memory()
        before = srv.metrics()
        load = _many(srv, args, n=args.memory_conversations, turns=args.memory_turns, system=LONG_SYSTEM,
                     sessions=True)
        return {"idle": idle, "metrics_before": before, "load": load, "errors": load["errors"]}
    return with_server(kind, args, args.slots, run)


RUNNERS = {"stateless": w_stateless, "stateless_think": lambda kind, args: w_stateless(kind, args, args.think),
           "shared_system": w_shared_system, "sessions": w_sessions, "branch": w_branch, "restart": w_restart,
           "memory": w_memory}


# ---------------------------------------------------------------------------------------------- rounds

def load_average() -> list[float]:
    """The 1, 5 and 15 minute load averages: what the figures of a round were measured under."""
    return [round(x, 2) for x in os.getloadavg()]


def run_once(name: str, kind: str, args) -> dict:
    """One server's result of one workload; ``{"fatal": why}`` if it raised, so that the next server still runs."""
    t0 = time.perf_counter()
    print(f"{name}: {kind} ...", end=" ", flush=True)
    try:
        result = RUNNERS[name](kind, args)
    except Exception as e:  # noqa: BLE001 - the next server still runs
        result = {"fatal": f"{type(e).__name__}: {e}"[:1500]}
        print(f"FAILED: {result['fatal']}", flush=True)
        return result
    errs = result.get("errors") or []
    print(f"{time.perf_counter() - t0:.0f} s" + (f" ({len(errs)} errors: {errs[0][:200]})" if errs else ""),
          flush=True)
    return result


def measure(name: str, index: int, servers: list[str], args) -> tuple[dict, list]:
    """``args.repeat`` rounds of the ``index``-th workload: each server's ``{"median": ..., "rounds": [...]}``,
    and the load average at each round's start."""
    rounds: dict = {s: [] for s in servers}
    loads = []
    for r in range(args.repeat):
        # the first server changes from round to round (and workload to workload): none is always measured
        # right after the same other one, or always first
        shift = (index + r) % len(servers)
        loads.append(load_average())
        print(f"{name}, round {r + 1} of {args.repeat}: load average {' '.join(f'{x:.2f}' for x in loads[-1])}",
              flush=True)
        for s in servers[shift:] + servers[:shift]:
            rounds[s].append(run_once(name, s, args))
    return {s: {"median": median_result(rs), "rounds": rs} for s, rs in rounds.items()}, loads


def median_result(rounds: list[dict]) -> dict:
    """A server's result of one workload whose every figure is the median over ``rounds`` of that figure (a
    ratio: of the rounds' ratios), and whose errors are every round's, each naming its round. A round that
    failed as a whole counts by its error only; if all did, the first one's ``fatal`` is the result."""
    ran = [r for r in rounds if "fatal" not in r]
    if not ran:
        return rounds[0]
    out = _median(ran)
    out["errors"] = [f"round {k}: {e}" for k, r in enumerate(rounds, 1)
                     for e in ([r["fatal"]] if "fatal" in r else r.get("errors") or [])]
    return out


def _median(values: list):
    """The median of numbers, key by key through dicts and item by item through lists, over the values that
    have the key or item (a round cut short by an error or the deadline has fewer rows); any other value
    (a text, a flag) only where the values agree on it, else None."""
    there = [v for v in values if v is not None]
    if not there:
        return None
    first = there[0]
    if isinstance(first, dict):
        keys = dict.fromkeys(k for v in there for k in v)
        return {k: _median([v.get(k) for v in there]) for k in keys}
    if isinstance(first, list):
        return [_median([v[i] for v in there if i < len(v)]) for i in range(max(len(v) for v in there))]
    if isinstance(first, int | float) and not isinstance(first, bool):
        median = statistics.median(there)
        # a count stays an int where its median is whole (an even number of rounds averages the middle two)
        return int(median) if all(isinstance(v, int) for v in there) and median == int(median) else median
    return first if all(v == first for v in there) else None


# ---------------------------------------------------------------------------------------------- answers

#: the workloads whose answers are compared: one client, so the same requests in the same order everywhere
ANSWERED = ("stateless", "stateless_think", "branch")


def answers(result: dict) -> list:
    """A stateless or branch result's answer texts, turn by turn (the branch's last); None for a failed request."""
    rows = list(result.get("rows") or [])
    if result.get("branch"):
        rows.append(result["branch"])
    return [None if "error" in r else r["text"] for r in rows]


def equal_answers(results: dict) -> dict:
    """Per workload of ANSWERED and round: how many of lmchat's answers are llama-server's of the same round,
    text for text, of the turns both answered. Every server decodes greedily without a penalty, so they should
    all be; llama-server's flash attention may round differently, and once an answer differs the histories,
    so the later prompts, differ too."""
    out = {}
    for name in ANSWERED:
        res = results.get(name) or {}
        if "lmchat" in res and "llama-server" in res:
            out[name] = [_count_equal(answers(a), answers(b))
                         for a, b in zip(res["lmchat"]["rounds"], res["llama-server"]["rounds"], strict=True)]
    return out


def _count_equal(ours: list, theirs: list) -> dict:
    # strict=False: a conversation cut short by an error or the deadline has fewer answers
    both = [(a, b) for a, b in zip(ours, theirs, strict=False) if a is not None and b is not None]
    return {"equal": sum(a == b for a, b in both), "of": len(both)}


def answers_line(counts: list[dict]) -> str:
    """The report's line: one count if every round gave the same, else each round's."""
    per_round = [f"{c['equal']} of {c['of']}" for c in counts]
    got = per_round[0] if len(set(per_round)) == 1 else ", ".join(
        f"round {k}: {text}" for k, text in enumerate(per_round, 1))
    return f"\nlmchat's answers equal to llama-server's, text for text (greedy; informational): {got}"


# ---------------------------------------------------------------------------------------------- report

def _cell(result: dict | None, fn) -> str:
    if result is None:
        return "skipped"
    if "fatal" in result:
        return "failed"
    try:
        return fn(result)
    except (KeyError, TypeError, ZeroDivisionError, IndexError):
        return "?"


def targets(results: dict) -> list[str]:
    """The issue's targets, lmchat against llama-server in this run: a line each, met or not."""
    def pair(name):
        res = results.get(name) or {}
        lm, ls = res.get("lmchat"), res.get("llama-server")
        ok = lambda r: r is not None and "fatal" not in r and not r.get("errors")  # noqa: E731
        return (lm, ls) if ok(lm) and ok(ls) else (None, None)

    lines = []

    def check(what, lm_value, ls_value, better_is_lower=True, fmt="{:.0f}"):
        met = lm_value <= ls_value if better_is_lower else lm_value >= ls_value
        lines.append(f"* issue target: {what}: lmchat {fmt.format(lm_value)} vs llama-server "
                     f"{fmt.format(ls_value)}: {'met' if met else 'NOT met'}")

    for name in ("stateless", "stateless_think"):
        lm, ls = pair(name)
        if lm:
            rows = lambda r: [x for x in r["rows"] if "error" not in x]  # noqa: E731
            check(f"{name}, prompt tokens evaluated per turn (mean)",
                  lm["totals"]["evaluated"] / len(rows(lm)), ls["totals"]["evaluated"] / len(rows(ls)),
                  fmt="{:.1f}")
            for t in sorted({1, 10, len(rows(lm))}):
                a = [x["ttft_s"] for x in rows(lm) if x["turn"] == t]
                b = [x["ttft_s"] for x in rows(ls) if x["turn"] == t]
                if a and b:
                    check(f"{name}, TTFT at turn {t} (ms)", a[0] * 1e3, b[0] * 1e3)
    lm, ls = pair("shared_system")
    if lm:
        for key, what in (("evaluated", "prompt tokens evaluated"), ("ttft_p50_s", "TTFT p50 (s)"),
                          ("ttft_p99_s", "TTFT p99 (s)"), ("wall_s", "wall (s)")):
            check(f"shared_system, {what}", lm[key], ls[key], fmt="{:.1f}")
    lm, ls = pair("sessions")
    if lm:
        for key, what in (("wall_s", "wall (s)"), ("ttft_p99_s", "TTFT p99 (s)")):
            check(f"sessions, {what}", lm[key], ls[key], fmt="{:.1f}")
    lm = (results.get("branch") or {}).get("lmchat")
    if lm and "ratio" in lm:
        lines.append(f"* issue target: branch TTFT {lm['ratio']:.2f}x an ordinary turn's (<= 0.6x): "
                     f"{'met' if lm['ratio'] <= 0.6 else 'NOT met'}")
    lm = (results.get("restart") or {}).get("lmchat")
    if lm and lm.get("ratio_restart_cold"):
        speedup = 1 / lm["ratio_restart_cold"]
        lines.append(f"* issue target: the turn after a restart {speedup:.0f}x faster than re-prefilling "
                     f"(>= 20x): {'met' if speedup >= 20 else 'NOT met'}")
    lm, ls = pair("memory")
    if lm and lm.get("rss_mib") and ls.get("rss_mib"):  # the RSS when the load ended
        ratio = lm["rss_mib"] / ls["rss_mib"]
        lines.append(f"* issue target: memory, RSS after the load {ratio:.2f}x llama-server's (<= 1.1x): "
                     f"{'met' if ratio <= 1.1 else 'NOT met'}")
        host = _host_mib(lm)
        if host is not None:  # what the documented budget (--host-cache-mb) bounds, apart
            lines.append(f"  (without lmchat's host tier, {host:.1f} MiB within its --host-cache-mb budget: "
                         f"{(lm['rss_mib'] - host) / ls['rss_mib']:.2f}x)")
    return ["\n" + "\n".join(lines)] if lines else []


def _host_mib(r: dict) -> float | None:
    """What lmchat's host tier held when the load ended (its buffers' allocations and the spare), MiB."""
    value = r.get("metrics", {}).get('lmchat_kv_bytes{tier="host"}')
    return None if value is None else value / 2**20


def _settled(r: dict) -> str:
    """lmchat's answer tokens prefilled again off the requests' path ("-" for the servers that have none)."""
    value = r.get("metrics", {}).get("lmchat_kv_settled_tokens_total")
    return "-" if value is None else num(int(value))


def report(results: dict, servers: list, args, equal: dict) -> list[str]:
    """The tables, targets and warnings of ``results`` (each server's median result per workload); ``equal``:
    equal_answers()."""
    out = []

    def emit(title, header, rows):
        out.append(f"\n### {title}\n\n" + table(header, rows))

    def turn_cell(r, t):
        rows = [x for x in r["rows"] if x.get("turn") == t and "error" not in x]
        if not rows:
            return "-"
        x = rows[0]
        return f"{num(x['prompt'])} / {num(x['cached'])} / {num(x['evaluated'])} / {ms(x['ttft_s'])}"

    for name, pause in (("stateless", ""), ("stateless_think", f", {args.think:g} s between turns")):
        if name not in results:
            continue
        res = results[name]
        turns = sorted({1, min(10, args.turns), args.turns})
        emit(f"{name}: one client resending its history, {args.turns} turns, no session id{pause} "
             f"(cells: prompt / cached / evaluated tokens / TTFT)",
             ["server", *[f"turn {t}" for t in turns], "total prompt", "total cached", "total evaluated",
              "settled", "TTFT sum"],
             [[s, *[_cell(res.get(s), lambda r, t=t: turn_cell(r, t)) for t in turns],
               _cell(res.get(s), lambda r: num(r["totals"]["prompt"])),
               _cell(res.get(s), lambda r: num(r["totals"]["cached"])),
               _cell(res.get(s), lambda r: num(r["totals"]["evaluated"])), _cell(res.get(s), _settled),
               _cell(res.get(s), lambda r: f"{r['totals']['ttft_s']:.2f} s")] for s in servers])
        if name in equal:
            out.append(answers_line(equal[name]))
    for name, title in (("shared_system", f"shared_system: {args.conversations} concurrent stateless conversations, "
                                          f"~1,000-token shared system prompt, {args.shared_turns} turns each, "
                                          f"slots {args.slots}"),
                        ("sessions", f"sessions: {args.session_conversations} concurrent conversations with session "
                                     f"ids, {args.session_turns} turns each, slots {args.session_conversations}")):
        if name not in results:
            continue
        res = results[name]
        emit(title, ["server", "requests", "prompt tokens", "evaluated", "settled", "TTFT p50", "TTFT p99", "wall",
                     "server CPU", "errors"],
             [[s, _cell(res.get(s), lambda r: str(r["requests"])), _cell(res.get(s), lambda r: num(r["prompt"])),
               _cell(res.get(s), lambda r: num(r["evaluated"])), _cell(res.get(s), _settled),
               _cell(res.get(s), lambda r: ms(r["ttft_p50_s"])),
               _cell(res.get(s), lambda r: ms(r["ttft_p99_s"])), _cell(res.get(s), lambda r: f"{r['wall_s']:.1f} s"),
               _cell(res.get(s), lambda r: f"{r['workload_cpu_s']:.1f} s"),
               _cell(res.get(s), lambda r: str(len(r["errors"])))] for s in servers])
    if "branch" in results:
        res = results["branch"]
        emit(f"branch: the first {args.branch_at} of {args.turns} turns + a new question (stateless)",
             ["server", "branch prompt / cached / evaluated", "branch TTFT", "median TTFT turns 2..N",
              "branch / median"],
             [[s, _cell(res.get(s), lambda r: f"{num(r['branch']['prompt'])} / {num(r['branch']['cached'])} / "
                                              f"{num(r['branch']['evaluated'])}"),
               _cell(res.get(s), lambda r: ms(r["branch"]["ttft_s"])),
               _cell(res.get(s), lambda r: ms(r["median_ttft_s"])),
               _cell(res.get(s), lambda r: f"{r['ratio']:.2f}")] for s in servers])
        if "branch" in equal:
            out.append(answers_line(equal["branch"]))
    if "restart" in results:
        res = results["restart"]
        emit(f"restart: ~{args.restart_tokens}-token conversation (lmchat with a session id), graceful stop "
             f"(SIGTERM) and start on the same data dir; re-prefill = the same request on a fresh server "
             f"(cells: TTFT, evaluated tokens)",
             ["server", "prompt tokens", "warm", "after restart", "re-prefill", "restart / re-prefill",
              "start / stop"],
             [[s, _cell(res.get(s), lambda r: num(r["restart"]["prompt"] or r["cold"]["prompt"])),
               _cell(res.get(s), lambda r: f"{ms(r['warm']['ttft_s'])}, {num(r['warm']['evaluated'])}"),
               _cell(res.get(s), lambda r: f"{ms(r['restart']['ttft_s'])}, {num(r['restart']['evaluated'])}"),
               _cell(res.get(s), lambda r: f"{ms(r['cold']['ttft_s'])}, {num(r['cold']['evaluated'])}"),
               _cell(res.get(s), lambda r: f"{r['ratio_restart_cold']:.2f}"),
               _cell(res.get(s), lambda r: f"{r['restart_startup_s']:.1f} s / {r['stop_s']:.1f} s")]
              for s in servers])
    if "memory" in results:
        res = results["memory"]
        emit(f"memory: RSS after the start, after {args.memory_conversations} session conversations x "
             f"{args.memory_turns} turns with a ~1,000-token shared system prompt, and the peak (MiB)",
             ["server", "RSS idle", "RSS after load", "of it lmchat's host tier", "peak RSS", "evaluated", "wall"],
             [[s, _cell(res.get(s), lambda r: num(r["idle"]["rss_mib"])),
               _cell(res.get(s), lambda r: num(r["rss_mib"])),
               _cell(res.get(s), lambda r: "-" if _host_mib(r) is None else f"{_host_mib(r):.1f}"),
               _cell(res.get(s), lambda r: num(r["peak_rss_mib"])),
               _cell(res.get(s), lambda r: num(r["load"]["evaluated"])),
               _cell(res.get(s), lambda r: f"{r['load']['wall_s']:.1f} s")] for s in servers])
        lm = res.get("lmchat") or {}
        if lm.get("metrics"):
            out.append("\nlmchat /metrics after the memory load (kv_, cache, tokens_):\n\n```\n" + "\n".join(
                f"{k} {v:g}" for k, v in lm["metrics"].items()) + "\n```")
    out += targets(results)
    # every workload's RSS (a server started fresh per workload: RSS at its end, peak)
    rows = []
    for name, res in results.items():
        if not any(r and "rss_mib" in r for r in res.values()):
            continue
        rows.append([name, *[_cell(res.get(s), lambda r: f"{num(r['rss_mib'])} ({num(r['peak_rss_mib'])})")
                             for s in servers]])
    if rows:
        emit("RSS at the end of each workload, MiB (peak)", ["workload", *servers], rows)
    busy = [b for b in BUSY if b is not None]
    if (busy and max(busy) > 0.25) or (DURING and max(DURING) > 0.25):
        out.append(f"\nWARNING: the machine was not idle: other processes used up to {max(busy, default=0):.2f} "
                   f"CPUs before the server starts (median {statistics.median(busy) if busy else 0:.2f}) and up to "
                   f"{max(DURING, default=0):.2f} CPUs during the measurements (median "
                   f"{statistics.median(DURING) if DURING else 0:.2f}): timings are unreliable")
    problems = [f"{name} / {s}: {e}" for name, res in results.items() for s, r in res.items() if r
                for e in ([r["fatal"]] if "fatal" in r else []) + list(r.get("errors") or [])[:3]]
    if problems:
        out.append("\nerrors:\n" + "\n".join(f"* {p}" for p in problems))
    return out


# ---------------------------------------------------------------------------------------------- main

def available(kind: str, args) -> str | None:
    """Why ``kind`` cannot run here (None: it can)."""
    if kind == "llama-server" and not (args.llama_server.is_file() and os.access(args.llama_server, os.X_OK)):
        return (f"no llama-server at {args.llama_server}: run bench/build_llama_server.sh to build it "
                f"(or pass --llama-server PATH)")
    if kind == "llama-cpp-python":
        absent = [m for m in LCP_MODULES if importlib.util.find_spec(m) is None]
        if absent:
            return f"llama_cpp.server needs {', '.join(absent)}: pip install 'llama-cpp-python[server]'"
    if kind == "lmchat":
        absent = [m for m in ("fastapi", "uvicorn", "llama_cpp") if importlib.util.find_spec(m) is None]
        if absent:
            return f"lmchat serve needs {', '.join(absent)}: pip install -e '.[local,serve]'"
    return None


def _version(kind: str, args) -> str:
    try:
        if kind == "llama-server":
            out = subprocess.run([str(args.llama_server), "--version"], capture_output=True, text=True, timeout=30)
            m = re.search(r"version: ([^\n]+)", out.stdout + out.stderr)
            return m.group(1).strip() if m else "?"
        if kind == "llama-cpp-python":
            import importlib.metadata as md

            return md.version("llama-cpp-python")
        return _git_short()
    except Exception:  # noqa: BLE001
        return "?"


def _git_short() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              cwd=ROOT).stdout.strip() or "?"
    except OSError:
        return "?"


def header(args, versions: dict, skipped: dict, loads: dict) -> str:
    """What was measured, with what, and under which load (the load average at each round's start)."""
    return (f"{_cpu_model()}, {os.cpu_count()} CPUs, {args.threads} threads per server; "
            f"{Path(args.gguf).name}; greedy, max_tokens {args.max_tokens}; "
            + "; ".join(f"{s} {v}" for s, v in versions.items())
            + (f"; skipped: {', '.join(skipped)}" if skipped else "")
            + ("; --quick" if args.quick else "")
            + (f"; medians of {args.repeat} rounds" if args.repeat > 1 else "")
            + "\nload average (1, 5, 15 min) at each round's start: "
            + "; ".join(f"{name} " + ", ".join("/".join(f"{x:.2f}" for x in load) for load in per_round)
                        for name, per_round in loads.items()))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench kv_cache", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--only", action="append", choices=WORKLOADS, help="run this workload (repeatable; default: all)")
    p.add_argument("--servers", default=",".join(SERVERS), help=f"comma-separated subset of {','.join(SERVERS)}")
    p.add_argument("--quick", action="store_true", help="small sizes: a few minutes for everything")
    p.add_argument("--turns", type=int, help="stateless and branch: turns of the conversation (default 30)")
    p.add_argument("--think", type=float, default=0.5,
                   help="stateless_think: seconds the client takes between an answer and its next request (0.5)")
    p.add_argument("--branch-at", type=int, help="branch: the turns kept before the new question (default 10)")
    p.add_argument("--conversations", type=int, help="shared_system: concurrent conversations (default 32)")
    p.add_argument("--shared-turns", type=int, help="shared_system: turns per conversation (default 5)")
    p.add_argument("--session-conversations", type=int, help="sessions: concurrent conversations and slots (default 8)")
    p.add_argument("--session-turns", type=int, help="sessions: turns per conversation (default 10)")
    p.add_argument("--restart-tokens", type=int, help="restart: the conversation's size in tokens (default 2000)")
    p.add_argument("--memory-conversations", type=int, help="memory: conversations of the load (default 8)")
    p.add_argument("--memory-turns", type=int, help="memory: turns per conversation (default 5)")
    p.add_argument("--repeat", type=int, default=1, metavar="N",
                   help="rounds of each workload, the servers taking turns in each, the order rotated from one "
                        "round to the next; the report gives each figure's median over the rounds, the JSON keeps "
                        "every round (default 1)")
    p.add_argument("--max-tokens", type=int, default=24, help="answer budget per request (default 24)")
    p.add_argument("--slots", type=int, default=4,
                   help="lmchat --sessions and llama-server -np, except in sessions (default 4: lmchat's default)")
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1, help="threads of every server (default: CPUs)")
    p.add_argument("--model", help="a GGUF for all three servers (default: the bundled SmolLM2)")
    p.add_argument("--llama-server", type=Path, default=LLAMA_SERVER, help=f"the binary (default {LLAMA_SERVER})")
    p.add_argument("--max-seconds", type=float, help="per workload and server: no new turn after this "
                                                     "(default 1800, --quick 300)")
    p.add_argument("--request-timeout", type=float, default=600, help="seconds per request (default 600)")
    p.add_argument("--wait-idle", type=float, default=0, metavar="SECONDS",
                   help="before each server start, wait up to this for other processes to leave the CPUs idle "
                        "(default 0: only report how busy they were)")
    p.add_argument("--keep-logs", action="store_true", help="keep the servers' data dirs and logs (in /tmp)")
    p.add_argument("--out", metavar="NAME",
                   help="save as bench/results/NAME.json and NAME.md (default kv_cache, kv_cache_quick with "
                        "--quick): a run of some workloads (--only) then leaves the full run's files as they are")
    args = p.parse_args(argv)
    quick = {"turns": 10, "branch_at": 4, "conversations": 8, "shared_turns": 2, "session_conversations": 4,
             "session_turns": 4, "restart_tokens": 2000, "memory_conversations": 4, "memory_turns": 3,
             "max_seconds": 300}
    full = {"turns": 30, "branch_at": 10, "conversations": 32, "shared_turns": 5, "session_conversations": 8,
            "session_turns": 10, "restart_tokens": 2000, "memory_conversations": 8, "memory_turns": 5,
            "max_seconds": 1800}
    for key, value in (quick if args.quick else full).items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    if args.branch_at >= args.turns:
        p.error("--branch-at must be below --turns")
    if args.repeat < 1:
        p.error("--repeat must be at least 1")
    servers = [s.strip() for s in args.servers.split(",") if s.strip()]
    if unknown := set(servers) - set(SERVERS):
        p.error(f"unknown servers: {', '.join(sorted(unknown))}")
    if args.model is None:
        from lmchat.backends.bundled import default_gguf

        args.gguf = str(default_gguf())
    else:
        args.gguf = args.model = str(Path(args.model).resolve())
    signal.signal(signal.SIGTERM, _on_term)

    skipped = {}
    for s in servers:
        if why := available(s, args):
            skipped[s] = why
            print(f"{s}: skipped ({why})", flush=True)
    running = [s for s in servers if s not in skipped]
    versions = {s: _version(s, args) for s in running}
    workloads = [w for w in WORKLOADS if not args.only or w in args.only]
    print(f"{_cpu_model()}, {os.cpu_count()} CPUs; GGUF {args.gguf}; {args.threads} threads; greedy, "
          f"max_tokens {args.max_tokens}; versions: " + ", ".join(f"{s} {v}" for s, v in versions.items()),
          flush=True)
    if not running:
        print("no server to measure: nothing saved")
        return 1
    results: dict = {}
    loads: dict = {}
    started = time.perf_counter()
    try:
        for i, name in enumerate(workloads):
            results[name], loads[name] = measure(name, i, running, args)
    finally:
        _kill_all()
    medians = {name: {s: r["median"] for s, r in res.items()} for name, res in results.items()}
    equal = equal_answers(results)
    lines = report(medians, running, args, equal)
    text = header(args, versions, skipped, loads) + "\n" + "\n".join(lines)
    print("\n" + text)
    print(f"\nall workloads: {time.perf_counter() - started:.0f} s")
    name = args.out or ("kv_cache_quick" if args.quick else "kv_cache")
    payload = {"busy_cpus_samples": BUSY, "other_cpus_during": DURING, "load_averages": loads,
               "answers_equal_to_llama_server": equal,
               "args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
               "versions": versions, "skipped": skipped, "results": results}
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"{name}.md").write_text(text.strip() + "\n", encoding="utf-8")
    print(f"results: {save(name, payload)}")
    return 0
