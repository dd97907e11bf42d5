"""`lmchat serve` under load, side by side with a baseline commit: requests/s, p50/p99, server overhead.

Two real `lmchat serve --backend echo` processes on loopback, one from this
tree and one from ``--baseline`` (a git revision, checked out into a temporary
worktree; default: the last commit before the server was reworked), up side
by side and loaded in alternation, level by level, ``--repeat`` times each
(so that a slow spell of a shared machine falls on both), by a client in a
process of its own (``bench/load.py``: one asyncio loop, one keep-alive
connection per session, interactive turns on ``/v1/chat/interactive``,
non-streamed). Two loads per level of concurrency:

* paced: each session waits a think time (uniform, mean ``--think``) after each
  answer, as a person or an agent does;
* saturated: each session sends its next turn as soon as the answer arrives,
  so N requests are always in flight: the throughput of the server.

Each store of ``--store`` is measured in turn (default: memory, then SQLite,
the kind ``lmchat serve`` uses when given none). The echo backend's own time
per turn (measured in-process) is subtracted to give the overhead; the
server's own view is its request-latency histogram (``/metrics``: the bucket
bound under which 99% of the level's requests fell). Turns a server fails
(e.g. a 503 when its store gives up) are counted, not timed. The CPU time
each server and the client spend per answered turn (from ``/proc``) is what
bounds throughput on a small machine, where both share the cores.
A third server, the *floor* (``bench/floor_app.py``: uvicorn with a no-op app
that makes one round trip through a worker thread per request), runs in the
same alternation: the most turns/s and the least latency any Python server
gets from this machine under the same load (``--no-floor`` leaves it out).
On the SQLite store the floor is durable: its worker thread commits each
request's body to an SQLite file (WAL, ``synchronous=FULL``, group commit)
before it answers, the least a server pays here for a turn on disk.
Targets: saturated throughput at the highest level >= 3x the baseline's;
paced overhead p99 at 200 sessions <= 5 ms.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from lmchat import Session
from lmchat.backends import GenerationRequest, SamplingParams
from lmchat.backends.echo import EchoBackend

from .common import ROOT, TEMPLATE, answering, question, save, start_serve, table

#: the server as it stood before issue 12 (a thread per turn, whole snapshots, the event loop busy)
BASELINE = "82c288f"


def echo_seconds(turns: int, repeat: int = 50) -> float:
    """Mean time of the echo backend's generate() per turn, in-process, on the benchmark's conversations."""
    backend, samples = EchoBackend(), []
    for r in range(repeat):
        session = Session(TEMPLATE)
        params = SamplingParams.from_template(session.template)
        for t in range(turns):
            request = GenerationRequest.from_session(session, session.prompt(question(r, t)), params)
            started = time.perf_counter()
            chunks = list(backend.generate(request))
            samples.append(time.perf_counter() - started)
            session.commit("".join(c.text for c in chunks), stop=chunks[-1].stop)
        backend.drop(session.session_id)
    return statistics.mean(samples)


#: the name of the floor server among the measured ones
FLOOR = "floor"


def start_server(source: str, port: int, store: str, max_active: int) -> subprocess.Popen:
    """``lmchat serve`` from the tree at ``source`` (its own package first on the path); the floor app for
    :data:`FLOOR`."""
    if source == FLOOR:
        return start_floor(port, store)
    return start_serve(["--backend", "echo", "--template", TEMPLATE, "--store", store, "--max-active", str(max_active)],
                       port, source=Path(source))


def start_floor(port: int, store: str) -> subprocess.Popen:
    """The floor app; on an SQLite store, durable: each request's body committed to its file before the answer."""
    durable = ["--sqlite", store.removeprefix("sqlite:")] if store.startswith("sqlite:") else []
    proc = subprocess.Popen([sys.executable, "-m", "bench.floor_app", "--port", str(port), *durable], cwd=ROOT,
                            stdout=subprocess.DEVNULL)
    return answering(proc, port, "the floor app", seconds=60)


def load(url: str, sessions: int, turns: int, think: float, tag: str) -> dict:
    """Run one level in a client process; its latencies (seconds) and wall time."""
    out = subprocess.run([sys.executable, "-m", "bench.load", url, str(sessions), str(turns), str(think), tag],
                         cwd=ROOT, capture_output=True, text=True, timeout=3600)
    if out.returncode != 0:
        raise RuntimeError(f"load client failed: {out.stderr[-2000:]}")
    return json.loads(out.stdout)


def server_histogram(url: str) -> dict[str, float]:
    """The server's own latency histogram of the interactive route: upper bound -> cumulative count."""
    from prometheus_client.parser import text_string_to_metric_families  # the serve extra's

    text = httpx.get(url + "/metrics").text
    return {s.labels["le"]: s.value for f in text_string_to_metric_families(text) for s in f.samples
            if s.name == "lmchat_http_request_duration_seconds_bucket" and s.labels["route"] == "/v1/chat/interactive"}


def histogram_quantile(before: dict[str, float], after: dict[str, float], q: float) -> str | None:
    if not after:  # the floor keeps no histogram
        return None
    counts = [(bound, after[bound] - before.get(bound, 0.0)) for bound in after]
    total = counts[-1][1]
    return next(bound for bound, n in counts if n >= q * total)


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def store_for(spec: str, name: str, scratch: str) -> str:
    """Each server its own store: ``sqlite`` alone means a fresh file in ``scratch`` (the baseline cannot read a
    newer schema, and neither should start with the other's sessions)."""
    return f"sqlite:{Path(scratch) / (name + '.db')}" if spec == "sqlite" else spec


def cpu_seconds(pid: int) -> float | None:
    """User + system CPU time of a process so far (Linux ``/proc``; None elsewhere)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def measure(servers: dict[str, str], store: str, args, levels: list[int], echo: float) -> list[dict]:
    """Every level on every server (``name -> source tree``), the servers up side by side and each level
    run on them in alternation, ``--repeat`` times: a slow spell of the machine falls on both, not on
    whichever happened to run then. Throughput is the median of the repeats; latencies are pooled."""
    records = []
    # fresh servers and stores for each kind of load: the baseline leaks two descriptors per SQLite turn,
    # and the turns of one kind must not make it fail the other's
    for kind, think in (("paced", args.think), ("saturated", 0.0)):
        with tempfile.TemporaryDirectory(prefix="lmchat-bench-store-") as scratch:
            procs: dict[str, subprocess.Popen] = {}
            try:
                for i, (name, source) in enumerate(servers.items()):
                    procs[name] = start_server(source, args.port + i, store_for(store, name, scratch),
                                               max_active=max(levels) + 8)
                    load(url_of(args, i), 4, 3, 0, "warmup")
                for n in levels:
                    runs: dict[str, list[dict]] = {name: [] for name in servers}
                    for rep in range(args.repeat):
                        for i, name in enumerate(servers):
                            runs[name].append(one_level(url_of(args, i), procs[name].pid, n, kind, think, args,
                                                        f"{name}-{kind}-{rep}"))
                    records += [summary(name, store, kind, n, runs[name], echo) for name in servers]
            finally:
                for proc in procs.values():
                    proc.terminate()
                    proc.wait(timeout=20)
    return records


def url_of(args, i: int) -> str:
    return f"http://127.0.0.1:{args.port + i}"


def one_level(url: str, pid: int, n: int, kind: str, think: float, args, tag: str) -> dict:
    turns = args.turns if think else max(args.turns, 200 // n)
    before, cpu = server_histogram(url), cpu_seconds(pid)
    result = load(url, n, turns, think, tag)
    after = cpu_seconds(pid)
    return {**result, "histogram": (before, server_histogram(url)),
            "server_cpu_s": None if cpu is None else after - cpu}


def summary(name: str, store: str, kind: str, n: int, runs: list[dict], echo: float) -> dict:
    latencies = [x for r in runs for x in r["latencies"]]
    answered = max(1, len(latencies))
    failed: dict[str, int] = {}
    for r in runs:
        for status, count in r["failed"].items():
            failed[status] = failed.get(status, 0) + count
    # the floor answers at once: its overhead is its whole latency
    echo = 0.0 if name == FLOOR else echo
    before = {bound: sum(r["histogram"][0].get(bound, 0.0) for r in runs) for bound in runs[0]["histogram"][1]}
    after = {bound: sum(r["histogram"][1][bound] for r in runs) for bound in runs[0]["histogram"][1]}
    cpu = None if any(r["server_cpu_s"] is None for r in runs) else sum(r["server_cpu_s"] for r in runs)
    p99 = pct(latencies, 0.99)
    return {"server": name, "store": store, "load": kind, "sessions": n, "requests": len(latencies),
            "repeats": len(runs), "failed": failed, "failed_n": sum(failed.values()),
            "first_error": next((r["first_error"] for r in runs if r["first_error"]), None),
            "req_per_s": statistics.median(len(r["latencies"]) / r["wall_s"] for r in runs),
            "req_per_s_runs": [len(r["latencies"]) / r["wall_s"] for r in runs],
            "p50_s": pct(latencies, 0.5), "p99_s": p99, "overhead_p99_s": p99 - echo,
            "server_p99_le_s": histogram_quantile(before, after, 0.99),
            "server_cpu_ms": None if cpu is None else cpu / answered * 1e3,
            "client_cpu_ms": sum(r["client_cpu_s"] for r in runs) / answered * 1e3}


def row(r: dict) -> list:
    bound = r["server_p99_le_s"]
    server_p99 = "-" if bound is None else f"<= {float(bound) * 1e3:g}" if bound != "+Inf" else "> 60000"
    # /proc counts CPU time in ticks (10 ms): a level of a few dozen turns cannot be resolved per turn
    cpu = "-" if r["server_cpu_ms"] is None or r["requests"] < 200 else f"{r['server_cpu_ms']:.2f}"
    return [r["server"], r["store"], r["load"], r["sessions"], r["requests"], r["failed_n"], f"{r['req_per_s']:.0f}",
            f"{r['p50_s'] * 1e3:.2f}", f"{r['p99_s'] * 1e3:.2f}", f"{r['overhead_p99_s'] * 1e3:.2f}", server_p99,
            cpu, f"{r['client_cpu_ms']:.2f}" if r["requests"] >= 200 else "-"]


def verdicts_for(records: list[dict], store: str, top: int) -> list[str]:
    def find(server: str, kind: str, n: int) -> dict | None:
        wanted = (server, store, kind, n)
        return next((r for r in records if (r["server"], r["store"], r["load"], r["sessions"]) == wanted), None)

    out = []
    current, base = find("current", "saturated", top), find("baseline", "saturated", top)
    if current and base:
        ratio = current["req_per_s"] / base["req_per_s"]
        failed = "".join(f" ({r['failed_n']} of the {who}'s turns failed)" for who, r in
                         (("current server", current), ("baseline", base)) if r["failed_n"])
        out.append(f"{store}: saturated throughput at {top} sessions: {current['req_per_s']:.0f} vs "
                   f"{base['req_per_s']:.0f} answered turns/s = {ratio:.2f}x the baseline{failed} (>= 3x): "
                   f"{'met' if ratio >= 3 else 'NOT met'}")
        if current["server_cpu_ms"] and base["server_cpu_ms"]:
            cores = os.cpu_count() or 1
            ceiling = cores / (current["server_cpu_ms"] + current["client_cpu_ms"]) * 1e3
            ours, theirs = current["server_cpu_ms"], base["server_cpu_ms"]
            out.append(f"{store}: CPU per answered turn at {top} saturated sessions: server {ours:.2f} ms vs the "
                       f"baseline's {theirs:.2f} ms (the baseline spends {theirs / ours:.2f}x as much), client "
                       f"{current['client_cpu_ms']:.2f} ms: {cores} cores shared by the server and its client cap "
                       f"this machine at about {ceiling:.0f} turns/s")
    floor = find(FLOOR, "saturated", top)
    if current and base and floor:
        what = "a durable SQLite commit" if store.startswith("sqlite") else "one worker-thread hop"
        out.append(f"{store}: the floor (no-op app, {what} per turn) answered {floor['req_per_s']:.0f} turns/s "
                   f"saturated: lmchat reaches {current['req_per_s'] / floor['req_per_s']:.0%} of it, the baseline "
                   f"{base['req_per_s'] / floor['req_per_s']:.0%}; 3x the baseline would be "
                   f"{3 * base['req_per_s'] / floor['req_per_s']:.0%} of the floor")
    paced, floor = find("current", "paced", 200), find(FLOOR, "paced", 200)
    if paced:
        out.append(f"{store}: paced overhead p99 at 200 sessions {paced['overhead_p99_s'] * 1e3:.2f} ms (<= 5 ms): "
                   f"{'met' if paced['overhead_p99_s'] <= 0.005 else 'NOT met'}"
                   + (f"; the floor's own p99 under the same load {floor['p99_s'] * 1e3:.2f} ms (p50 "
                      f"{floor['p50_s'] * 1e3:.2f}, lmchat's {paced['p50_s'] * 1e3:.2f})" if floor else ""))
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench server", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sessions", default="1,50,200", help="concurrent sessions per level")
    p.add_argument("--turns", type=int, default=10, help="turns per session")
    p.add_argument("--think", type=float, default=1.0, help="mean think time between turns (paced load), seconds")
    p.add_argument("--store", default="memory,sqlite",
                   help="the servers' stores, comma-separated, each measured in turn: memory, sqlite (a fresh file "
                        "per server, `lmchat serve`'s default kind), sqlite:PATH, redis://...")
    p.add_argument("--baseline", default=BASELINE, help=f"git revision to compare with (default {BASELINE}); "
                                                         "'none' measures this tree alone")
    p.add_argument("--no-floor", action="store_true", help="leave out the floor server (bench/floor_app.py)")
    p.add_argument("--repeat", type=int, default=3, help="runs of each level on each server, alternating")
    p.add_argument("--port", type=int, default=18777)
    args = p.parse_args(argv)
    levels = [int(n) for n in args.sessions.split(",")]
    stores = args.store.split(",")
    echo = echo_seconds(args.turns)
    worktree = None
    servers = {"current": str(ROOT)}
    if args.baseline != "none":
        worktree = tempfile.mkdtemp(prefix="lmchat-baseline-")
        subprocess.run(["git", "worktree", "add", "--detach", worktree, args.baseline], cwd=ROOT, check=True,
                       capture_output=True)
        servers["baseline"] = worktree
    if not args.no_floor:
        servers[FLOOR] = FLOOR
    records: list[dict] = []
    try:
        for store in stores:
            records += measure(servers, store, args, levels, echo)
    finally:
        if worktree:
            subprocess.run(["git", "worktree", "remove", "--force", worktree], cwd=ROOT, capture_output=True)
            shutil.rmtree(worktree, ignore_errors=True)
    print(f"echo backend, template {TEMPLATE}, {args.turns} turns per session, think time mean {args.think}s "
          f"(paced); echo's own time {echo * 1e3:.3f} ms per turn; baseline {args.baseline}; each level "
          f"{args.repeat} times per server, alternating (turns/s: the median run; latencies pooled); "
          f"{os.cpu_count()} cores; CPU per answered turn from /proc\n")
    print(table(["server", "store", "load", "sessions", "answered", "failed", "turns/s", "p50 ms", "p99 ms",
                 "overhead p99 ms", "server-side p99 ms", "server CPU ms/turn", "client CPU ms/turn"],
                [row(r) for r in records]))
    errors = sorted({f"{r['server']} ({r['store']}): {r['first_error']}" for r in records if r["first_error"]})
    if errors:
        print("\nfirst error of each server that failed turns:\n" + "\n".join(errors))
    verdicts = [v for store in stores for v in verdicts_for(records, store, max(levels))]
    print("\n" + "\n".join(verdicts))
    payload = {"stores": stores, "turns": args.turns, "think_s": args.think, "echo_s": echo, "repeat": args.repeat,
               "baseline": args.baseline, "rows": records, "verdicts": verdicts}
    print(f"results: {save('server', payload)}")
    return 0
