"""The code examples of the documentation: extracted from the pages and run.

The conventions (docs/index.md, "Examples are tests", explains them to writers):

* a ```python block runs; the blocks of a page run in order, in one namespace,
  in a temporary folder of their own;
* ``<!-- no-run: REASON -->`` on the line before a fence: the block is not run;
  the reason is required;
* ``<!-- run -->`` before a ```bash block: bash runs it (errexit, pipefail) in
  the page's folder, with the ``lmchat`` of this Python first on PATH; a bash
  or console block that mentions ``lmchat `` must carry one of the two marks,
  so no command example goes untested by oversight;
* ``<!-- file: NAME -->`` before a block writes its text to NAME in the page's
  folder (a config file that later examples load); it is not an example;
* ``<!-- setup`` ... ``-->``: hidden Python run at that point, for what a
  reader is assumed to have (a tokenizer, a model folder); it may use the test
  helpers of ``tests/``;
* an expression statement whose trailing comment is exactly a Python literal
  (``t.decorate_prompt("Hi")   # '<|User|>:Hi'``) is checked against it; ``...``
  inside an expected string stands for any text.

Run as ``python -m tests.docs_examples OUT.json PAGE...`` (one process for all
pages, so examples cannot touch the test process's registry or cwd, and a
tokenizer loaded by one page's setup is reused by the next).
"""
from __future__ import annotations

import ast
import contextlib
import io
import json
import os
import re
import subprocess
import sys
import tempfile
import textwrap
import tokenize
import traceback
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FENCE = re.compile(r"^(`{3,})\s*([\w-]*)\s*$")
MARK = re.compile(r"^<!--\s*(run|no-run|file)\s*(?::\s*(.*?))?\s*-->$")


@dataclass(frozen=True)
class Block:
    page: str  # relative to the repository
    line: int  # of the opening fence
    lang: str
    code: str
    mark: str | None = None  # 'run', 'no-run', 'file', 'setup' or None
    arg: str = ""  # the no-run reason or the file name

    @property
    def id(self) -> str:
        return f"{self.page}:{self.line}"

    @property
    def is_example(self) -> bool:
        """Code a reader may copy: Python, and shell or console blocks that run lmchat."""
        if self.mark in ("file", "setup"):
            return False
        return self.lang == "python" or (self.lang in ("bash", "console") and "lmchat " in self.code)

    @property
    def runs(self) -> bool:
        return self.is_example and self.mark != "no-run" and (self.lang == "python" or self.mark == "run")


def pages() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def extract(path: Path) -> list[Block]:
    """The fenced blocks and hidden setups of a page, in order; malformed marks raise ValueError."""
    path = path.resolve()
    page = str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)
    lines = path.read_text(encoding="utf-8").splitlines()
    blocks, mark, i = [], None, 0
    while i < len(lines):
        text = lines[i].strip()
        if text == "<!-- setup":
            end = lines.index("-->", i)
            blocks.append(Block(page, i + 1, "python", "\n".join(lines[i + 1:end]) + "\n", "setup"))
            i = end + 1
            continue
        if m := MARK.match(text):
            mark = (m.group(1), m.group(2) or "")
            if mark[0] in ("no-run", "file") and not mark[1]:
                raise ValueError(f"{page}:{i + 1}: <!-- {mark[0]}: ... --> needs a reason or a file name")
        elif m := FENCE.match(text):
            end = next(j for j in range(i + 1, len(lines)) if lines[j].strip() == m.group(1))
            kind, arg = mark or (None, "")
            code = textwrap.dedent("\n".join(lines[i + 1:end]) + "\n")  # fences indented in a list item
            blocks.append(Block(page, i + 1, m.group(2), code, kind, arg))
            i, mark = end + 1, None
            continue
        elif text:
            mark = None  # a mark applies to the fence right after it only
        i += 1
    return blocks


def matches(expected, actual) -> bool:
    if isinstance(expected, str) and isinstance(actual, str) and "..." in expected:
        pattern = ".*?".join(re.escape(part) for part in expected.split("..."))
        return re.fullmatch(pattern, actual, re.DOTALL) is not None
    if isinstance(expected, (tuple, list)) and isinstance(actual, (tuple, list)):
        return len(expected) == len(actual) and all(matches(e, a) for e, a in zip(expected, actual, strict=True))
    return expected == actual


def literal_comments(code: str) -> dict[int, object]:
    """Line number -> the value of a trailing comment that is exactly a Python literal."""
    found = {}
    for tok in tokenize.generate_tokens(io.StringIO(code).readline):
        if tok.type == tokenize.COMMENT:
            with contextlib.suppress(ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
                found[tok.start[0]] = ast.literal_eval(tok.string[1:].strip())
    return found


def run_python(block: Block, namespace: dict) -> None:
    """Statement by statement, so an expression with a literal comment can be checked against it."""
    tree = ast.parse(block.code)
    expected = literal_comments(block.code)
    ast.increment_lineno(tree, block.line)  # tracebacks name the line of the page
    for stmt in tree.body:
        if isinstance(stmt, ast.Expr) and stmt.end_lineno - block.line in expected:
            want = expected[stmt.end_lineno - block.line]
            value = eval(compile(ast.Expression(stmt.value), block.page, "eval"), namespace)
            if not matches(want, value):
                raise AssertionError(f"{block.page}:{stmt.end_lineno}: the comment says {want!r}, got {value!r}")
        else:
            exec(compile(ast.Module([stmt], type_ignores=[]), block.page, "exec"), namespace)


def run_bash(block: Block, folder: Path) -> None:
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
           "LMCHAT_DATA_DIR": str(folder / ".lmchat-data")}
    proc = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", block.code], cwd=folder, env=env,
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120)
    if proc.returncode != 0:
        raise AssertionError(f"exit {proc.returncode}\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}")


def run_page(path: Path) -> list[dict]:
    """Run a page's examples; one result per example (setups and files report only when they fail)."""
    results = []
    namespace = {"__name__": "__docs__"}
    home = os.getcwd()
    with tempfile.TemporaryDirectory(prefix="lmchat-docs-") as tmp:
        folder = Path(tmp)
        for block in extract(path):
            if block.is_example and not block.runs:
                results.append({"id": block.id, "status": "not run", "detail": block.arg})
                continue
            if not (block.runs or block.mark in ("file", "setup")):
                continue  # an install command, a JSON shape, a transcript...
            out = io.StringIO()
            try:
                os.chdir(folder)
                with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
                    if block.mark == "file":
                        (folder / block.arg).write_text(block.code, encoding="utf-8")
                    elif block.lang == "python":
                        run_python(block, namespace)
                    else:
                        run_bash(block, folder)
                status, detail = "passed", ""
            except BaseException as exc:  # noqa: BLE001 - an example's SystemExit is a failure too
                status = "failed"
                detail = "".join(traceback.format_exception(exc)[-12:]) + out.getvalue()[-2000:]
            finally:
                os.chdir(home)
            if block.is_example or status == "failed":
                results.append({"id": block.id, "status": status, "detail": detail})
    return results


def main(argv: list[str]) -> int:
    sys.path.insert(0, str(ROOT))  # the setups import tests.* helpers
    results = [r for page in argv[1:] for r in run_page(Path(page))]
    Path(argv[0]).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
