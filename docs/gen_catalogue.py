"""Write docs/catalogue.md from the template registry (``--check``: fail if it is stale).

The page is generated so it can never drift from the code; a test runs ``--check``.
"""
from __future__ import annotations

import sys
from pathlib import Path

from lmchat.cli.templates_cmd import catalogue

PAGE = Path(__file__).resolve().parent / "catalogue.md"


def render() -> str:
    rows = catalogue()
    out = [
        "# Template catalogue",
        "",
        "Generated from the registry by `python docs/gen_catalogue.py`; do not edit by hand.",
        "`lmchat templates --json` prints the same data.",
        "",
        "*Official* names the Hugging Face chat template a template is byte-exact with (checked by the",
        "conformance tests), and after a `+` the model's second one, which it renders when tools are given",
        "(the `tool_use` template). *Stable* templates never reset a session on plain conversations. *Tools*:",
        "whether the template renders tools, and the syntax its model writes calls in (see tools.md);",
        "*reasoning*: `<think>` blocks (*opened*: the generation prompt opens one) or its format's own markers.",
        "",
        "| name | family | aliases | official template | session_len | top_p | top_k | temperature | "
        "repetition_penalty | stop words | stable | tools | reasoning |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        stops = ", ".join(f"`{w}`" for w in r["stop_words"] or []) or "—"
        official = (r["official"] or "—") + (f" + {r['official_tool_use']}" if r["official_tool_use"] else "")
        calls = "—" if r["tool_format"] == "plain" else f"`{r['tool_format']}`"
        tools = f"yes, {calls}" if r["tools"] else calls
        why = r["reasoning"].replace("<", "&lt;")
        out.append(
            f"| `{r['name']}` | {r['family']} | {', '.join(f'`{a}`' for a in r['aliases']) or '—'} | {official} | "
            f"{r['session_len']} | {r['top_p']} | {r['top_k']} | {r['temperature']} | {r['repetition_penalty']} | "
            f"{stops} | {'yes' if r['prefix_stable'] else 'no'} | {tools} | {why} |"
        )
    out += ["", "## Notes per template", ""]
    for r in rows:
        out.append(f"- **{r['name']}** ({r['capability']}): {r['summary']} Sampling: {r['hyperparameter_source']}.")
    return "\n".join(out) + "\n"


def main(argv: list[str]) -> int:
    text = render()
    if "--check" in argv:
        if not PAGE.exists() or PAGE.read_text(encoding="utf-8") != text:
            print(f"{PAGE} is stale: run python docs/gen_catalogue.py", file=sys.stderr)
            return 1
        return 0
    PAGE.write_text(text, encoding="utf-8")
    print(f"wrote {PAGE}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
