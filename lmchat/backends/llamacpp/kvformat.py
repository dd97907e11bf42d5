"""The KV file format (the disk tier's, :mod:`.kvfiles`).

A file holds one sequence's state as ``llama_state_seq_get_data`` wrote it,
with what it takes to trust it later::

    b"LMCHATKV"  u32 format version  u32 header length
    header (JSON): {"identity": ..., "n_ids": N, "exact": E, "state_bytes": S}
    N token ids (u32, little-endian): what the state holds, position by position
    S bytes of llama.cpp state
    32 bytes: HMAC-SHA256, under the engine's key (:mod:`.kvkey`), of all the bytes before it

Only the first ``E`` ids are ever served (what a fresh prefill computes: the
last answer, decoded a token at a time, is not; see
:attr:`.sequences.SessionState.exact`); the state holds all ``N``, and a
restore must give back exactly those positions.

``identity`` names the model file (size and a digest of its first and last
MiB: a renamed GGUF is the same model), llama.cpp's version and the cache's
parameters (key and value types, flash attention, which lays V out
differently): a state is only loaded where it was made. The MAC covers the
header, the ids and the state: a file nobody holding the key wrote (forged,
another session's state under these ids, edited, torn) is never loaded. A
checksum would not do: anyone can compute one. Files are named by a digest of
their ids, written to a temporary name and renamed, so a reader never sees
half a file, and a crash leaves at worst a stray temporary (removed at the
next start). Nothing is fsynced: a file lost or torn by a power cut fails its
MAC, which costs a re-prefill, never a wrong answer. Format 1 (a plain
BLAKE2 digest) is refused as unauthenticated.
"""
from __future__ import annotations

import hashlib
import hmac
import json
import os
import struct
import sys
from array import array
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import attrs

MAGIC = b"LMCHATKV"
VERSION = 2
HEAD = struct.Struct("<8sII")
SUFFIX = ".kv"
TAG_BYTES = 32  # HMAC-SHA256
#: the longest header read: ours are a few hundred bytes, and a file's header is read before it is trusted
MAX_HEADER = 1 << 16


class KVFileRejected(Exception):
    """A held KV state that cannot be used; the message says why (it becomes the turn's
    ``cache_miss_reason``), ``kind`` names the reason for the metrics."""

    def __init__(self, message: str, kind: str = "corrupt"):
        super().__init__(message)
        self.kind = kind


@attrs.frozen
class Header:
    """What a file says about itself (nothing of it is trusted before its MAC is checked)."""

    identity: Any  # a dict from this format's writer; anything from another's
    n_ids: int
    exact: int
    state_bytes: int
    size: int  # the bytes before the ids: the fixed head and the JSON header

    @property
    def file_bytes(self) -> int:
        return self.size + 4 * self.n_ids + self.state_bytes + TAG_BYTES


def head_bytes(identity: dict[str, Any], n_ids: int, exact: int, state_bytes: int) -> bytes:
    """The bytes a file starts with (the ids, the state and the MAC follow)."""
    header = json.dumps({"identity": identity, "n_ids": n_ids, "exact": exact, "state_bytes": state_bytes}).encode()
    return HEAD.pack(MAGIC, VERSION, len(header)) + header


def file_name(raw_ids: bytes | memoryview) -> str:
    return hashlib.blake2b(raw_ids, digest_size=16).hexdigest() + SUFFIX


def tagger(key: bytes) -> hmac.HMAC:
    """A fresh MAC of a file's bytes under ``key`` (fed in order; its digest is the file's last bytes)."""
    return hmac.new(key, digestmod=hashlib.sha256)


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


def read_head(fd: int, size: int) -> Header:
    """The header of the open regular file ``fd`` of ``size`` bytes, checked for shape and size (not the MAC:
    that needs the whole file)."""
    try:
        return parse_header(os.pread(fd, HEAD.size + MAX_HEADER, 0), size)
    except OSError as exc:
        raise KVFileRejected(f"could not be read ({exc.strerror or exc})", "unreadable") from None


def read_ids(fd: int, header: Header) -> bytes:
    """The raw ids of the open file ``fd`` whose ``header`` was read."""
    try:
        raw = os.pread(fd, 4 * header.n_ids, header.size)
    except OSError as exc:
        raise KVFileRejected(f"could not be read ({exc.strerror or exc})", "unreadable") from None
    if len(raw) < 4 * header.n_ids:
        raise KVFileRejected("is truncated", "truncated")
    return raw


def parse_header(data: bytes | bytearray | memoryview, size: int) -> Header:
    """The header at the start of ``data`` (at least its first ``HEAD.size + MAX_HEADER`` bytes, or all of a
    shorter file), of a file of ``size`` bytes."""
    if len(data) < HEAD.size:
        raise KVFileRejected("is truncated", "truncated")
    magic, version, n = HEAD.unpack_from(data)
    if magic != MAGIC:
        raise KVFileRejected("is not an lmchat KV file", "not a KV file")
    if version != VERSION:
        raise KVFileRejected(f"is of format {version}, not {VERSION}" + (
            " (written without a MAC)" if version < VERSION else ""), "old format")
    if n > MAX_HEADER or HEAD.size + n > len(data):
        raise KVFileRejected("is truncated, or its header is not valid", "truncated")
    try:
        fields = json.loads(bytes(data[HEAD.size:HEAD.size + n]))
    except ValueError:
        fields = None
    ints = ("n_ids", "exact", "state_bytes")
    if not (isinstance(fields, dict) and "identity" in fields
            and all(type(fields.get(k)) is int and fields[k] >= 0 for k in ints)
            and fields["exact"] <= fields["n_ids"]):
        raise KVFileRejected("has a header that is not valid")
    header = Header(fields["identity"], fields["n_ids"], fields["exact"], fields["state_bytes"], HEAD.size + n)
    if size != header.file_bytes:
        raise KVFileRejected("is truncated, or longer than its header says", "truncated")
    return header


def authenticated(data: bytes | bytearray, header: Header, key: bytes) -> tuple[list[int], memoryview]:
    """The ids and state of the whole file ``data`` (its ``header`` parsed), its MAC checked under ``key``."""
    view = memoryview(data)
    end = len(data) - TAG_BYTES
    mac = tagger(key)
    mac.update(view[:end])
    if not hmac.compare_digest(mac.digest(), view[end:]):
        raise KVFileRejected("fails its MAC: written under another key, forged, edited or torn", "unauthenticated")
    start = header.size + 4 * header.n_ids
    return ids_of(view[header.size:start]), view[start:end]


def ids_of(raw: bytes | memoryview) -> list[int]:
    data = array("I")
    data.frombytes(raw)
    if sys.byteorder != "little":  # pragma: no cover
        data.byteswap()
    return data.tolist()


def difference(theirs: Any, ours: dict[str, Any]) -> str:  # theirs: a file's, whatever it holds
    """The identity fields that differ (a few, each shown short: a file's header is anybody's text)."""
    keys = sorted(k for k in {*theirs, *ours} if theirs.get(k) != ours.get(k)) if isinstance(theirs, dict) else []
    shown = ", ".join(f"{k if k.isprintable() and len(k) <= 40 else _short(k)}: {_short(theirs.get(k))} "
                      f"here {_short(ours.get(k))}" for k in keys[:4])
    return (shown + (", ..." if len(keys) > 4 else "")) or "unreadable identity"


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."
