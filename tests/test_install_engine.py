"""scripts/install-engine (README commands 1 and 2): the folder its wheel is kept in is named by everything the
build depends on, so a wheel built with other options (pip's default build above all) is never taken for it.
Compiling takes ~7 minutes, so the suite checks the naming with ``--where``; .ci/run and .ci/extras run the
script for real, and tests/test_batch_invariance.py checks that the probe finds the build installed."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from lmchat.backends.llamacpp._lib import ROWWISE_FEATURE

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "install-engine"
PATCH = SCRIPT.with_name("flash-attn-rowwise.patch")


def _where(tmp_path: Path, script: Path = SCRIPT, **env: str) -> Path:
    base = {k: v for k, v in os.environ.items() if k not in ("CMAKE_ARGS", "LMCHAT_LLAMA_CPP_VERSION")}
    done = subprocess.run([str(script), "--where"], env={**base, "XDG_CACHE_HOME": str(tmp_path),
                                                         "PYTHON": sys.executable, **env},
                          capture_output=True, text=True, timeout=30, check=True)
    return Path(done.stdout.strip())


def test_the_wheel_folder_is_in_lmchats_cache_and_named_by_version_and_options(tmp_path):
    default = _where(tmp_path)
    assert default.parent == tmp_path / "lmchat" / "wheels"
    assert default.name.startswith("llama-cpp-python-0.3.36-")
    assert _where(tmp_path) == default  # the same machine and options find the same wheel again
    others = {_where(tmp_path, CMAKE_ARGS="-DGGML_CUDA=ON"), _where(tmp_path, LMCHAT_LLAMA_CPP_VERSION="0.3.37")}
    assert default not in others and len(others) == 2
    assert _where(tmp_path, LMCHAT_LLAMA_CPP_VERSION="0.3.37").name.startswith("llama-cpp-python-0.3.37-")


PATCHES = ("flash-attn-rowwise.patch", "kv-copy-prefix.patch", "q4-1-tiles.patch")


def test_the_wheel_folder_changes_with_any_patch(tmp_path):
    """A wheel compiled before one of lmchat's patches changed is not the engine those patches make."""
    scripts = tmp_path / "scripts"
    shutil.copytree(SCRIPT.parent, scripts)
    script = scripts / SCRIPT.name
    names = {_where(tmp_path, script)}
    for patch in PATCHES:
        with (scripts / patch).open("a") as f:
            f.write("\n")
        names.add(_where(tmp_path, script))
    assert len(names) == len(PATCHES) + 1


def test_an_unknown_argument_is_refused_before_anything_is_built(tmp_path):
    done = subprocess.run([str(SCRIPT), "--now"], env={**os.environ, "XDG_CACHE_HOME": str(tmp_path)},
                          capture_output=True, text=True, timeout=30)
    assert done.returncode == 2 and "unknown argument '--now'" in done.stderr
    assert not (tmp_path / "lmchat").exists()



def test_the_engine_looks_for_the_kernel_version_the_patch_adds():
    """install-engine reads the feature from the patch; the engine has it as a constant: a new kernel version in
    the patch alone would leave the engine with flash attention off (and its KV files named for the old one)."""
    added = re.findall(r'^\+.*push_back\(\{ "FA_ROWWISE", "(\d+)" \}\)', PATCH.read_text(), re.M)
    assert [f"FA_ROWWISE = {v}".encode() for v in added] == [ROWWISE_FEATURE]
