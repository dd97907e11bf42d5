"""llama.cpp's OpenMP threads sleep while they wait unless the environment says otherwise (docs/backends.md,
threads): libgomp reads OMP_WAIT_POLICY once, when it loads, so each case runs in a fresh interpreter."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytest.importorskip("llama_cpp")

SHOW = ("from lmchat.backends.llamacpp._lib import lib; import os; "
        "before = os.environ.get('OMP_WAIT_POLICY'); lib(); print(before, os.environ['OMP_WAIT_POLICY'])")


@pytest.mark.parametrize("given, expected", [(None, "None PASSIVE"), ("active", "active active")])
def test_llama_cpp_loads_with_passive_threads_unless_the_user_chose(given, expected):
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    if given is not None:
        env["OMP_WAIT_POLICY"] = given
    out = subprocess.run([sys.executable, "-c", SHOW], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.split("\n")[-2] == expected
