"""``GET /metrics``: the Prometheus text exposition format (version 0.0.4), written by ``prometheus_client``.

Why the library: it is Prometheus's own client, so the text is what Prometheus reads, kept so as the format
moves: help texts and label values escaped as the format says (a route or an error type holding a quote,
a backslash or a newline), numbers written as Go writes them, a counter's HELP and TYPE named with its
``_total`` like its samples (else parsers read them as untyped).

Each app holds a :class:`~prometheus_client.CollectorRegistry` of its own (:func:`registry`), not the
library's global one: several apps in one process (the tests, an application embedding two) would mix their
counts there. Its two collectors read at scrape time: :class:`ManagerCollector` the session manager's counters
and, through it, the engine's KV tiers; :class:`RequestStats` the requests the guard counted by route. Both
yield ``*MetricFamily`` records given no creation time, so no ``_created`` series appears (not the global
``disable_created_metrics()``, which would change every other registry of the process) and the names stay
those docs/server.md lists; tests/test_serve_metrics.py checks each name, type, help text and label.
"""
from __future__ import annotations

import bisect
import threading
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric

#: request latency buckets (seconds): fine at the low end, where server overhead lives
REQUEST_BUCKETS = (0.001, 0.002, 0.003, 0.005, 0.0075, 0.01, 0.015, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
                   30.0, 60.0)
#: the manager's metrics (:meth:`SessionManager.metrics`): plain data its collector reads at each scrape
# Any: the manager's snapshot and the engine's stats(): JSON of several shapes, read by name below
ManagerMetrics = Mapping[str, Any]


class RequestStats:
    """Requests by route and status, and a latency histogram per route (thread-safe); a collector of
    :func:`registry`."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.counts: Counter[tuple[str, str, int]] = Counter()
        self._hist: dict[str, list[float]] = {}  # route -> [bucket counts..., sum]

    def record(self, method: str, route: str, status: int, seconds: float) -> None:
        with self._lock:
            self.counts[(method, route, status)] += 1
            hist = self._hist.get(route)
            if hist is None:  # not setdefault: its default list would be built for every request
                hist = self._hist[route] = [0] * (len(REQUEST_BUCKETS) + 1) + [0.0]
            hist[bisect.bisect_left(REQUEST_BUCKETS, seconds)] += 1
            hist[-1] += seconds

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            counts, hist = dict(self.counts), {k: list(v) for k, v in self._hist.items()}
        requests = CounterMetricFamily("lmchat_http_requests_total", "HTTP requests by method, route and status",
                                       labels=("method", "route", "status"))
        for (method, route, status), n in sorted(counts.items()):
            requests.add_metric((method, route, str(status)), n)
        yield requests
        latency = HistogramMetricFamily("lmchat_http_request_duration_seconds",
                                        "Time from the request to the last byte of the response, by route",
                                        labels=("route",))
        for route, values in sorted(hist.items()):
            latency.add_metric((route,), _cumulative(values[:-1]), values[-1])
        yield latency


class ManagerCollector:
    """The session manager's metrics, read when scraped (``read``: :meth:`SessionManager.metrics`, which waits
    for the engine's current step: scrape off the event loop)."""

    def __init__(self, read: Callable[[], ManagerMetrics]) -> None:
        self.read = read

    def collect(self) -> Iterator[Metric]:
        manager = self.read()
        for name, family, help_text in (
            ("sessions_in_memory", GaugeMetricFamily, "Sessions held in memory (the store may hold more)"),
            ("sessions_active", GaugeMetricFamily, "Turns running now"),
            ("turns_total", CounterMetricFamily, "Turns committed"),
            ("tokens_prefilled_total", CounterMetricFamily,
             "Prompt tokens the backend computed (characters without a tokenizer)"),
            ("tokens_reused_total", CounterMetricFamily, "Prompt tokens served from the backend's cache"),
            ("sessions_loaded_total", CounterMetricFamily, "Sessions loaded from the store into memory"),
            ("sessions_evicted_total", CounterMetricFamily, "Idle sessions evicted from memory"),
        ):
            if name in manager:
                yield family(f"lmchat_{name}", help_text, value=manager[name])
        latency = manager.get("turn_latency_seconds")
        if latency:
            yield HistogramMetricFamily("lmchat_turn_latency_seconds",
                                        "Turn time, from the request to the saved commit",
                                        buckets=[(str(le), n) for le, n in latency["buckets"]],
                                        sum_value=latency["sum"])
        if manager.get("kv"):
            yield from _kv(manager["kv"])
        errors = CounterMetricFamily("lmchat_errors_total", "Errors raised by the session manager, by type",
                                     labels=("type",))
        for kind, n in sorted(manager.get("errors", {}).items()):
            errors.add_metric((kind,), n)
        yield errors


def registry(manager: Callable[[], ManagerMetrics], requests: RequestStats) -> CollectorRegistry:
    """One app's registry: ``manager`` read at each scrape, ``requests`` as the guard counts them."""
    out = CollectorRegistry(auto_describe=False)
    out.register(ManagerCollector(manager))
    out.register(requests)
    return out


def exposition(metrics: CollectorRegistry) -> str:
    """The text ``GET /metrics`` answers (blocking: it reads the manager, which waits for the engine)."""
    return generate_latest(metrics).decode()


def _kv(kv: Mapping[str, Any]) -> Iterator[Metric]:
    """The engine's KV tiers (a backend that is a :class:`~lmchat.backends.base.PrefixCache`)."""
    tokens = CounterMetricFamily(
        "lmchat_kv_tokens_total", "Prompt tokens by where they came from: session (its own sequence), resident "
        "(another sequence), host, disk, or prefilled", labels=("source",))
    for source in ("session", "resident", "host", "disk", "shared", "prefilled"):
        tokens.add_metric((source,), kv["tokens_by_source"].get(source, 0))
    yield tokens
    tiers = {"resident": {"tokens": kv["resident_tokens"], "entries": kv["resident"]},
             "host": {"tokens": kv["host_tokens"], "bytes": kv["host_bytes"], "budget": kv["host_budget"],
                      "entries": kv["host_sessions"]}}
    if "disk_files" in kv:
        tiers["disk"] = {"tokens": kv["disk_tokens"], "bytes": kv["disk_bytes"], "budget": kv["disk_budget"],
                         "entries": kv["disk_files"]}
    for name, help_text, key in (
        ("lmchat_kv_held_tokens", "Tokens whose keys and values a tier holds", "tokens"),
        ("lmchat_kv_bytes", "Bytes a tier holds (resident: allocated at start, not counted)", "bytes"),
        ("lmchat_kv_budget_bytes", "The most a tier may hold", "budget"),
        ("lmchat_kv_entries", "States a tier holds (resident: sequences in use)", "entries"),
    ):
        gauge = GaugeMetricFamily(name, help_text, labels=("tier",))
        for tier, values in tiers.items():
            if key in values:
                gauge.add_metric((tier,), values[key])
        yield gauge
    yield CounterMetricFamily("lmchat_kv_settled_tokens_total", "Decoded answer tokens prefilled again while the "
                              "engine had spare capacity (the cache then holds what a prefill computes)",
                              value=kv.get("settled_tokens", 0))
    probe = kv.get("step_probe")
    if probe is not None:  # the llama.cpp engine's start-up probe (docs/backends.md, "Which steps are exact")
        exact = GaugeMetricFamily("lmchat_llamacpp_step_exact", "1 if llama_decode steps of this many rows per "
                                  "sequence give a prefill's logits bit for bit", labels=("rows",))
        for rows, key in (("1", "one_row_exact"), ("2", "two_row_exact")):
            exact.add_metric((rows,), int(probe[key]))
        yield exact
        yield GaugeMetricFamily("lmchat_llamacpp_pair_rows", "1 if the engine gives every sequence two rows per "
                                "llama_decode (one row is inexact)", value=int(probe["pair_rows"]))
        yield GaugeMetricFamily("lmchat_llamacpp_flash_attn", "1 if attention runs llama.cpp's flash-attention "
                                "kernel (on where the build computes it row by row)", value=int(kv["flash_attn"]))
    yield GaugeMetricFamily("lmchat_kv_orphans", "Ended sessions' states kept as prefixes (resident or host)",
                            value=kv["orphans"])
    misses = CounterMetricFamily("lmchat_kv_misses_total", "Held prefixes that could not be used, by reason",
                                 labels=("reason",))
    for reason, n in sorted(kv["misses_by_reason"].items()):
        misses.add_metric((reason,), n)
    yield misses
    for name, key, help_text in (("lmchat_kv_evictions_total", "evictions", "States evicted from llama.cpp"),
                                 ("lmchat_kv_restores_total", "restores", "States loaded into llama.cpp"),
                                 ("lmchat_kv_disk_writes_total", "disk_writes", "KV files written"),
                                 ("lmchat_kv_disk_write_failures_total", "disk_write_failures",
                                  "KV files that could not be written")):
        if key in kv:
            yield CounterMetricFamily(name, help_text, value=kv[key])


def _cumulative(counts: Sequence[float]) -> list[tuple[str, float]]:
    """Per-bucket counts of :data:`REQUEST_BUCKETS` (and the last, infinite one) as cumulative ``(le, count)``."""
    out, total = [], 0.0
    for bound, n in zip((*REQUEST_BUCKETS, "+Inf"), counts, strict=True):
        total += n
        out.append((str(bound), total))
    return out
