"""Counters and a latency histogram for :meth:`SessionManager.metrics` (Prometheus-shaped, no dependency)."""
from __future__ import annotations

import bisect
import threading
from collections import Counter
from types import TracebackType
from typing import Any

from ..errors import LmchatError

#: upper bounds (seconds) of the turn latency buckets; a last, infinite one is implied
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


class Metrics:
    """Thread-safe totals; :meth:`snapshot` returns plain data a server can render as it likes."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.counts: Counter[str] = Counter()
        self.errors: Counter[str] = Counter()
        self._buckets = [0] * (len(LATENCY_BUCKETS) + 1)
        self._latency_sum = 0.0
        self._counting = _Counting(self)

    def add(self, **amounts: int) -> None:
        with self._lock:
            self.counts.update(amounts)

    def error(self, exc: BaseException) -> None:
        with self._lock:
            self.errors[type(exc).__name__] += 1

    def counting(self) -> _Counting:
        """``with metrics.counting():`` counts the LmchatErrors raised inside, by type (a public method's
        refusals)."""
        return self._counting

    def turn(self, seconds: float, prefilled: int, reused: int) -> None:
        counts = self.counts
        with self._lock:  # plain increments: Counter.update costs more than the rest of this per turn
            counts["turns_total"] += 1
            counts["tokens_prefilled_total"] += prefilled
            counts["tokens_reused_total"] += reused
            self._buckets[bisect.bisect_left(LATENCY_BUCKETS, seconds)] += 1
            self._latency_sum += seconds

    # Any: counters (ints), the histogram (a dict of lists and numbers) and errors by type: JSON that
    # serve/metrics reads by name
    def snapshot(self) -> dict[str, Any]:
        """Totals, errors by type, and the histogram as cumulative ``[le, count]`` pairs (``le`` "+Inf" last)."""
        with self._lock:
            cumulative, total = [], 0
            for bound, n in zip((*LATENCY_BUCKETS, "+Inf"), self._buckets, strict=True):
                total += n
                cumulative.append([bound, total])
            return {
                "turns_total": self.counts["turns_total"],
                "tokens_prefilled_total": self.counts["tokens_prefilled_total"],
                "tokens_reused_total": self.counts["tokens_reused_total"],
                "sessions_loaded_total": self.counts["sessions_loaded_total"],
                "sessions_evicted_total": self.counts["sessions_evicted_total"],
                "turn_latency_seconds": {"buckets": cumulative, "sum": self._latency_sum, "count": total},
                "errors": dict(self.errors),
            }


class _Counting:
    """What :meth:`Metrics.counting` returns: one object per ``Metrics`` (it keeps no state of its own, so
    nested and concurrent uses share it), cheaper than a generator-based context manager on every turn."""

    __slots__ = ("metrics",)

    def __init__(self, metrics: Metrics):
        self.metrics = metrics

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        if exc is not None and isinstance(exc, LmchatError):
            self.metrics.error(exc)
