"""The line limit on every tracked ``.py`` file (setup.py, docs/ too; ruff checks it only in lmchat, tests and
bench). ruff and mypy run outside the test run, as scripts/check (and .ci/run before the tests) runs them: a cold
mypy inside every pytest took 40 s.
"""
import shutil
import subprocess
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

