"""Where a run's time goes, worker by worker: ``LMCHAT_TEST_TIMELINE=FILE python -m pytest -n auto`` appends a line
per test (its node id, its worker, when it started and ended, setup and teardown included, and the CPU seconds its
worker and the worker's children spent meanwhile) and per worker (when its collection ended); ``python -m
tests.timeline FILE`` prints each worker's collection, busy and idle time, the files that take longest and what ran
last. ``--durations`` says which tests are slow; this says whether the workers waited for each other, which is
what the wall time of ``-n auto`` depends on, and how much of a file's time is computing rather than waiting (a
sleep, a timeout, another process). A child's CPU counts once it has been waited for: a module's server is
counted in the test that stops it.
"""
from __future__ import annotations

import collections
import json
import os
import sys
import time
from typing import Any

import pytest


class Recorder:
    """The pytest plugin (tests/conftest.py registers it when ``LMCHAT_TEST_TIMELINE`` names a file)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.worker = os.environ.get("PYTEST_XDIST_WORKER", "main")

    def _write(self, record: dict[str, object]) -> None:
        with open(self.path, "a", encoding="utf-8") as f:  # one short line per write: workers do not interleave
            f.write(json.dumps({"w": self.worker, **record}) + "\n")

    def pytest_sessionstart(self) -> None:
        self._write({"start": time.time()})

    def pytest_collection_finish(self) -> None:
        self._write({"collected": time.time()})

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item, nextitem: pytest.Item | None) -> object:
        started, cpu = time.time(), cpu_seconds()
        try:
            return (yield)
        finally:
            self._write({"id": item.nodeid, "t0": started, "t1": time.time(), "cpu": cpu_seconds() - cpu})


def cpu_seconds() -> float:
    """This process's CPU time and its waited-for children's, user and system."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def summary(lines: list[str], top: int = 25) -> str:
    records = [json.loads(line) for line in lines if line.strip()]
    tests = [r for r in records if "id" in r]
    if not tests:
        return "no test ran"
    start = min(r.get("start", r.get("t0", 0)) for r in records if "start" in r or "t0" in r)
    end = max(r["t1"] for r in tests)
    out = [f"wall {end - start:.0f} s, {len(tests)} tests"]
    for worker in sorted({r["w"] for r in tests}):
        mine = [r for r in tests if r["w"] == worker]
        collected = min((r["collected"] for r in records if r["w"] == worker and "collected" in r), default=start)
        busy = sum(r["t1"] - r["t0"] for r in mine)
        last = max(r["t1"] for r in mine)
        out.append(f"{worker}: collection {collected - start:.0f} s, busy {busy:.0f} s (CPU {cpu(mine):.0f} s), "
                   f"idle {last - collected - busy:.0f} s, done at {last - start:.0f} s ({len(mine)} tests)")
    by_file: dict[str, list[dict[str, Any]]] = collections.defaultdict(list)
    for r in tests:
        by_file[r["id"].split("::", 1)[0]].append(r)
    seconds = {name: sum(r["t1"] - r["t0"] for r in rs) for name, rs in by_file.items()}
    out.append(f"\nfiles, by time (of {sum(seconds.values()):.0f} s; CPU {cpu(tests):.0f} s):")
    out += [f"{seconds[name]:7.1f} s  CPU {cpu(by_file[name]):6.1f} s  {name}"
            for name in sorted(seconds, key=seconds.__getitem__, reverse=True)[:top]]
    out.append("\nthe last tests to end:")
    out += [f"{r['t0'] - start:6.0f}-{r['t1'] - start:.0f} s  {r['w']}  {r['id']}"
            for r in sorted(tests, key=lambda r: r["t1"])[-8:]]
    return "\n".join(out)


def cpu(tests: list[dict[str, Any]]) -> float:
    return float(sum(r.get("cpu", 0.0) for r in tests))


if __name__ == "__main__":
    with open(sys.argv[1], encoding="utf-8") as f:
        print(summary(f.readlines()))
