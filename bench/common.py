"""Timing helpers shared by the benchmarks."""
from __future__ import annotations

import json
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
#: the template of the server benchmarks' echo servers
TEMPLATE = "qwen2.5"


def question(session: int, turn: int) -> str:
    """The user's message of a load's turn ``turn`` in session ``session``."""
    return f"Session {session}, question {turn}: what is {turn} times {session}? Answer in one short sentence."


def median_time(fn, repeat: int = 50) -> float:
    """Median wall time of ``fn()`` in seconds (after one warm-up call)."""
    fn()
    samples = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t0)
    return statistics.median(samples)


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _ram_gib() -> float | None:
    try:
        kib = int(re.search(r"MemTotal:\s+(\d+)", Path("/proc/meminfo").read_text()).group(1))
    except (OSError, AttributeError):
        return None
    return round(kib / 2**20, 1)


def _git(*args: str) -> str:
    try:
        out = subprocess.run(["git", *args], capture_output=True, text=True, cwd=ROOT)
    except OSError:
        return ""
    return out.stdout.strip() if out.returncode == 0 else ""


def machine() -> dict:
    """Where and from which code a result was measured (a dirty tree: HEAD plus uncommitted changes).

    Changes under bench/results/ do not make it dirty: they are results, not code, and ``bench all`` writes
    each one before it measures the next.
    """
    return {"python": platform.python_version(), "machine": platform.machine(), "cpus": os.cpu_count(),
            "cpu_model": _cpu_model(), "ram_gib": _ram_gib(),
            "commit": _git("rev-parse", "--short", "HEAD") or "unknown",
            "dirty": bool(_git("status", "--porcelain", "--untracked-files=no", "--", ".",
                               f":(exclude){RESULTS.relative_to(ROOT).as_posix()}")),
            "date": time.strftime("%Y-%m-%d", time.gmtime())}


def save(name: str, payload: dict) -> Path:
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"{name}.json"
    path.write_text(json.dumps({"machine": machine(), **payload}, indent=2) + "\n")
    return path


def table(header: list[str], rows: list[list]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def start_serve(args: list[str], port: int, *, source: Path = ROOT, seconds: float = 120) -> subprocess.Popen:
    """``lmchat serve --port PORT ARGS`` from the tree at ``source`` (its package first on the path, its own
    data directory, no API keys), once it answers ``/health``."""
    env = {**os.environ, "PYTHONPATH": str(source), "LMCHAT_DATA_DIR": tempfile.mkdtemp(prefix="lmchat-bench-"),
           "LMCHAT_API_KEYS": ""}
    command = [sys.executable, "-m", "lmchat", "serve", "--port", str(port), "--log-level", "warning", *args]
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, cwd=source, env=env)
    return answering(proc, port, f"lmchat serve {' '.join(args)} from {source}", seconds)


def answering(proc: subprocess.Popen, port: int, what: str, seconds: float = 120) -> subprocess.Popen:
    """``proc`` once it answers ``/health`` on ``port``; killed, and a RuntimeError naming ``what``, if it
    does not within ``seconds``."""
    import httpx  # only the server benchmarks need it

    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                return proc
        except httpx.TransportError:
            time.sleep(0.05)
    proc.kill()
    raise RuntimeError(f"{what} did not start")
