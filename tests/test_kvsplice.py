"""Saved sequence states cut and joined by position (lmchat/backends/llamacpp/kvsplice.py).

The layouts are built here as llama.cpp writes them (``llama_context::state_seq_get_data`` and
``llama_kv_cache::state_write``), values transposed or not, so every cut point is tried on both; the states of
the real engine are tried in tests/test_host_tier.py. A layout the module does not know exactly is refused with
None (never an exception): the host tier then keeps the state whole."""
from __future__ import annotations

import random
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lmchat.backends.llamacpp import kvsplice

MAGIC = 0xAF143CD8


def state(n: int, *, seq: int = 0, n_stream: int = 4, v_trans: bool = False, n_layer: int = 3, k_row: int = 12,
          v_channels: int = 5, v_el: int = 2, first: int = 0, seed: int = 0, shared: int = 0) -> bytes:
    """A saved state of ``n`` cells at positions ``first ..``, with random keys and values; its first ``shared``
    cells hold those of any other state's first ``shared`` cells (seed 0's)."""
    planes = 0

    def plane(rows: int, unit: int) -> bytes:
        nonlocal planes
        planes += 1
        return b"".join(random.Random(f"{planes} {r} {i} {seed if i >= shared else 0}").randbytes(unit)
                        for r in range(rows) for i in range(n))

    out = bytearray(struct.pack("<Ii", MAGIC, seq) + struct.pack("<I", n_stream))
    for s in range(n_stream):
        out += struct.pack("<I", n if s == seq % n_stream else 0)
        if s != seq % n_stream:
            continue
        for i in range(n):
            out += struct.pack("<iIi", first + i, 1, seq)
        out += struct.pack("<II", int(v_trans), n_layer)
        for _ in range(n_layer):
            out += struct.pack("<iQ", 1, k_row) + plane(1, k_row)
        for _ in range(n_layer):
            if v_trans:
                out += struct.pack("<iII", 1, v_el, v_channels) + plane(v_channels, v_el)
            else:
                out += struct.pack("<iQ", 1, v_el * v_channels) + plane(1, v_el * v_channels)
    return bytes(out)


def cut(blob: bytes, lay: kvsplice.Layout, lo: int, hi: int) -> tuple[bytearray, kvsplice.Layout]:
    out = bytearray(kvsplice.cut_size(lay, lo, hi))
    return out, kvsplice.cut(blob, lay, lo, hi, out)


def join(a: bytearray, la: kvsplice.Layout, b: bytearray, lb: kvsplice.Layout) -> tuple[bytearray, kvsplice.Layout]:
    out = bytearray(kvsplice.join_size(la, lb))
    return out, kvsplice.join(a, la, b, lb, out)


@pytest.mark.parametrize("v_trans", [False, True])
@pytest.mark.parametrize("seq", [0, 2])
def test_a_prefix_and_a_tail_join_back_into_the_state_byte_for_byte(v_trans, seq):
    blob = state(40, seq=seq, v_trans=v_trans)
    lay = kvsplice.layout(blob)
    assert lay is not None and lay.n == 40 and lay.size == len(blob)
    for at in (1, 17, 39):
        head, lh = cut(blob, lay, 0, at)
        tail, lt = cut(blob, lay, at, 40)
        assert kvsplice.layout(head) == lh  # a prefix is a state of its own, positions 0 .. at-1
        assert kvsplice.layout(tail) is None  # a tail starts at position ``at``: joined only
        whole, lw = join(head, lh, tail, lt)
        assert whole == blob and lw == lay


@settings(max_examples=60, deadline=None)
@given(n=st.integers(2, 60), data=st.data(), v_trans=st.booleans(),
       seqs=st.tuples(st.integers(0, 3), st.integers(0, 3)))
def test_a_prefix_of_one_sequence_joins_a_tail_of_another(n, data, v_trans, seqs):
    """States of two sequences that agree on their first ``at`` cells: one's prefix and the other's tail give the
    other's keys and values (the cells' sequence ids are the prefix's: llama.cpp restores into the sequence it is
    given and reads them only to skip them)."""
    at = data.draw(st.integers(1, n - 1))
    a = state(n, seq=seqs[0], v_trans=v_trans, seed=1, shared=at)
    b = state(n, seq=seqs[1], v_trans=v_trans, seed=2, shared=at)
    la, lb = kvsplice.layout(a), kvsplice.layout(b)
    assert la is not None and lb is not None
    assert kvsplice.same_values(a, la, b, lb, at) and not kvsplice.same_values(a, la, b, lb, at + 1)
    head, lh = cut(a, la, 0, at)
    tail, lt = cut(b, lb, at, n)
    whole, lw = join(head, lh, tail, lt)
    assert len(whole) == len(b) and kvsplice.same_values(whole, lw, b, lb, n)
    assert (whole == b) == (seqs[0] == seqs[1])  # what differs is the prefix's sequence ids


def test_states_of_other_shapes_do_not_join_or_compare():
    blob = state(20)
    lay = kvsplice.layout(blob)
    wider = kvsplice.layout(state(20, k_row=16))
    transposed = kvsplice.layout(state(20, v_trans=True))
    assert lay is not None and wider is not None and transposed is not None
    assert not kvsplice.joinable(lay, wider) and not kvsplice.joinable(lay, transposed)
    assert not kvsplice.same_values(blob, lay, state(20, k_row=16), wider, 10)
    assert not kvsplice.same_values(blob, lay, blob, lay, 21)  # more cells than it holds


def _two_streams() -> bytes:
    one = state(8, seq=0, n_stream=2)  # head (magic, seq, n_stream), 8 cells in stream 0, 0 in stream 1
    body = one[16:-4]
    return one[:12] + struct.pack("<I", 8) + body + struct.pack("<I", 8) + body


@pytest.mark.parametrize("blob, why", [
    (b"", "empty"),
    (state(8)[:-1], "a byte short"),
    (state(8) + b"\0", "a byte left over (a second cache: sliding-window, hybrid)"),
    (struct.pack("<Ii", 0x12345678, 0) + state(8)[8:], "another magic"),
    (state(8, first=3), "cells not at 0 .. n-1"),
    (state(0), "no cells"),
    (struct.pack("<IiI", MAGIC, 0, 0), "no streams"),
    (struct.pack("<IiI", MAGIC, 0, 2**31), "a garbled stream count"),
    (_two_streams(), "cells in two streams: not one sequence's"),
])
def test_a_layout_it_does_not_know_exactly_is_refused(blob, why):
    assert kvsplice.layout(blob) is None, why


def test_cells_out_of_position_order_are_refused():
    blob = bytearray(state(4))
    meta = struct.calcsize("<IiI") + 4
    struct.pack_into("<i", blob, meta, 1)  # cell 0 says position 1
    struct.pack_into("<i", blob, meta + 12, 0)  # cell 1 says position 0
    assert kvsplice.layout(blob) is None


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=300), st.integers(0, 299))
def test_garbage_and_bit_flips_give_a_layout_or_none_never_an_error(garbage, flip):
    lay = kvsplice.layout(garbage)
    assert lay is None or lay.size == len(garbage)
    blob = bytearray(state(6, v_trans=True))
    blob[flip % len(blob)] ^= 0xFF
    lay = kvsplice.layout(blob)
    assert lay is None or lay.size == len(blob)
