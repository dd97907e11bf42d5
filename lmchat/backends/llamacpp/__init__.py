"""llama.cpp as the embedded engine: any GGUF model, sessions in llama.cpp sequences, batched decoding.

:class:`LlamaCppBackend` (``get_backend('llamacpp')``) runs a GGUF file
through llama-cpp-python's low-level bindings (no torch). Modules:
:mod:`.engine` (the scheduler thread, continuous batching),
:mod:`.sequences` (resident sequences and the host cache of evicted ones),
:mod:`.vocab` (llama.cpp's tokenizer as lmchat's vocabulary adapter),
:mod:`.sampler` (llama.cpp's sampler chain).
"""
from .backend import LlamaCppBackend
from .vocab import LlamaVocab

__all__ = ["LlamaCppBackend", "LlamaVocab"]
