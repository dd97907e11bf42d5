"""The project's style, checked by the test command (README, .ci/run) so that it keeps holding: ruff (its rules in
ruff.toml: pycodestyle and pyflakes, lines of at most 120 characters) on lmchat, tests and bench, and the line
limit on every tracked ``.py`` file (setup.py, docs/ too).
"""
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LIMIT = 120


def tracked_python_files() -> list[str]:
    """``git ls-files '*.py'`` at the repository root; skips where there is no git or no .git."""
    if shutil.which("git") is None or not (ROOT / ".git").exists():  # .git is a file in a worktree
        pytest.skip("needs git and the repository's .git (this is not a git checkout)")
    out = subprocess.run(["git", "ls-files", "-z", "*.py"], cwd=ROOT, capture_output=True, text=True)
    if out.returncode != 0:
        pytest.skip(f"git ls-files failed: {out.stderr.strip()}")
    return [path for path in out.stdout.split("\0") if path]


def test_no_line_of_a_tracked_python_file_is_longer_than_120_characters():
    files = tracked_python_files()
    assert files, "git ls-files lists no Python file"
    long = []
    for path in files:
        file = ROOT / path
        if not file.is_file():  # tracked, but deleted in the work tree
            continue
        for number, line in enumerate(file.read_text(encoding="utf-8").split("\n"), 1):
            length = len(line.rstrip("\r"))
            if length > LIMIT:
                long.append(f"{path}:{number}: {length}")
    assert not long, (
        f"{len(long)} line(s) longer than the project's limit of {LIMIT} characters (break them inside brackets, "
        "split long strings by implicit concatenation):\n" + "\n".join(long)
    )


#: what ruff checks (ruff.toml says how); the README's `ruff check lmchat tests bench`
LINTED = ("lmchat", "tests", "bench")


def test_ruff_finds_nothing_in_lmchat_tests_and_bench():
    """``ruff check`` on the tracked files of LINTED: a file of someone's work in progress, not yet added, is
    not this test's business (as for the line limit)."""
    files = [path for path in tracked_python_files() if path.split("/", 1)[0] in LINTED and (ROOT / path).is_file()]
    assert files, f"git ls-files lists no Python file under {LINTED}"
    out = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", "--output-format", "concise", *files],
                         cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert "No module named ruff" not in out.stderr, "ruff is not installed: pip install -e '.[test]' installs it"
    assert out.returncode == 0, f"ruff check (settings: ruff.toml):\n{out.stdout}{out.stderr}"


def test_mypy_finds_nothing_in_the_checked_packages():
    """``python -m mypy`` as mypy.ini configures it: the packages its ``files`` names, strictly (the rest of
    lmchat is not checked yet: mypy.ini says which). The cache (.mypy_cache, ignored by git) makes a re-run take
    a few seconds; a cold run about 40 s on a 2-core machine."""
    if not (ROOT / "mypy.ini").is_file():
        pytest.skip("no mypy.ini (not a checkout of the repository)")
    out = subprocess.run([sys.executable, "-m", "mypy", "--config-file", "mypy.ini", "--no-error-summary"],
                         cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert "No module named mypy" not in out.stderr, "mypy is not installed: pip install -e '.[test]' installs it"
    assert out.returncode == 0, f"mypy (settings: mypy.ini):\n{out.stdout}{out.stderr}"
