"""A branch's copy of a prefix between two sequences (scripts/kv-copy-prefix.patch, ``SequencePool.copy``).

llama.cpp copies the cells of the prefix from one stream to the other itself; without the patch, or where it
cannot, the whole state goes through host memory and is cut back. Both must leave the sequence the same state,
byte for byte (``llama_state_seq_get_data`` of it), with flash attention on (values in rows) and off (values
transposed), at every length; and a copy llama.cpp refuses must change nothing. On the real engine and the
bundled GGUF, and on Gemma 3 (an SWA cache, which only the host path copies).
"""
from __future__ import annotations

import random

import pytest

pytest.importorskip("llama_cpp")

from lmchat.backends.llamacpp._lib import ROWWISE_FEATURE, lib, load_model, prefix_copier  # noqa: E402
from lmchat.backends.llamacpp.hostcache import HostCache  # noqa: E402
from lmchat.backends.llamacpp.sequences import SequencePool, SessionState  # noqa: E402
from lmchat.backends.llamacpp.shape import ContextShape  # noqa: E402

from . import gguf_files  # noqa: E402

DONOR = 300  # ids the donor sequence holds: two micro-batches' cells (256 and 44)


class Pool:
    """A llama context of four sequences on ``model`` and lmchat's pool over it; ``prefill`` fills one."""

    def __init__(self, model, flash_attn: bool) -> None:
        self.L = L = lib()
        self.vocab = L.llama_vocab_n_tokens(L.llama_model_get_vocab(model))
        shape = ContextShape(n_ctx=4 * 1024, n_seq=4, threads=2, flash_attn=flash_attn)
        self.ctx = L.llama_init_from_model(model, shape.params(L))
        assert self.ctx, "llama.cpp made no context"
        self.pool = SequencePool(self.ctx, 4, HostCache(2**30))
        self.states = [SessionState(f"s{seq}") for seq in range(4)]
        for seq, state in enumerate(self.states):
            self.pool.owner[seq], state.seq = state, seq

    def prefill(self, seq: int, ids: list[int]) -> None:
        L = self.L
        for start in range(0, len(ids), 256):
            chunk = ids[start:start + 256]
            batch = L.llama_batch_init(len(chunk), 0, 1)
            for i, token in enumerate(chunk):
                batch.token[i], batch.pos[i], batch.n_seq_id[i] = token, start + i, 1
                batch.seq_id[i][0], batch.logits[i] = seq, i == len(chunk) - 1
            batch.n_tokens = len(chunk)
            try:
                assert L.llama_decode(self.ctx, batch) == 0
            finally:
                L.llama_batch_free(batch)
        self.states[seq].ids = list(ids)

    def state_bytes(self, seq: int) -> bytes:
        blob = self.pool.save(seq)
        return b"" if blob is None else bytes(blob)

    def close(self) -> None:
        self.L.llama_free(self.ctx)


def _ids(n: int, seed: int = 7) -> list[int]:
    rng = random.Random(seed)
    return [rng.randrange(100, 40_000) for _ in range(n)]


@pytest.fixture(scope="module")
def smollm2():
    model = load_model(gguf_files.bundled_gguf())
    yield model
    lib().llama_model_free(model)  # after the contexts on it (the donor fixtures end first)


@pytest.fixture(scope="module", params=[True, False], ids=["flash-attn", "values-transposed"])
def donor(request, smollm2):
    """Sequence 0 holding :data:`DONOR` ids."""
    pool = Pool(smollm2, flash_attn=request.param)
    pool.prefill(0, _ids(DONOR))
    yield pool
    pool.close()


def test_the_installed_engine_copies_prefixes_itself():
    """install-engine applies its patches all or none: a build with lmchat's kernel has the copy too."""
    L = lib()
    if ROWWISE_FEATURE not in L.llama_print_system_info():
        pytest.skip("llama-cpp-python was not installed by scripts/install-engine")
    assert prefix_copier(L) is not None


@pytest.mark.parametrize("n", [1, 256, DONOR - 1, DONOR])
def test_a_prefix_copied_in_llama_cpp_is_the_state_a_whole_copy_cut_back_leaves(donor, n):
    pool, dst = donor.pool, donor.states[1]
    if pool._copy_prefix is None:
        pytest.skip("this llama-cpp-python has no lmchat_memory_seq_cp_prefix")
    assert pool.copy(0, dst, DONOR, n) == n  # llama.cpp's copy of n cells
    dst.ids = donor.states[0].ids[:n]
    copied = donor.state_bytes(1)
    restores = pool.restores
    copier, pool._copy_prefix = pool._copy_prefix, None
    try:
        assert pool.copy(0, dst, DONOR, n) == DONOR  # all of it through host memory, then cut back
    finally:
        pool._copy_prefix = copier
    dst.ids = list(donor.states[0].ids)
    pool.truncate(dst, n)
    assert dst.ids == donor.states[0].ids[:n] and pool.restores == restores + 1
    assert copied == donor.state_bytes(1)
    if n < DONOR:
        assert len(copied) < len(donor.state_bytes(0))  # only the prefix's cells


def test_the_copied_prefix_computes_what_a_prefill_of_it_computes(donor):
    """The next id's logits after the copy are those after a fresh prefill of the same ids, bit for bit."""
    L, pool = donor.L, donor.pool
    n, ids = 257, donor.states[0].ids
    held = pool.copy(0, donor.states[1], DONOR, n)
    donor.states[1].ids = ids[:held]
    pool.truncate(donor.states[1], n)
    assert donor.states[1].ids == ids[:n]
    pool.clear(donor.states[2])
    donor.prefill(2, ids[:n])
    logits = []
    for seq in (1, 2):
        batch = L.llama_batch_init(1, 0, 1)
        batch.token[0], batch.pos[0], batch.n_seq_id[0], batch.seq_id[0][0], batch.logits[0] = ids[n], n, 1, seq, True
        batch.n_tokens = 1
        try:
            assert L.llama_decode(donor.ctx, batch) == 0
        finally:
            L.llama_batch_free(batch)
        row = L.llama_get_logits_ith(donor.ctx, 0)
        logits.append(row[:donor.vocab])
    assert logits[0] == logits[1]


@pytest.mark.parametrize("src, dst", [(0, 0), (0, 3), (0, 9), (-1, 3), (9, 3)],
                         ids=["itself", "a-sequence-holding-ids", "no-such-destination", "negative", "no-such-source"])
def test_a_copy_llama_cpp_refuses_changes_nothing(donor, src, dst):
    copier = donor.pool._copy_prefix
    if copier is None:
        pytest.skip("this llama-cpp-python has no lmchat_memory_seq_cp_prefix")
    pool = donor.pool
    pool.clear(donor.states[3])
    donor.prefill(3, _ids(40, seed=3))
    before = [donor.state_bytes(seq) for seq in range(4)]
    assert copier(pool.mem, src, dst, 100) == -1
    assert [donor.state_bytes(seq) for seq in range(4)] == before


def test_an_swa_cache_copies_through_host_memory(tmp_path_factory):
    """Gemma 3's cache keeps only a window of some layers' cells: llama.cpp declines (-1, nothing copied) and
    the whole state goes through host memory, as before the patch."""
    model = load_model(gguf_files.other_family_gguf(tmp_path_factory))
    pool = Pool(model, flash_attn=True)
    try:
        pool.prefill(0, _ids(300, seed=5))
        whole = pool.state_bytes(0)
        if pool.pool._copy_prefix is not None:
            empty = pool.state_bytes(1)
            assert pool.pool._copy_prefix(pool.pool.mem, 0, 1, 100) == -1
            assert pool.state_bytes(1) == empty and pool.L.llama_memory_seq_pos_max(pool.pool.mem, 1) == -1
        assert pool.pool.copy(0, pool.states[1], 300, 100) == 300
        assert len(pool.state_bytes(1)) == len(whole)  # all of it (the bytes name another sequence)
    finally:
        pool.close()
        lib().llama_model_free(model)
