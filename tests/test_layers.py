"""lmchat's layers, checked on its import graph (docs/architecture.md draws them).

Data flows one way: messages -> template -> session -> backend -> stream parsing -> commit ->
store. The core (templates, sessions, backends, stores, the turn protocol, tools) knows nothing of
its two users; the manager serves the server, never the REPL; the CLI sits on top of everything.
A core module that imported ``lmchat.serve`` would pull FastAPI into ``lmchat render``; a cycle
would make import order matter.
"""
from __future__ import annotations

import subprocess
import sys

import pytest

from . import layers

#: the top-level parts of lmchat that use the core, and which of them each may import
USERS = {"manager": set(), "repl": set(), "serve": {"manager"}, "cli": {"manager", "repl", "serve"}}
#: heavy libraries ``import lmchat`` must not load (an engine, a server, a terminal UI, a network client)
HEAVY = ("torch", "transformers", "tokenizers", "llama_cpp", "fastapi", "uvicorn", "starlette", "prompt_toolkit",
         "redis", "httpx", "openai")



@pytest.fixture(scope="module")
def edges() -> list[layers.Edge]:
    """lmchat's import graph, read when a test here runs, not when pytest collects this file (1.8 s on each
    worker's collection)."""
    return layers.graph()


def part(module: str) -> str:
    """``lmchat.serve.app`` -> ``serve``; modules directly in the package (``lmchat.session``) -> ``session``."""
    pieces = module.split(".")
    return pieces[1] if len(pieces) > 1 else ""


def test_the_graph_is_read(edges):
    # the check below is only as good as the graph: it must see the imports everyone knows are there
    pairs = {(e.source, e.target) for e in edges}
    assert any(s.startswith("lmchat.serve") and t.startswith("lmchat.manager") for s, t in pairs)
    assert any(s.startswith("lmchat.session") and t.startswith("lmchat.templates") for s, t in pairs)
    assert any(not e.eager for e in edges) and len(layers.modules()) > 100
    # manager.claims names SessionManager under TYPE_CHECKING only (core imports claims, through turn_calls): no
    # edge, so no cycle
    assert ("lmchat.manager.claims", "lmchat.manager.core") not in pairs
    assert ("lmchat.manager.turn_calls", "lmchat.manager.claims") in pairs


def test_no_import_cycles_eager_or_lazy(edges):
    found = layers.cycles(edges)
    detail = [[(e.source, e.target, e.line) for e in edges if e.source in c and e.target in c] for c in found]
    assert not found, f"import cycles (module, imports, at line): {detail}"


@pytest.mark.parametrize("user", sorted(USERS))
def test_the_core_never_imports_its_users(user, edges):
    wrong = [e for e in edges if part(e.target) == user
             and part(e.source) not in {user, *[u for u, may in USERS.items() if user in may]}
             # the package root names SessionManager lazily (PEP 562), as its public API; python -m lmchat is the CLI
             and not (e.source == "lmchat" and user == "manager" and not e.eager)
             and e.source != "lmchat.__main__"]
    assert not wrong, "\n".join(f"{e.source} imports {e.target} (line {e.line})" for e in wrong)


def test_importing_lmchat_loads_no_engine_server_or_terminal_library():
    code = f"import sys, lmchat; print([m for m in {HEAVY!r} if m in sys.modules])"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]", out.stdout


def test_lmchat_serve_imports_neither_the_repl_nor_another_command():
    # main() builds the options of the command it runs only: the other commands' modules (lmchat chat's the REPL)
    # would stay in a server's memory unused (repl.settings: the sampling settings both commands' flags share)
    # main() itself, as `lmchat serve --help` runs it: it parses the serve command's options, then exits
    code = ("import contextlib, io, sys; from lmchat.cli.main import main\n"
            "with contextlib.suppress(SystemExit), contextlib.redirect_stdout(io.StringIO()):\n"
            "    main(['serve', '--help'])\n"
            "print(sorted(m for m in sys.modules if m.startswith('lmchat.repl.') and m != 'lmchat.repl.settings'"
            " or m.startswith('lmchat.cli.') and m.endswith('_cmd') and m != 'lmchat.cli.serve_cmd'))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]", out.stdout
