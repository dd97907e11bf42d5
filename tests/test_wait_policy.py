"""llama.cpp's OpenMP threads spin briefly (GOMP_SPINCOUNT=1000) and then sleep while they wait, unless the
environment says otherwise (docs/backends.md, threads): libgomp reads its variables once, when it loads, so each
case runs in a fresh interpreter."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytest.importorskip("llama_cpp")

SHOW = ("from lmchat.backends.llamacpp._lib import lib; import os; lib(); "
        "print(os.environ.get('OMP_WAIT_POLICY'), os.environ.get('GOMP_SPINCOUNT'))")


@pytest.mark.parametrize("given, expected", [({}, "None 1000"), ({"OMP_WAIT_POLICY": "active"}, "active None"),
                                             ({"OMP_WAIT_POLICY": "passive"}, "passive None"),
                                             ({"GOMP_SPINCOUNT": "50"}, "None 50")])
def test_llama_cpp_loads_with_a_short_spin_unless_the_user_chose(given, expected):
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
    out = subprocess.run([sys.executable, "-c", SHOW], env={**env, **given}, capture_output=True, text=True,
                         check=True)
    assert out.stdout.split("\n")[-2] == expected
