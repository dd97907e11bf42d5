"""What llama.cpp itself gains from decoding several sequences in one batch, on this machine.

The ceiling for ``python -m bench engine``'s concurrent-sessions figure: no
lmchat at all, only llama.cpp through llama-cpp-python's low-level bindings,
with the context the llamacpp backend creates (a KV stream per sequence, the
same batch size, thread count and attention). Each of ``n_seq`` sequences
gets a short prompt; then, alternately, one sequence decodes ``steps``
tokens alone (one ``llama_decode`` of one token per step) and all of them
decode ``steps`` tokens together (one ``llama_decode`` of ``n_seq`` tokens
per step). Tokens are fixed ids: sampling is not part of the engine's cost.
``python -m bench llama_batch [--model GGUF]`` prints it alone (e.g. on the
larger model ``python -m bench random_gguf`` writes).
"""
from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

PROMPT = 48  # tokens each sequence holds before decoding starts


def batched_decode(path: Path, threads: int, n_seq: int, steps: int = 64, repeat: int = 3) -> dict:
    from lmchat.backends.llamacpp._lib import lib, load_model

    L = lib()
    model = load_model(path)
    params = L.llama_context_default_params()
    params.n_ctx = n_seq * 4096
    params.n_batch = params.n_ubatch = 512
    params.n_seq_max = n_seq
    params.n_threads = params.n_threads_batch = threads
    params.kv_unified = False
    params.flash_attn_type = L.LLAMA_FLASH_ATTN_TYPE_DISABLED
    params.no_perf = True
    ctx = L.llama_init_from_model(model, params)
    batch = L.llama_batch_init(512, 0, 1)
    memory = L.llama_get_memory(ctx)

    def decode(entries: list[tuple[int, int, int, bool]]) -> None:  # (token, position, sequence, logits)
        batch.n_tokens = len(entries)
        for i, (token, pos, seq, logits) in enumerate(entries):
            batch.token[i], batch.pos[i], batch.n_seq_id[i] = token, pos, 1
            batch.seq_id[i][0], batch.logits[i] = seq, logits
        if L.llama_decode(ctx, batch) != 0:
            raise RuntimeError("llama_decode failed")

    def run(seqs: range) -> float:
        """Tokens per second over ``steps`` steps of every sequence in ``seqs``, from a fresh prompt each."""
        for s in seqs:
            L.llama_memory_seq_rm(memory, s, -1, -1)
            decode([(100 + i, i, s, i == PROMPT - 1) for i in range(PROMPT)])
        started = time.perf_counter()
        for step in range(steps):
            decode([(200 + step, PROMPT + step, s, True) for s in seqs])
        return len(seqs) * steps / (time.perf_counter() - started)

    try:
        run(range(n_seq))  # warm up
        one, many = [], []
        for _ in range(repeat):
            one.append(run(range(1)))
            many.append(run(range(n_seq)))
    finally:
        L.llama_batch_free(batch)
        L.llama_free(ctx)
        L.llama_model_free(model)
    one_rate, many_rate = statistics.median(one), statistics.median(many)
    return {"sequences": n_seq, "steps": steps, "one_tok_s": one_rate, "batched_tok_s": many_rate,
            "ratio": many_rate / one_rate}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench llama_batch", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", type=Path, help="a GGUF file (default: the bundled SmolLM2)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--sequences", type=int, default=8)
    p.add_argument("--repeat", type=int, default=3)
    args = p.parse_args(argv)
    if args.model is None:
        from lmchat.backends.bundled import default_gguf

        args.model = default_gguf()
    r = batched_decode(args.model, args.threads, args.sequences, repeat=args.repeat)
    print(f"{args.model.name}, {args.threads} threads: one sequence {r['one_tok_s']:.1f} tokens/s, "
          f"{r['sequences']} in one batch {r['batched_tok_s']:.1f} tokens/s ({r['ratio']:.2f}x)")
    return 0
