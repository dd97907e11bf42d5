"""A larger GGUF for the engine benchmarks, where no model hub is reachable: ``python -m bench random_gguf OUT``.

A llama-architecture model with random weights (default: 2,048 wide, 16
layers, about 820M parameters, like TinyLlama's shape with SmolLM2's
vocabulary), SmolLM2's tokenizer and chat template copied from the bundled
GGUF, written in F16 with the ``gguf`` package and quantized to Q4_0 by
llama.cpp (``llama_model_quantize``): about 470 MB. Its answers are noise;
its speed is a real model's of that shape. ``python -m bench llama_batch
--model OUT`` then shows what batching gains on a model whose one-token
decode reads 470 MB of weights (the bundled one reads 90 MB).
"""
from __future__ import annotations

import argparse
import ctypes
import time
from pathlib import Path

import numpy as np

from lmchat.backends.bundled import default_gguf


def build(out_f16: Path, n_embd=2048, n_layer=16, n_ff=5632, n_head=32, n_kv=8):
    import gguf

    src = gguf.GGUFReader(str(default_gguf()))
    w = gguf.GGUFWriter(str(out_f16), "llama")
    w.add_name("random-llama")
    w.add_context_length(8192)
    w.add_embedding_length(n_embd)
    w.add_block_count(n_layer)
    w.add_feed_forward_length(n_ff)
    w.add_head_count(n_head)
    w.add_head_count_kv(n_kv)
    w.add_rope_freq_base(100000.0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_dimension_count(n_embd // n_head)
    w.add_file_type(1)  # F16
    f = src.fields  # the bundled model's tokenizer, so that sessions and templates work as on it
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("smollm")
    w.add_token_list(f["tokenizer.ggml.tokens"].contents())
    w.add_token_types(f["tokenizer.ggml.token_type"].contents())
    w.add_token_merges(f["tokenizer.ggml.merges"].contents())
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)
    w.add_pad_token_id(2)
    w.add_add_bos_token(False)
    w.add_add_space_prefix(False)
    w.add_chat_template(f["tokenizer.chat_template"].contents())
    vocab = 49152
    rng = np.random.default_rng(0)
    def rnd(*shape):
        return (rng.standard_normal(shape, dtype=np.float32) * 0.02).astype(np.float16)
    w.add_tensor("token_embd.weight", rnd(vocab, n_embd))
    w.add_tensor("output_norm.weight", np.ones(n_embd, dtype=np.float32))
    hd = n_embd // n_head
    for i in range(n_layer):
        w.add_tensor(f"blk.{i}.attn_norm.weight", np.ones(n_embd, dtype=np.float32))
        w.add_tensor(f"blk.{i}.attn_q.weight", rnd(n_embd, n_embd))
        w.add_tensor(f"blk.{i}.attn_k.weight", rnd(n_kv * hd, n_embd))
        w.add_tensor(f"blk.{i}.attn_v.weight", rnd(n_kv * hd, n_embd))
        w.add_tensor(f"blk.{i}.attn_output.weight", rnd(n_embd, n_embd))
        w.add_tensor(f"blk.{i}.ffn_norm.weight", np.ones(n_embd, dtype=np.float32))
        w.add_tensor(f"blk.{i}.ffn_gate.weight", rnd(n_ff, n_embd))
        w.add_tensor(f"blk.{i}.ffn_up.weight", rnd(n_ff, n_embd))
        w.add_tensor(f"blk.{i}.ffn_down.weight", rnd(n_embd, n_ff))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()

def quantize(src: Path, dst: Path, threads=2):
    from lmchat.backends.llamacpp._lib import lib

    L = lib()
    p = L.llama_model_quantize_default_params()
    p.nthread = threads
    p.ftype = L.LLAMA_FTYPE_MOSTLY_Q4_0
    rc = L.llama_model_quantize(str(src).encode(), str(dst).encode(), ctypes.byref(p))
    assert rc == 0, rc

def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench random_gguf", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("out", type=Path, help="the Q4_0 GGUF to write")
    p.add_argument("--width", type=int, default=2048)
    p.add_argument("--layers", type=int, default=16)
    args = p.parse_args(argv)
    f16 = args.out.with_suffix(".f16.gguf")
    started = time.perf_counter()
    build(f16, n_embd=args.width, n_layer=args.layers, n_ff=args.width * 11 // 4)
    quantize(f16, args.out)
    f16.unlink()
    print(f"{args.out}: {args.out.stat().st_size >> 20} MB, {time.perf_counter() - started:.0f} s")
    return 0
