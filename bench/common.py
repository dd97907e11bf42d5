"""Timing helpers shared by the benchmarks."""
from __future__ import annotations

import json
import os
import platform
import statistics
import subprocess
import time
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"


def median_time(fn, repeat: int = 50) -> float:
    """Median wall time of ``fn()`` in seconds (after one warm-up call)."""
    fn()
    samples = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t0)
    return statistics.median(samples)


def machine() -> dict:
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    except OSError:
        commit = "unknown"
    return {"python": platform.python_version(), "machine": platform.machine(), "cpus": os.cpu_count(), "commit": commit}


def save(name: str, payload: dict) -> Path:
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"{name}.json"
    path.write_text(json.dumps({"machine": machine(), **payload}, indent=2) + "\n")
    return path


def table(header: list[str], rows: list[list]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)
