"""Cutting and joining saved sequence states by position, so the host tier stores a shared prefix once.

``llama_state_seq_get_data`` writes a sequence of a plain KV cache (llama.cpp's ``llama_context::state_seq_get_data``
and ``llama_kv_cache::state_write``) as::

    u32 magic 0xAF143CD8, i32 the sequence's id
    u32 n_stream, then per stream: u32 cell_count (0 but for the sequence's stream), and for that stream
      cell_count x (i32 pos, u32 n_seq_id = 1, i32 seq_id)            the cells' metadata
      u32 v_trans, u32 n_layer
      per layer: i32 type, u64 row bytes, cell_count rows               the keys, a row a cell
      per layer, v_trans = 0: i32 type, u64 row bytes, cell_count rows  the values, a row a cell
                 v_trans = 1: i32 type, u32 element bytes, u32 n_embd,  the values transposed: for each of
                              n_embd x (cell_count elements)            the n_embd channels, an element a cell

Every per-cell part is a *plane*: ``rows`` runs of ``cell_count x unit`` bytes. A state whose cells hold
positions 0 .. n-1 in order (a prefill's, or a restored one's) can then be cut at any position into two states
of the same layout, and two such states joined back, byte for byte, by slicing and concatenating each plane:
:func:`cut` and :func:`join`. The host tier (:mod:`.hostcache`) keeps conversations that open with one system
prompt as one shared prefix and a tail each.

Nothing here is llama.cpp's API: a layout it does not recognise exactly (a sliding-window or recurrent cache,
M-RoPE's extra cell fields, cells out of position order, bytes left over) gives ``None`` and the state is kept
whole. And nothing read is trusted: the host tier splices only states this process saved, checks a shared
prefix byte for byte before sharing it (:func:`same_values`), and llama.cpp checks every restored sequence's
positions (:meth:`.sequences.SequencePool.load`).
"""
from __future__ import annotations

import struct
from collections.abc import Iterator

import attrs

_U32 = struct.Struct("<I")
_IO_HEAD = struct.Struct("<Ii")  # llama_context's state magic, the saved sequence's id
_IO_MAGIC = 0xAF143CD8
_META = struct.Struct("<iIi")  # pos, n_seq_id, seq_id: one cell of one sequence
_K_HEAD = struct.Struct("<iQ")  # type, row bytes
_VT_HEAD = struct.Struct("<iII")  # type, element bytes, channels
_MAX_PLANE_ROWS = 1 << 16  # far above any model's value channels: a garbled count is refused, not looped over


@attrs.frozen
class Plane:
    """``rows`` runs of ``n x unit`` bytes each, from ``offset``."""

    offset: int
    rows: int
    unit: int


@attrs.frozen
class Layout:
    """Where a state's parts are: ``n`` cells (a saved state's at positions 0 .. n-1, a cut tail's from where it
    was cut); ``pieces`` in file order, each a fixed header (bytes) or a :class:`Plane` (``planes[0]`` is the
    cells' metadata, the rest keys and values)."""

    n: int
    size: int
    pieces: tuple[bytes | Plane, ...]

    @property
    def planes(self) -> list[Plane]:
        return [p for p in self.pieces if isinstance(p, Plane)]


def layout(blob: bytes | bytearray | memoryview) -> Layout | None:
    """The layout of a saved single-sequence state, or None for anything but a plain KV cache whose cells hold
    positions 0 .. n-1 in order (see the module docstring)."""
    try:
        return _parse(memoryview(blob).cast("B"))
    except (struct.error, ValueError, IndexError):
        return None


def _parse(mv: memoryview) -> Layout | None:
    pieces: list[bytes | Plane] = []
    magic, _ = _IO_HEAD.unpack_from(mv, 0)
    (n_stream,) = _U32.unpack_from(mv, _IO_HEAD.size)
    at, n, start = _IO_HEAD.size + 4, 0, 0
    if magic != _IO_MAGIC or not 1 <= n_stream <= 4096:
        return None
    for _ in range(n_stream):
        (count,) = _U32.unpack_from(mv, at)
        at += 4
        if count == 0:
            continue
        if n:  # a second stream with cells: not one sequence's state
            return None
        n = count
        pieces.append(bytes(mv[start:at]))
        meta = Plane(at, 1, _META.size)
        if not _positions_in_order(mv, at, n):
            return None
        pieces.append(meta)
        at += n * _META.size
        start = at
        v_trans, n_layer = _U32.unpack_from(mv, at)[0], _U32.unpack_from(mv, at + 4)[0]
        at += 8
        if v_trans not in (0, 1) or not 1 <= n_layer <= 4096:
            return None
        for _layer in range(n_layer):  # keys
            _, row = _K_HEAD.unpack_from(mv, at)
            at = _plane(mv, pieces, start, at + _K_HEAD.size, 1, row, n)
            start = at
        for _layer in range(n_layer):  # values
            if v_trans:
                _, unit, rows = _VT_HEAD.unpack_from(mv, at)
                at += _VT_HEAD.size
            else:
                _, unit = _K_HEAD.unpack_from(mv, at)
                rows, at = 1, at + _K_HEAD.size
            at = _plane(mv, pieces, start, at, rows, unit, n)
            start = at
    if n == 0 or at != len(mv):  # nothing held, or more than one plain cache (sliding-window, hybrid)
        return None
    pieces.append(bytes(mv[start:at]))
    return Layout(n, len(mv), tuple(pieces))


def _plane(mv: memoryview, pieces: list[bytes | Plane], start: int, at: int, rows: int, unit: int, n: int) -> int:
    if not (1 <= rows <= _MAX_PLANE_ROWS and 1 <= unit <= len(mv)) or at + rows * unit * n > len(mv):
        raise ValueError("a plane past the end")
    pieces.append(bytes(mv[start:at]))
    pieces.append(Plane(at, rows, unit))
    return at + rows * unit * n


def _positions_in_order(mv: memoryview, at: int, n: int) -> bool:
    if at + n * _META.size > len(mv):
        return False
    cells = _META.iter_unpack(mv[at:at + n * _META.size])
    return all(pos == i and n_seq == 1 for i, (pos, n_seq, _) in enumerate(cells))


def _runs(blob: memoryview, plane: Plane, n: int, lo: int, hi: int) -> Iterator[memoryview]:
    """Each run of ``plane``'s cells ``lo .. hi-1`` in a state of ``n`` cells."""
    for r in range(plane.rows):
        base = plane.offset + r * n * plane.unit
        yield blob[base + lo * plane.unit:base + hi * plane.unit]


def _write(out: memoryview, at: int, data: bytes | memoryview) -> int:
    out[at:at + len(data)] = data
    return at + len(data)


def _with_count(head: bytes, old: int, new: int) -> bytes:
    """The stream header ``head`` (ending with the cell count ``old``) saying ``new`` cells."""
    assert _U32.unpack_from(head, len(head) - 4)[0] == old, "the first piece ends with the cell count"
    return head[:-4] + _U32.pack(new)


def cut_size(lay: Layout, lo: int, hi: int) -> int:
    """The bytes of the state holding cells ``lo .. hi-1`` of one laid out as ``lay``."""
    return lay.size + (hi - lo - lay.n) * _per_cell(lay)


def cut(blob: bytes | bytearray | memoryview, lay: Layout, lo: int, hi: int, out: bytearray) -> Layout:
    """Write into ``out`` (of :func:`cut_size` bytes) the state holding cells ``lo .. hi-1`` of ``blob``, and
    return its layout: a prefix (``lo`` = 0) restores as is; a tail (``hi`` = n) keeps its positions and restores
    only :func:`join`-ed behind its prefix."""
    src, dst = memoryview(blob).cast("B"), memoryview(out)
    pieces: list[bytes | Plane] = []
    at = 0
    for i, piece in enumerate(lay.pieces):
        if isinstance(piece, Plane):
            pieces.append(Plane(at, piece.rows, piece.unit))
            for run in _runs(src, piece, lay.n, lo, hi):
                at = _write(dst, at, run)
        else:
            fixed = _with_count(piece, lay.n, hi - lo) if i == 0 else piece
            pieces.append(fixed)
            at = _write(dst, at, fixed)
    assert at == len(out), "cut_size gives the cut's bytes"
    return Layout(hi - lo, at, tuple(pieces))


def join(head: bytes | bytearray | memoryview, head_lay: Layout, tail: bytes | bytearray | memoryview,
         tail_lay: Layout, out: bytearray) -> Layout:
    """Write into ``out`` (:func:`join_size` bytes) the state of ``head``'s cells then ``tail``'s, and return its
    layout: states :func:`cut` from one layout (same layers, types and planes; the tail's cells continue the
    head's positions)."""
    assert joinable(head_lay, tail_lay), "parts of one layout"
    a, b, dst = memoryview(head).cast("B"), memoryview(tail).cast("B"), memoryview(out)
    n = head_lay.n + tail_lay.n
    pieces: list[bytes | Plane] = []
    at = 0
    for i, (piece, other) in enumerate(zip(head_lay.pieces, tail_lay.pieces, strict=True)):
        if isinstance(piece, Plane):
            assert isinstance(other, Plane), "joinable: planes where planes are"
            pieces.append(Plane(at, piece.rows, piece.unit))
            for run_a, run_b in zip(_runs(a, piece, head_lay.n, 0, head_lay.n),
                                    _runs(b, other, tail_lay.n, 0, tail_lay.n), strict=True):
                at = _write(dst, at, run_a)
                at = _write(dst, at, run_b)
        else:
            assert isinstance(other, bytes), "joinable: headers where headers are"
            fixed = _with_count(other, tail_lay.n, n) if i == 0 else other
            pieces.append(fixed)
            at = _write(dst, at, fixed)
    assert at == len(out), "join_size gives the joined bytes"
    return Layout(n, at, tuple(pieces))


def join_size(head_lay: Layout, tail_lay: Layout) -> int:
    return tail_lay.size + head_lay.n * _per_cell(head_lay)


def joinable(head_lay: Layout, tail_lay: Layout) -> bool:
    """Whether two states are parts of one layout: the same headers (layers, types, row sizes) and planes. The
    first and last pieces, which name the sequence and its stream, may differ: a join keeps the tail's."""
    if len(head_lay.pieces) != len(tail_lay.pieces):
        return False
    for x, y in zip(head_lay.pieces[1:-1], tail_lay.pieces[1:-1], strict=True):
        if isinstance(x, Plane):
            if not isinstance(y, Plane) or (x.rows, x.unit) != (y.rows, y.unit):
                return False
        elif x != y:
            return False
    return True


def _per_cell(lay: Layout) -> int:
    return sum(p.rows * p.unit for p in lay.planes)


def same_values(a: bytes | bytearray | memoryview, a_lay: Layout, b: bytes | bytearray | memoryview,
                b_lay: Layout, n: int) -> bool:
    """Whether the first ``n`` cells of two states hold the same keys and values, bit for bit (their metadata
    may name other sequences)."""
    if not joinable(a_lay, b_lay) or n > min(a_lay.n, b_lay.n):
        return False
    ma, mb = memoryview(a).cast("B"), memoryview(b).cast("B")
    for x, y in zip(a_lay.planes[1:], b_lay.planes[1:], strict=True):  # planes[0]: the metadata
        # tobytes: a memoryview's own == compares item by item, 10x slower than two copies and a memcmp
        if any(ra.tobytes() != rb.tobytes()
               for ra, rb in zip(_runs(ma, x, a_lay.n, 0, n), _runs(mb, y, b_lay.n, 0, n), strict=True)):
            return False
    return True
