"""``GET /metrics``: exactly the families docs/server.md lists (names, types, help texts, labels), read with the
Prometheus reference parser, and each app counting only its own requests."""
from __future__ import annotations

import pytest

parser = pytest.importorskip("prometheus_client.parser")

#: family (as the parser names it: a counter without `_total`) -> type, help text
CORE = {
    "lmchat_sessions_in_memory": ("gauge", "Sessions held in memory (the store may hold more)"),
    "lmchat_sessions_active": ("gauge", "Turns running now"),
    "lmchat_turns": ("counter", "Turns committed"),
    "lmchat_tokens_prefilled": ("counter", "Prompt tokens the backend computed (characters without a tokenizer)"),
    "lmchat_tokens_reused": ("counter", "Prompt tokens served from the backend's cache"),
    "lmchat_sessions_loaded": ("counter", "Sessions loaded from the store into memory"),
    "lmchat_sessions_evicted": ("counter", "Idle sessions evicted from memory"),
    "lmchat_turn_latency_seconds": ("histogram", "Turn time, from the request to the saved commit"),
    "lmchat_errors": ("counter", "Errors raised by the session manager, by type"),
    "lmchat_http_requests": ("counter", "HTTP requests by method, route and status"),
    "lmchat_http_request_duration_seconds": (
        "histogram", "Time from the request to the last byte of the response, by route"),
}
#: the llama.cpp engine's KV tiers and start-up probe
KV = {
    "lmchat_kv_tokens": ("counter", "Prompt tokens by where they came from: session (its own sequence), resident "
                                    "(another sequence), host, disk, or prefilled"),
    "lmchat_kv_held_tokens": ("gauge", "Tokens whose keys and values a tier holds"),
    "lmchat_kv_bytes": ("gauge", "Bytes a tier holds (resident: allocated at start, not counted)"),
    "lmchat_kv_budget_bytes": ("gauge", "The most a tier may hold"),
    "lmchat_kv_entries": ("gauge", "States a tier holds (resident: sequences in use)"),
    "lmchat_kv_settled_tokens": ("counter", "Decoded answer tokens prefilled again while the engine had spare "
                                            "capacity (the cache then holds what a prefill computes)"),
    "lmchat_llamacpp_step_exact": ("gauge", "1 if llama_decode steps of this many rows per sequence give a "
                                            "prefill's logits bit for bit"),
    "lmchat_llamacpp_pair_rows": ("gauge", "1 if the engine gives every sequence two rows per llama_decode "
                                           "(one row is inexact)"),
    "lmchat_llamacpp_flash_attn": ("gauge", "1 if attention runs llama.cpp's flash-attention kernel (on where "
                                            "the build computes it row by row)"),
    "lmchat_kv_orphans": ("gauge", "Ended sessions' states kept as prefixes (resident or host)"),
    "lmchat_kv_misses": ("counter", "Held prefixes that could not be used, by reason"),
    "lmchat_kv_evictions": ("counter", "States evicted from llama.cpp"),
    "lmchat_kv_restores": ("counter", "States loaded into llama.cpp"),
    "lmchat_kv_disk_writes": ("counter", "KV files written"),
    "lmchat_kv_disk_write_failures": ("counter", "KV files that could not be written"),
}
#: sample names as the text writes them -> their label names (a histogram's buckets add `le`)
CORE_SAMPLES = {
    "lmchat_sessions_in_memory": (), "lmchat_sessions_active": (), "lmchat_turns_total": (),
    "lmchat_tokens_prefilled_total": (), "lmchat_tokens_reused_total": (), "lmchat_sessions_loaded_total": (),
    "lmchat_sessions_evicted_total": (), "lmchat_turn_latency_seconds_bucket": ("le",),
    "lmchat_turn_latency_seconds_sum": (), "lmchat_turn_latency_seconds_count": (), "lmchat_errors_total": ("type",),
    "lmchat_http_requests_total": ("method", "route", "status"),
    "lmchat_http_request_duration_seconds_bucket": ("le", "route"),
    "lmchat_http_request_duration_seconds_sum": ("route",), "lmchat_http_request_duration_seconds_count": ("route",),
}
KV_SAMPLES = {
    "lmchat_kv_tokens_total": ("source",), "lmchat_kv_held_tokens": ("tier",), "lmchat_kv_bytes": ("tier",),
    "lmchat_kv_budget_bytes": ("tier",), "lmchat_kv_entries": ("tier",), "lmchat_kv_settled_tokens_total": (),
    "lmchat_llamacpp_step_exact": ("rows",), "lmchat_llamacpp_pair_rows": (), "lmchat_llamacpp_flash_attn": (),
    "lmchat_kv_orphans": (),
    "lmchat_kv_evictions_total": (), "lmchat_kv_restores_total": (), "lmchat_kv_disk_writes_total": (),
    "lmchat_kv_disk_write_failures_total": (),
}


def scrape(http, session: str) -> tuple[str, dict]:
    """/metrics after a turn and a refused lookup (an error the manager counts): its text and its families."""
    body = {"messages": [{"role": "user", "content": "hi"}], "session_id": session, "max_tokens": 4}
    assert http.post("/v1/chat/completions", json=body).status_code == 200
    assert http.get("/v1/sessions/no-such-session").status_code == 404
    reply = http.get("/metrics")
    assert reply.status_code == 200 and reply.headers["content-type"] == "text/plain; version=0.0.4; charset=utf-8"
    return reply.text, {f.name: f for f in parser.text_string_to_metric_families(reply.text)}


def check_names(text: str, families: dict, expected: dict, samples: dict) -> None:
    assert {name: (f.type, f.documentation) for name, f in families.items()} == expected
    written = {s.name: tuple(sorted(s.labels)) for f in families.values() for s in f.samples}
    assert written == samples  # no `_created` series, no other suffix
    # HELP and TYPE name a counter with its `_total`, as its samples are named
    heads = {line.split(" ")[2] for line in text.splitlines() if line.startswith("# ")}
    assert heads == {name + "_total" if kind == "counter" else name for name, (kind, _) in expected.items()}


def test_the_families_names_types_and_help_texts(memory_app):
    text, families = scrape(memory_app.http, "metrics-names")
    check_names(text, families, CORE, CORE_SAMPLES)
    errors = {s.labels["type"]: s.value for s in families["lmchat_errors"].samples}
    assert errors.get("SessionNotFound", 0) >= 1
    counted = {(s.labels["method"], s.labels["route"], s.labels["status"]) for s in
               families["lmchat_http_requests"].samples}
    assert {("POST", "/v1/chat/completions", "200"), ("GET", "/v1/sessions/{session_id}", "404")} <= counted
    buckets = [s for s in families["lmchat_turn_latency_seconds"].samples if s.name.endswith("_bucket")]
    assert buckets[-1].labels["le"] == "+Inf" and [b.value for b in buckets] == sorted(b.value for b in buckets)


def test_each_app_counts_its_own_requests(memory_app, app_client):
    """Two apps in one process (as here, and in an application that builds several) keep their counts apart."""
    def health(http) -> float:
        families = parser.text_string_to_metric_families(http.get("/metrics").text)
        return sum(s.value for f in families if f.name == "lmchat_http_requests" for s in f.samples
                   if s.labels["route"] == "/health")

    before = health(memory_app.http)
    for _ in range(3):
        assert app_client.get("/health").status_code == 200
    assert health(app_client) == 3 and health(memory_app.http) == before


def test_the_llamacpp_engines_families(llama_app):
    text, families = scrape(llama_app.http, "metrics-kv")
    check_names(text, families, {**CORE, **KV}, {**CORE_SAMPLES, **KV_SAMPLES})
    tiers = {s.labels["tier"] for s in families["lmchat_kv_entries"].samples}
    assert tiers == {"resident", "host", "disk"}
    sources = {s.labels["source"] for s in families["lmchat_kv_tokens"].samples}
    assert {"session", "resident", "host", "disk", "prefilled"} <= sources
    assert {s.labels["rows"] for s in families["lmchat_llamacpp_step_exact"].samples} == {"1", "2"}


def test_a_requests_duration_is_its_own(app_client):
    """Each request is counted in the bucket of its own time (the guard once took its response-started flag for
    the clock reading it began at: every request fell in +Inf, and the sum was the machine's uptime)."""
    for _ in range(3):
        assert app_client.get("/health").status_code == 200
    families = parser.text_string_to_metric_families(app_client.get("/metrics").text)
    health = {s.name.rsplit("_", 1)[1] + s.labels.get("le", ""): s.value for f in families
              if f.name == "lmchat_http_request_duration_seconds" for s in f.samples if s.labels["route"] == "/health"}
    assert health["count"] == health["bucket+Inf"] == health["bucket60.0"] == 3, health
    assert 0 < health["sum"] < 60, health
