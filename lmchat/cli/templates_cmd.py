"""``lmchat templates``: the registry with aliases, bundled sampling settings, tool-call format and reasoning."""
from __future__ import annotations

import argparse
import json
import sys
from typing import Any

#: the model family a template belongs to, by the first prefix of its name that matches (order matters: the
#: more specific first); shown by ``lmchat templates`` and the catalogue
FAMILIES = (
    ("zephyr-gemma", "Zephyr"), ("codellama", "CodeLlama"), ("tinyllama", "TinyLlama"), ("chatglm", "GLM"),
    ("glm", "GLM"), ("qwen", "Qwen"), ("qwq", "Qwen"), ("chatml", "ChatML"), ("smollm", "SmolLM"), ("yi", "Yi"),
    ("command-r", "Command-R"), ("deepseek", "DeepSeek"), ("firefunction", "FireFunction"),
    ("functionary", "Functionary"), ("gemma", "Gemma"), ("gpt-oss", "gpt-oss"), ("granite", "Granite"),
    ("hermes", "Hermes"), ("internlm", "InternLM"), ("kimi", "Kimi"), ("llama", "Llama"), ("falcon", "Falcon"),
    ("openchat", "OpenChat"), ("solar", "SOLAR"), ("mistral", "Mistral"), ("mixtral", "Mistral"),
    ("codestral", "Mistral"), ("phi", "Phi"), ("zephyr", "Zephyr"), ("baichuan", "Baichuan"),
    ("vicuna", "Vicuna"), ("wizardlm", "WizardLM"),
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print a JSON list instead of a table")


def family(name: str) -> str:
    return next((label for prefix, label in FAMILIES if name.startswith(prefix)), "—")


def reasoning(name: str) -> str:
    """How the template's model reasons: ``<think>`` blocks (``opened`` when the generation prompt opens one),
    its format's own markers (gpt-oss' analysis channel, Gemma 4's thought channel, Command R7B's thinking), or
    not at all (—)."""
    from ..tools.registry import FORMATS, prompt_opens_think, response_format

    fmt = response_format(name)
    if not fmt.reasoning:
        return "—"
    if FORMATS[fmt.tools].reasons:
        return f"{fmt.tools} markers"
    return "<think> (opened)" if prompt_opens_think(name) else "<think>"


# Any: one row per template, its fields of several types (the JSON of ``lmchat templates --json``; the table
# reads them by name)
def catalogue() -> list[dict[str, Any]]:
    from ..registry import aliases_of, template_class, template_names

    rows = []
    for name in template_names():
        cls = template_class(name)
        t = cls()
        rows.append(
            {
                "name": name,
                "family": family(name),
                "aliases": aliases_of(name),
                **{k: list(v) if isinstance(v, tuple) else v for k, v in t.sampling_params.items()},
                "official": cls.official,
                "official_tool_use": cls.official_tool_use,
                "hyperparameter_source": cls.hyperparameter_source,
                "prefix_stable": cls.prefix_stable,
                "tools": cls.supports_tools,
                "tool_format": cls.tool_format,
                "reasoning": reasoning(name),
                "summary": (cls.__doc__ or "").strip().splitlines()[0],
            }
        )
    return rows


def run(args: argparse.Namespace) -> int:
    rows = catalogue()
    if args.json:
        json.dump(rows, sys.stdout, ensure_ascii=False, indent=2)
        sys.stdout.write("\n")
        return 0
    header = ("NAME", "FAMILY", "SESSION_LEN", "TOP_P", "TOP_K", "TEMP", "REP_PEN", "CAPABILITY", "TOOL_CALLS",
              "REASONING", "ALIASES")
    table = [header] + [
        (
            r["name"],
            r["family"],
            str(r["session_len"]),
            str(r["top_p"]),
            str(r["top_k"]),
            str(r["temperature"]),
            str(r["repetition_penalty"]),
            r["capability"],
            r["tool_format"] if r["tool_format"] != "plain" else "—",
            r["reasoning"],
            ", ".join(r["aliases"]),
        )
        for r in rows
    ]
    widths = [max(len(row[i]) for row in table) for i in range(len(header) - 1)]
    for row in table:
        print("  ".join(c.ljust(w) for c, w in zip(row[:-1], widths, strict=True)) + "  " + row[-1])
    return 0
