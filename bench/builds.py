"""Builds of llama-cpp-python and OpenMP wait policies side by side: prefill and decode speed, exact steps.

llama.cpp's default CPU build multiplies two or more query rows with
llamafile's sgemm and one row with ggml's own ``vec_dot``, so a one-token
step computes other bits than a prefill (lmchat/backends/llamacpp/probe.py);
the engine then pairs rows, which costs a second row per decoding step. A
build with ``CMAKE_ARGS="-DGGML_LLAMAFILE=OFF"`` takes ggml's kernels for
every row count. This measures what each build costs, on the bundled model
through llama.cpp alone (no lmchat scheduling): a prefill of ``--prompt``
ids, then ``--steps`` one-row steps and ``--steps`` paired steps (the new
id beside the previous one, as the engine decodes where it pairs), with the
thread count given, in alternating rounds (median of each), 8 sessions
decoding together (a context of 8 streams, one row of each per
``llama_decode``, as the engine steps them where one row is exact), plus
the start-up probe's answer for the build.

Each build is a directory that holds the ``llama_cpp`` package (``pip
install --no-deps --target DIR WHEEL``); ``installed`` is the one this
Python imports. ``--wait-policy active,passive`` runs each build under each
``OMP_WAIT_POLICY`` (llama.cpp's threads are OpenMP's: busy-waiting ones
collapse on a CPU other processes share). ``python -m bench builds --build
default=installed --build nolf=/tmp/nolf/site --wait-policy active,passive``.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

from .common import machine, save, table

ROOT = Path(__file__).resolve().parent.parent

#: one measurement, in a process of its own (a build is chosen by sys.path before llama_cpp is imported)
CHILD = r'''
import json, sys, time
from lmchat.backends.bundled import default_gguf
from lmchat.backends.llamacpp._lib import lib, load_model
from lmchat.backends.llamacpp.probe import probe_steps
prompt, steps, threads, flash = (int(a) for a in sys.argv[1:5])
L = lib()
model = load_model(default_gguf())
params = L.llama_context_default_params()
params.n_ctx, params.n_batch, params.n_ubatch, params.n_seq_max = 4096, 512, 512, 1
params.n_threads = params.n_threads_batch = threads
params.kv_unified, params.no_perf = False, True
params.flash_attn_type = L.LLAMA_FLASH_ATTN_TYPE_ENABLED if flash else L.LLAMA_FLASH_ATTN_TYPE_DISABLED
ctx = L.llama_init_from_model(model, params)
batch = L.llama_batch_init(512, 0, 1)
for i in range(512):
    batch.n_seq_id[i] = 1
mem = L.llama_get_memory(ctx)
n_vocab = L.llama_vocab_n_tokens(L.llama_model_get_vocab(model))
probe = probe_steps(L, ctx, batch, mem, n_vocab, 0)
ids = [(11 + 7919 * i) % n_vocab for i in range(prompt + 2 * steps + 2)]

def feed(context, b, rows):
    """One llama_decode of rows (token, position, sequence, logits?), at most 512 (the batches' size)."""
    for i, (token, pos, seq, logits) in enumerate(rows):
        b.token[i], b.pos[i], b.seq_id[i][0], b.logits[i] = token, pos, seq, logits
    b.n_tokens = len(rows)
    assert L.llama_decode(context, b) == 0

def decode(rows):
    feed(ctx, batch, [(token, pos, 0, logits) for token, pos, logits in rows])

def prefill():
    L.llama_memory_seq_rm(mem, 0, -1, -1)
    t = time.perf_counter()
    for start in range(0, prompt, 512):
        end = min(prompt, start + 512)
        decode([(ids[p], p, p == end - 1) for p in range(start, end)])
    return prompt / (time.perf_counter() - t)

def stepped(pair):
    prefill()
    t = time.perf_counter()
    for p in range(prompt, prompt + steps):
        first = p - 1 if pair else p
        L.llama_memory_seq_rm(mem, 0, first, -1)
        decode([(ids[q], q, q == p) for q in range(first, p + 1)])
    return steps / (time.perf_counter() - t)

def together(n_seq):
    """Sessions decoding together, as the engine steps them: a context of n_seq streams, each sequence holding
    its own prompt/4 ids, then one llama_decode a step of one row per sequence; aggregate tok/s."""
    held = prompt // 4
    p = L.llama_context_default_params()
    p.n_ctx, p.n_batch, p.n_ubatch, p.n_seq_max = n_seq * max(2048, held + steps + 256), 512, 512, n_seq
    p.n_threads = p.n_threads_batch = threads
    p.kv_unified, p.no_perf = False, True
    p.flash_attn_type = params.flash_attn_type
    many = L.llama_init_from_model(model, p)
    big = L.llama_batch_init(512, 0, 1)
    for i in range(512):
        big.n_seq_id[i] = 1
    for s in range(n_seq):
        for start in range(0, held, 512):
            end = min(held, start + 512)
            feed(many, big, [(ids[(q + 31 * s) % len(ids)], q, s, q == held - 1) for q in range(start, end)])
    t = time.perf_counter()
    for p_ in range(held, held + steps):
        feed(many, big, [(ids[(p_ + 31 * s) % len(ids)], p_, s, True) for s in range(n_seq)])
    rate = n_seq * steps / (time.perf_counter() - t)
    L.llama_batch_free(big)
    L.llama_free(many)
    return rate

out = {"prefill": prefill(), "decode_one_row": stepped(False), "decode_paired": stepped(True),
       "decode_8_sessions": together(8), "one_row_exact": probe.one_row_exact, "two_row_exact": probe.two_row_exact}
print(json.dumps(out))
'''


def measure(site: str, policy: str, flash: bool, prompt: int, steps: int, threads: int) -> dict:
    env = dict(os.environ)
    if policy:
        env["OMP_WAIT_POLICY"] = policy
    if site != "installed":
        env["PYTHONPATH"] = os.pathsep.join([site, str(ROOT), env.get("PYTHONPATH", "")])
    out = subprocess.run([sys.executable, "-c", CHILD, str(prompt), str(steps), str(threads), str(int(flash))], env=env,
                         capture_output=True, text=True, check=True, cwd=ROOT)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench builds", description=__doc__.split("\n\n")[0])
    parser.add_argument("--build", action="append", required=True, metavar="NAME=DIR",
                        help="a build: a name and the directory holding its llama_cpp package, or 'installed'")
    parser.add_argument("--wait-policy", default="", metavar="P,P",
                        help="OMP_WAIT_POLICY values to run each build under (default: as lmchat sets it)")
    parser.add_argument("--flash-attn", default="off", metavar="off,on",
                        help="attention kernels to run each build with: off (the engine's default), on, or both")
    parser.add_argument("--prompt", type=int, default=1000, help="ids prefilled (default 1000)")
    parser.add_argument("--steps", type=int, default=48, help="decoding steps of each kind (default 48)")
    parser.add_argument("--threads", type=int, default=2, help="llama.cpp threads (default 2)")
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds (default 3)")
    args = parser.parse_args(argv)
    builds = dict(b.split("=", 1) for b in args.build)
    policies = args.wait_policy.split(",") if args.wait_policy else [""]
    flashes = [f == "on" for f in args.flash_attn.split(",")]
    variants = {" ".join(filter(None, [name, policy, "fa" if flash else ""])): (site, policy, flash)
                for name, site in builds.items() for policy in policies for flash in flashes}
    runs: dict[str, list[dict]] = {name: [] for name in variants}
    loads = []
    for _ in range(args.rounds):
        for name, (site, policy, flash) in variants.items():
            loads.append(os.getloadavg()[0])
            runs[name].append(measure(site, policy, flash, args.prompt, args.steps, args.threads))
    rows, result = [], {}
    for name, measured in runs.items():
        median = {k: statistics.median(r[k] for r in measured) for k in ("prefill", "decode_one_row",
                                                                         "decode_paired", "decode_8_sessions")}
        exact = measured[0]["one_row_exact"], measured[0]["two_row_exact"]
        result[name] = {**median, "one_row_exact": exact[0], "two_row_exact": exact[1], "runs": measured}
        # what the engine decodes with: one row where one row is exact, paired where only two are
        engine = median["decode_one_row"] if exact[0] else median["decode_paired"]
        rows.append([name, f"{median['prefill']:.0f}", f"{median['decode_one_row']:.1f}",
                     f"{median['decode_paired']:.1f}", f"{engine:.1f}", f"{median['decode_8_sessions']:.1f}",
                     "yes" if exact[0] else "no",
                     "yes" if exact[1] else "no"])
    print(table(["build", "prefill tok/s", "1-row tok/s", "paired tok/s", "engine tok/s",
                 "8 sessions tok/s", "1 row exact",
                 "2 rows exact"], rows))
    load = f"load average {min(loads):.1f}-{max(loads):.1f}"
    print(f"{args.prompt}-id prefill, {args.steps} steps, {args.threads} threads, medians of {args.rounds} "
          f"alternating rounds; {load}")
    path = save("builds", {"machine": machine(), "load": load, "args": vars(args), "builds": result})
    print(f"saved {path}")
    return 0
