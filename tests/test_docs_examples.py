"""Every code example in the docs runs (conventions: tests/docs_examples.py), and the site builds strictly."""
from __future__ import annotations

import functools
import json
import os
import re
import subprocess
import sys

import pytest

from .docs_examples import ROOT, extract, pages, run_page

BLOCKS = [b for page in pages() for b in extract(page)]
EXAMPLES = [b for b in BLOCKS if b.is_example]


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    """Run every page's examples once, in a child process (see tests/docs_examples.py)."""
    out = tmp_path_factory.mktemp("docs") / "results.json"
    proc = subprocess.run([sys.executable, "-m", "tests.docs_examples", str(out), *map(str, pages())], cwd=ROOT,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return {r["id"]: r for r in json.loads(out.read_text())}


@pytest.mark.parametrize("block", EXAMPLES, ids=[b.id for b in EXAMPLES])
def test_example(block, results):
    if not block.runs:
        pytest.skip(f"marked not runnable: {block.arg or 'a shell block without <!-- run -->'}")
    result = results[block.id]
    assert result["status"] == "passed", result["detail"]


def test_every_unmarked_example_runs(results):
    unmarked = [b for b in EXAMPLES if b.mark is None]
    passed = [b for b in unmarked if results[b.id]["status"] == "passed"]
    failed = [r["id"] for r in results.values() if r["status"] == "failed"]
    assert len(passed) / len(unmarked) == 1.0, \
        f"{len(passed)} of {len(unmarked)} unmarked examples ran; failed: {failed}"
    assert not failed, f"failed (marked runnable, hidden setups, files): {failed}"


def test_command_examples_are_marked():
    """A shell or console block with an lmchat command either runs or says why it cannot."""
    unmarked = [b.id for b in EXAMPLES if b.lang != "python" and b.mark is None]
    assert not unmarked, f"mark with <!-- run --> or <!-- no-run: REASON -->: {unmarked}"


def test_site_builds_strictly(tmp_path):
    pytest.importorskip("mkdocs", reason="mkdocs is not installed (pip install -e '.[docs]')")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}  # Material's end-of-life banner: not about this site
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
                          cwd=ROOT, capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    # Python-Markdown keeps the backslash of `a\|b` inside a table's code span: the page would show it
    shown = {page.relative_to(tmp_path / "site").as_posix():
             re.findall(r"<code>[^<]*\\\|[^<]*</code>", page.read_text())
             for page in (tmp_path / "site").rglob("*.html")}
    assert not {k: v for k, v in shown.items() if v}, "a literal backslash before | in code on the site"
    repl = (tmp_path / "site" / "repl" / "index.html").read_text()
    assert "/debug on|off" in repl.replace("&#124;", "|")


def test_the_runner_checks_outputs_and_marks(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("```python\nx = 1 + 1\nx   # 2\n```\n\n```python\nx   # 3\n```\n\n"
                    "<!-- run -->\n```bash\nlmchat templates | grep -q qwen2.5\n```\n")
    assert [r["status"] for r in run_page(page)] == ["passed", "failed", "passed"]
    page.write_text("<!-- no-run -->\n```python\nimport lmchat\n```\n")
    with pytest.raises(ValueError, match="needs a reason"):
        extract(page)


def _setup_cfg():
    import configparser

    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "setup.cfg")

    def split(text):
        return [line.strip() for line in text.splitlines() if line.strip() and not line.startswith("#")]

    return split(cfg["options"]["install_requires"]), {k: split(v) for k, v in cfg["options.extras_require"].items()}


@functools.cache
def _installed_modules() -> dict[str, list[str]]:
    """Top-level module -> the installed distributions that provide it (reading every distribution's file list
    takes seconds: once)."""
    from importlib import metadata

    return dict(metadata.packages_distributions())


def _modules_of(requirements) -> set[str]:
    """The top-level modules the distributions named by ``requirements`` provide (those installed here)."""
    from packaging.requirements import Requirement

    def norm(name):
        return re.sub(r"[-_.]+", "-", name).lower()

    wanted = {norm(Requirement(r).name) for r in requirements}
    return {module for module, dists in _installed_modules().items()
            if any(norm(d) in wanted for d in dists)} | {norm(w).replace("-", "_") for w in wanted}


def test_example_imports_come_with_the_extras_the_page_installs():
    """A reader who runs a page's `pip install -e '.[EXTRAS]'` can run its examples: every import is in the
    standard library, lmchat, its core dependencies, or an extra the page names (directly: not by chance,
    as a dependency of a dependency)."""
    import ast

    core, extras = _setup_cfg()
    missing = {}
    for page in pages():
        text = page.read_text(encoding="utf-8")
        named = {e for m in re.finditer(r"pip install -e '\.\[([\w,-]+)\]'", text) for e in m.group(1).split(",")}
        assert named <= set(extras), f"{page.name} installs extras setup.cfg lacks: {named - set(extras)}"
        provided = _modules_of(core + [r for e in named for r in extras[e]])
        for block in extract(page):
            if block.lang != "python" or not block.runs:
                continue  # hidden setups stand for what the reader has already
            for node in ast.walk(ast.parse(block.code)):
                names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                         [node.module] if isinstance(node, ast.ImportFrom) and node.level == 0 else [])
                for root in {n.split(".")[0] for n in names} - set(sys.stdlib_module_names) - {"lmchat"}:
                    if root not in provided:
                        missing.setdefault(f"{block.id} (extras: {sorted(named)})", []).append(root)
    assert not missing, f"imports no extra the page installs provides: {missing}"


def test_readme_names_every_extra_and_links_why():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    sentence = readme.split("Extras:", 1)[1].split("A bare", 1)[0]
    _, extras = _setup_cfg()
    assert {e for e in extras if f"`{e}`" not in sentence} == set()
    assert "(docs/why.md)" in readme and "(why.md)" in (ROOT / "docs" / "index.md").read_text(encoding="utf-8")
