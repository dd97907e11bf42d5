"""``GET /metrics``: the Prometheus text exposition format (version 0.0.4), written here.

Two sources: the session manager's counters (sessions, turns, tokens
prefilled vs reused, turn latency) and the server's own per-route request
counts and latency. Written by hand rather than with ``prometheus_client``:
a few dozen lines, and no registry global to share between app instances
(tests run several in one process).
"""
from __future__ import annotations

import bisect
import threading
from typing import Any
from collections import Counter
from collections.abc import Iterable

#: request latency buckets (seconds): fine at the low end, where server overhead lives
REQUEST_BUCKETS = (0.001, 0.002, 0.003, 0.005, 0.0075, 0.01, 0.015, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
                   30.0, 60.0)


class RequestStats:
    """Requests by route and status, and a latency histogram per route (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.counts: Counter[tuple[str, str, int]] = Counter()
        self._hist: dict[str, list[Any]] = {}  # route -> [bucket counts..., sum]

    def record(self, method: str, route: str, status: int, seconds: float) -> None:
        with self._lock:
            self.counts[(method, route, status)] += 1
            hist = self._hist.get(route)
            if hist is None:  # not setdefault: its default list would be built for every request
                hist = self._hist[route] = [0] * (len(REQUEST_BUCKETS) + 1) + [0.0]
            hist[bisect.bisect_left(REQUEST_BUCKETS, seconds)] += 1
            hist[-1] += seconds

    def lines(self) -> list[str]:
        with self._lock:
            counts, hist = dict(self.counts), {k: list(v) for k, v in self._hist.items()}
        out = _head("lmchat_http_requests_total", "counter", "HTTP requests by method, route and status")
        for (method, route, status), n in sorted(counts.items()):
            out.append(f'lmchat_http_requests_total{{method="{method}",route="{_esc(route)}",status="{status}"}} {n}')
        out += _head("lmchat_http_request_duration_seconds", "histogram",
                     "Time from the request to the last byte of the response, by route")
        for route, values in sorted(hist.items()):
            pairs, total = [], 0
            for bound, n in zip((*REQUEST_BUCKETS, "+Inf"), values[:-1]):
                total += n
                pairs.append((bound, total))
            out += _histogram("lmchat_http_request_duration_seconds", pairs, values[-1], total,
                              f'route="{_esc(route)}",')
        return out


def render(manager: dict[str, Any], requests: RequestStats) -> str:
    """The whole exposition: ``manager`` is :meth:`SessionManager.metrics`."""
    out: list[str] = []
    for name, kind, help_text in (
        ("sessions_in_memory", "gauge", "Sessions held in memory (the store may hold more)"),
        ("sessions_active", "gauge", "Turns running now"),
        ("turns_total", "counter", "Turns committed"),
        ("tokens_prefilled_total", "counter", "Prompt tokens the backend computed (characters without a tokenizer)"),
        ("tokens_reused_total", "counter", "Prompt tokens served from the backend's cache"),
        ("sessions_loaded_total", "counter", "Sessions loaded from the store into memory"),
        ("sessions_evicted_total", "counter", "Idle sessions evicted from memory"),
    ):
        if name in manager:
            out += _head(f"lmchat_{name}", kind, help_text)
            out.append(f"lmchat_{name} {manager[name]}")
    latency = manager.get("turn_latency_seconds")
    if latency:
        out += _head("lmchat_turn_latency_seconds", "histogram", "Turn time, from the request to the saved commit")
        out += _histogram("lmchat_turn_latency_seconds", latency["buckets"], latency["sum"], latency["count"])
    out += _kv_lines(manager.get("kv"))
    out += _head("lmchat_errors_total", "counter", "Errors raised by the session manager, by type")
    for kind, n in sorted(manager.get("errors", {}).items()):
        out.append(f'lmchat_errors_total{{type="{_esc(kind)}"}} {n}')
    out += requests.lines()
    return "\n".join(out) + "\n"


def _kv_lines(kv: dict[str, Any] | None) -> list[str]:
    """The engine's KV tiers (a backend that is a :class:`~lmchat.backends.base.PrefixCache`)."""
    if not kv:
        return []
    out = _head("lmchat_kv_tokens_total", "counter",
                "Prompt tokens by where they came from: session (its own sequence), resident (another sequence), "
                "host, disk, or prefilled")
    for source in ("session", "resident", "host", "disk", "prefilled"):
        out.append(f'lmchat_kv_tokens_total{{source="{source}"}} {kv["tokens_by_source"].get(source, 0)}')
    gauges = (("lmchat_kv_held_tokens", "Tokens whose keys and values a tier holds", "tokens"),
              ("lmchat_kv_bytes", "Bytes a tier holds (resident: allocated at start, not counted)", "bytes"),
              ("lmchat_kv_budget_bytes", "The most a tier may hold", "budget"),
              ("lmchat_kv_entries", "States a tier holds (resident: sequences in use)", "entries"))
    tiers = {"resident": {"tokens": kv["resident_tokens"], "entries": kv["resident"]},
             "host": {"tokens": kv["host_tokens"], "bytes": kv["host_bytes"], "budget": kv["host_budget"],
                      "entries": kv["host_sessions"]}}
    if "disk_files" in kv:
        tiers["disk"] = {"tokens": kv["disk_tokens"], "bytes": kv["disk_bytes"], "budget": kv["disk_budget"],
                         "entries": kv["disk_files"]}
    for name, help_text, key in gauges:
        out += _head(name, "gauge", help_text)
        out += [f'{name}{{tier="{tier}"}} {values[key]}' for tier, values in tiers.items() if key in values]
    out += _head("lmchat_kv_settled_tokens_total", "counter",
                 "Decoded answer tokens prefilled again while the engine had spare capacity (the cache then holds "
                 "what a prefill computes)")
    out.append(f"lmchat_kv_settled_tokens_total {kv.get('settled_tokens', 0)}")
    probe = kv.get("step_probe")
    if probe is not None:  # the llama.cpp engine's start-up probe (docs/backends.md, "Which steps are exact")
        out += _head("lmchat_llamacpp_step_exact", "gauge",
                     "1 if llama_decode steps of this many rows per sequence give a prefill's logits bit for bit")
        out += [f'lmchat_llamacpp_step_exact{{rows="{rows}"}} {int(probe[key])}'
                for rows, key in (("1", "one_row_exact"), ("2", "two_row_exact"))]
        out += _head("lmchat_llamacpp_pair_rows", "gauge",
                     "1 if the engine gives every sequence two rows per llama_decode (one row is inexact)")
        out.append(f"lmchat_llamacpp_pair_rows {int(probe['pair_rows'])}")
    out += _head("lmchat_kv_orphans", "gauge", "Ended sessions' states kept as prefixes (resident or host)")
    out.append(f"lmchat_kv_orphans {kv['orphans']}")
    out += _head("lmchat_kv_misses_total", "counter", "Held prefixes that could not be used, by reason")
    out += [f'lmchat_kv_misses_total{{reason="{_esc(r)}"}} {n}' for r, n in sorted(kv["misses_by_reason"].items())]
    for name, key, help_text in (("lmchat_kv_evictions_total", "evictions", "States evicted from llama.cpp"),
                                 ("lmchat_kv_restores_total", "restores", "States loaded into llama.cpp"),
                                 ("lmchat_kv_disk_writes_total", "disk_writes", "KV files written"),
                                 ("lmchat_kv_disk_write_failures_total", "disk_write_failures",
                                  "KV files that could not be written")):
        if key in kv:
            out += _head(name, "counter", help_text)
            out.append(f"{name} {kv[key]}")
    return out


def _head(name: str, kind: str, help_text: str) -> list[str]:
    # a counter's HELP/TYPE name its samples, `_total` included: otherwise parsers read them as untyped
    return [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}"]


def _histogram(name: str, pairs: Iterable[tuple[Any, int]], total_sum: float, count: int, labels: str = ""
               ) -> list[str]:
    out = [f'{name}_bucket{{{labels}le="{bound}"}} {n}' for bound, n in pairs]
    close = f"{{{labels[:-1]}}}" if labels else ""
    return out + [f"{name}_sum{close} {total_sum}", f"{name}_count{close} {count}"]


def _esc(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
