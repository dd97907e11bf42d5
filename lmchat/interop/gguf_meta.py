"""A GGUF file's metadata (its key/value section), read without the ``gguf`` package or llama.cpp.

Matching a model needs four strings of the header (``tokenizer.chat_template``, ``general.name``...), not the
weights: this reads the key/value section alone, through a read-only ``mmap``, and skips arrays (the
vocabulary's hundreds of thousands of strings) by their lengths, but for short arrays of numbers asked for
by name (a value per layer). ``lmchat match`` on a bare install works.
"""
from __future__ import annotations

import contextlib
import mmap
import os
import struct
from collections.abc import Iterable, Iterator

MAGIC = b"GGUF"
#: value type -> struct format of the fixed-size scalars (8 is a string, 9 an array)
_SCALARS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
_STRING, _ARRAY = 8, 9
#: the longest array of numbers a caller may ask for by name (per-layer values: hundreds at most)
SMALL = 4096


class GGUFError(ValueError):
    """Not a GGUF file lmchat can read (another format, a damaged or truncated header, GGUF v1)."""


def is_gguf(path: str | os.PathLike[str]) -> bool:
    """Whether the file starts with the GGUF magic (its name is no evidence: ``my-model.bin`` may be one)."""
    try:
        with open(path, "rb") as f:
            return f.read(4) == MAGIC
    except OSError:
        return False


def read_gguf_metadata(path: str | os.PathLike[str], keys: Iterable[str] | None = None) -> dict[str, object]:
    """The scalar and string values of the file's metadata (arrays are skipped), or only ``keys`` of them
    (short arrays of numbers among them as lists).

    Reading stops once every one of ``keys`` was seen. Raises :class:`GGUFError` for what is not a readable
    GGUF v2/v3 header, and OSError for a file that cannot be opened.
    """
    with _opened(path) as reader:
        return reader.metadata(None if keys is None else set(keys))


def read_gguf_strings(path: str | os.PathLike[str], key: str, indices: Iterable[int]) -> dict[int, str]:
    """The items at ``indices`` of the metadata's array of strings ``key`` (a token's text by its id, say), by
    index; an index past the array's end, or an array that is missing or not of strings, gives nothing.
    Raises as :func:`read_gguf_metadata` does."""
    with _opened(path) as reader:
        return reader.strings_of(key, set(indices))


@contextlib.contextmanager
def _opened(path: str | os.PathLike[str]) -> Iterator[_Reader]:
    """A reader over the file mapped read-only; what a damaged header raises while it reads is a GGUFError."""
    with open(path, "rb") as f:
        try:
            data = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        except ValueError:  # an empty file cannot be mapped
            raise GGUFError(f"{os.fspath(path)}: not a GGUF file (empty)") from None
    with data:
        try:
            yield _Reader(data)
        except (struct.error, IndexError, UnicodeDecodeError, OverflowError) as exc:
            raise GGUFError(f"{os.fspath(path)}: damaged GGUF metadata ({exc})") from None


class _Reader:
    """A cursor over the mapped bytes, in the file's byte order."""

    def __init__(self, data: mmap.mmap) -> None:
        if data[:4] != MAGIC:
            raise GGUFError("not a GGUF file (no GGUF magic)")
        self.data, self.pos = data, 4
        self.order = "<"
        version = self.uint(4)
        if version > 0xFFFF:  # a big-endian file reads as a huge little-endian version
            self.pos, self.order = 4, ">"
            version = self.uint(4)
        if version not in (2, 3):  # v1 had 32-bit lengths; no tool has written it since 2023
            raise GGUFError(f"GGUF version {version} is not supported (2 and 3 are)")

    def metadata(self, wanted: set[str] | None) -> dict[str, object]:
        self.uint(10)  # tensor count: the tensors are not read
        out: dict[str, object] = {}
        for _ in range(self.uint(10)):
            if wanted is not None and wanted <= out.keys():
                break
            key, kind = self.string(), self.uint(4)
            if kind == _ARRAY and wanted is not None and key in wanted:
                out[key] = self.small_array()
            elif kind == _ARRAY:
                self.skip_array()
            elif wanted is None or key in wanted:
                out[key] = self.value(kind)
            else:
                self.skip(kind)
        return out

    def strings_of(self, array: str, wanted: set[int]) -> dict[int, str]:
        self.uint(10)
        for _ in range(self.uint(10)):
            key, kind = self.string(), self.uint(4)
            if key != array:
                self.skip(kind)
                continue
            if kind != _ARRAY:
                return {}
            item_kind, n = self.uint(4), self.uint(10)
            if item_kind != _STRING:
                return {}
            out = {}
            for i in range(min(n, max(wanted, default=-1) + 1)):
                if i in wanted:
                    out[i] = self.string()
                else:
                    self.skip(_STRING)
            return out
        return {}

    def scalar(self, kind: int) -> int | float:
        """A fixed-size value: a float for kinds 6 and 12, a bool for 7, else an int."""
        fmt = self.order + _SCALARS[kind]
        value: int | float = struct.unpack_from(fmt, self.data, self.pos)[0]
        self.pos += struct.calcsize(fmt)
        return value

    def uint(self, kind: int) -> int:
        """A uint32 (kind 4: value types, the version) or a uint64 (kind 10: counts, lengths)."""
        value = self.scalar(kind)
        assert isinstance(value, int), kind
        return value

    def string(self) -> str:
        n = self.uint(10)
        end = self.pos + n
        if end > len(self.data):
            raise IndexError(f"a string of {n} bytes runs past the end of the file")
        text = self.data[self.pos:end].decode("utf-8")
        self.pos = end
        return text

    def value(self, kind: int) -> str | int | float:
        if kind == _STRING:
            return self.string()
        if kind not in _SCALARS:
            raise GGUFError(f"unknown GGUF value type {kind}")
        return self.scalar(kind)

    def skip(self, kind: int) -> None:
        if kind == _STRING:
            n = self.uint(10)  # not `self.pos += self.uint(10)`: that adds to the position before the length
            self.pos += n
        elif kind == _ARRAY:
            self.skip_array()
        elif kind in _SCALARS:
            self.pos += struct.calcsize(_SCALARS[kind])
        else:
            raise GGUFError(f"unknown GGUF value type {kind}")

    def small_array(self) -> list[int | float] | None:
        """A wanted array of numbers (a value per layer, say) as a list; None for anything longer than
        :data:`SMALL` items or of strings (skipped)."""
        start, kind, n = self.pos, self.uint(4), self.uint(10)
        if kind not in _SCALARS or n > SMALL:
            self.pos = start
            self.skip_array()
            return None
        return [self.scalar(kind) for _ in range(n)]

    def skip_array(self) -> None:
        kind, n = self.uint(4), self.uint(10)
        if kind in _SCALARS:  # fixed-size items: one jump
            self.pos += n * struct.calcsize(_SCALARS[kind])
        else:
            for _ in range(n):
                self.skip(kind)
        if self.pos > len(self.data):
            raise IndexError("an array runs past the end of the file")
