"""The KV file format (the disk tier's, :mod:`.kvfiles`).

A file holds one sequence's state as ``llama_state_seq_get_data`` wrote it,
with what it takes to trust it later::

    b"LMCHATKV"  u32 format version  u32 header length
    header (JSON): {"identity": ..., "n_ids": N, "exact": E, "state_bytes": S, "blake2b": hex}
    N token ids (u32, little-endian): what the state holds, position by position
    S bytes of llama.cpp state

Only the first ``E`` ids are ever served (what a fresh prefill computes: the
last answer, decoded a token at a time, is not; see
:attr:`.sequences.SessionState.exact`); the state holds all ``N``, and a
restore must give back exactly those positions.

``identity`` names the model file (size and a digest of its first and last
MiB: a renamed GGUF is the same model), llama.cpp's version and the cache's
parameters (key and value types, flash attention, which lays V out
differently): a state is only loaded where it was made. The digest covers the
ids and the state. Files are named by a digest of their ids, written to a
temporary name and renamed, so a reader never sees half a file, and a crash
leaves at worst a stray temporary (removed at the next start). Nothing is
fsynced: a file lost or torn by a power cut fails its digest, which costs a
re-prefill, never a wrong answer.
"""
from __future__ import annotations

import hashlib
import json
import os
import struct
import sys
from array import array
from collections.abc import Iterable
from pathlib import Path
from typing import Any

MAGIC = b"LMCHATKV"
VERSION = 1
HEAD = struct.Struct("<8sII")
SUFFIX = ".kv"


class KVFileRejected(Exception):
    """A held KV state that cannot be used; the message says why (it becomes the turn's
    ``cache_miss_reason``), ``kind`` names the reason for the metrics."""

    def __init__(self, message: str, kind: str = "corrupt"):
        super().__init__(message)
        self.kind = kind


def digest(ids_bytes: bytes | memoryview, state: bytes | bytearray | memoryview) -> str:
    h = hashlib.blake2b(digest_size=16)
    h.update(ids_bytes)
    h.update(state)
    return h.hexdigest()


def ids_bytes(ids: Iterable[int]) -> bytes:
    data = array("I", ids)
    if data.itemsize != 4:  # pragma: no cover - every platform CPython runs on has a 4-byte unsigned int
        raise RuntimeError("array('I') is not 32 bits here")
    if sys.byteorder != "little":  # pragma: no cover
        data.byteswap()
    return data.tobytes()


def model_identity(path: Path) -> dict[str, Any]:
    """What names a model file's weights, whatever the file is called."""
    size = path.stat().st_size
    h = hashlib.blake2b(digest_size=16)
    with open(path, "rb") as f:
        h.update(f.read(1 << 20))
        f.seek(max(0, size - (1 << 20)))
        h.update(f.read(1 << 20))
    return {"model_bytes": size, "model_digest": h.hexdigest()}


def read_head(path: Path) -> tuple[dict[str, Any], list[int]]:
    """A file's header and ids, checked for shape and size (not the digest: that needs the whole file)."""
    try:
        with open(path, "rb") as f:
            head = f.read(HEAD.size)
            if len(head) < HEAD.size:
                raise KVFileRejected("truncated")
            magic, version, n = HEAD.unpack(head)
            if magic != MAGIC or version != VERSION:
                raise KVFileRejected("not an lmchat KV file of this version")
            header = _header(f.read(n))
            raw = f.read(4 * header["n_ids"])
            size = os.fstat(f.fileno()).st_size
    except OSError as exc:
        raise KVFileRejected(exc.strerror or str(exc)) from None
    if len(raw) < 4 * header["n_ids"] or size != HEAD.size + n + len(raw) + header["state_bytes"]:
        raise KVFileRejected("truncated, or longer than its header says")
    return header, _ids(raw)


def parse(data: bytes, name: str) -> tuple[dict[str, Any], list[int], memoryview]:
    """Header, ids and state of a whole file, its digest checked."""
    if len(data) < HEAD.size:
        raise KVFileRejected(f"KV file {name} is truncated")
    magic, version, n = HEAD.unpack_from(data)
    if magic != MAGIC or version != VERSION:
        raise KVFileRejected(f"KV file {name} is not an lmchat KV file of this version")
    try:
        header = _header(data[HEAD.size:HEAD.size + n])
    except KVFileRejected as exc:
        raise KVFileRejected(f"KV file {name}: {exc}") from None
    start = HEAD.size + n
    end = start + 4 * header["n_ids"]
    if len(data) != end + header["state_bytes"]:
        raise KVFileRejected(f"KV file {name} is truncated, or longer than its header says")
    view = memoryview(data)
    if digest(view[start:end], view[end:]) != header["blake2b"]:
        raise KVFileRejected(f"KV file {name} fails its checksum (corrupt or edited)")
    return header, _ids(data[start:end]), view[end:]


def _header(raw: bytes) -> dict[str, Any]:
    try:
        header = json.loads(raw)
    except ValueError:
        header = None
    if not (isinstance(header, dict) and isinstance(header.get("n_ids"), int) and header["n_ids"] >= 0
            and isinstance(header.get("exact"), int) and 0 <= header["exact"] <= header["n_ids"]
            and isinstance(header.get("state_bytes"), int) and header["state_bytes"] >= 0
            and isinstance(header.get("blake2b"), str) and "identity" in header):
        raise KVFileRejected("its header is not valid")
    return header


def _ids(raw: bytes) -> list[int]:
    data = array("I")
    data.frombytes(raw)
    if sys.byteorder != "little":  # pragma: no cover
        data.byteswap()
    return data.tolist()


def difference(theirs: Any, ours: dict[str, Any]) -> str:  # theirs: a file's, whatever it holds
    keys = sorted(k for k in {*theirs, *ours} if theirs.get(k) != ours.get(k)) if isinstance(theirs, dict) else []
    return ", ".join(f"{k}: {theirs.get(k)!r} here {ours.get(k)!r}" for k in keys) or "unreadable identity"
