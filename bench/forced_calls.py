"""Forced tool calls (issue 28) on the bundled model: how often the answer is a valid call, in every syntax.

For each tool-call format with a grammar (``lmchat.tools.forcing.SYNTAXES``), one template that writes it,
through the session manager on the embedded llama.cpp engine, sampling on (temperature 0.8, seeds 0..N-1),
two tools (tests/constraint_schemas.py: ``get_weather`` with a bounded string and integer, ``add`` with two
numbers) and a question that asks for the weather. ``tool_choice`` "required" (either tool) and named
(``get_weather``): with the grammar, the answer as the server samples it (``for_answer``: after a reasoning
block, gpt-oss' after a free analysis message); without it, the same prompt and seed (what ``auto`` gives).
An answer is valid when the template's own parser reads at least one call from it, every call names a
chosen tool and its arguments validate against the tool's ``parameters`` (``jsonschema``).

SmolLM2-135M knows none of these syntaxes (it was trained on ChatML without tools): the figures without the
grammar show what a small model writes alone, not what the families' own models would. Under gpt-oss' grammar
its analysis message (and Gemma 4's thought channel) gets a budget of 30 tokens, past which its end is forced:
SmolLM2 never writes that token by itself (a model of the family does).
"""
from __future__ import annotations

import argparse
import json

from tests.constraint_schemas import PARAMS, TOOLS, forced_for_a_small_model

from .common import save, table

ASK = [{"role": "user", "content": "What will the weather be in Oslo for the next 3 days?"}]
#: one template per format: the family's best known model
TEMPLATES = {"hermes": "qwen2.5", "llama3_json": "llama3.1", "mistral": "mistral-v0.3", "granite": "granite3",
             "granite33": "granite-3.3", "internlm": "internlm2", "glm4": "glm4", "glm45": "glm-4.5",
             "chatglm3": "chatglm3", "deepseek_v3": "deepseek-v3", "deepseek_v31": "deepseek-v3.1",
             "kimi_k2": "kimi-k2", "mistral_v11": "mistral-small-3.2", "qwen3_coder": "qwen3-coder",
             "harmony": "gpt-oss", "phi4_mini": "phi4-mini", "functionary_v3_1": "functionary-v3.1",
             "functionary_v3_2": "functionary-v3.2", "firefunction_v2": "firefunction-v2", "gemma4": "gemma4-e4b"}
MODES = {"required": None, "named": ["get_weather"]}


def valid(parsed, names) -> bool:
    import jsonschema

    if not parsed.tool_calls:
        return False
    for call in parsed.tool_calls:
        name = call["function"]["name"]
        if name not in (names or PARAMS):
            return False
        try:
            jsonschema.validate(json.loads(call["function"]["arguments"]), PARAMS[name])
        except (ValueError, jsonschema.ValidationError):
            return False
    return True


def answers(mgr, backend, seeds: int, max_tokens: int) -> dict:
    from lmchat.manager import TurnRequest
    from lmchat.tools.forcing import SYNTAXES

    out = {}
    for fmt in SYNTAXES:
        template = TEMPLATES[fmt]
        for mode, names in MODES.items():
            rows: dict[str, list] = {"with": [], "without": []}
            made = forced_for_a_small_model(template, names, backend.special_tokens)
            for seed in range(seeds):
                for how, constraint in (("with", made), ("without", None)):
                    r = mgr.run_turn(TurnRequest(mgr.oneoff(tools=TOOLS, template=template), ASK,
                                                 max_new_tokens=max_tokens,
                                                 params={"temperature": 0.8, "seed": seed, "constraint": constraint}))
                    rows[how].append({"seed": seed, "text": r.text, "finish": r.finish_reason,
                                      "valid": valid(r.parsed, names)})
            out[f"{fmt} {mode}"] = {"template": template, **rows}
            print(fmt, mode, {how: f"{sum(x['valid'] for x in a)}/{len(a)}" for how, a in rows.items()}, flush=True)
    return out


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m bench forced_calls", description=__doc__.split("\n\n")[0])
    p.add_argument("--seeds", type=int, default=5, help="answers per format and mode, with and without")
    p.add_argument("--max-tokens", type=int, default=160)
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args(argv)

    from lmchat import SessionManager
    from lmchat.backends.llamacpp import LlamaCppBackend

    with LlamaCppBackend(threads=args.threads, sessions=1, ctx=4096) as backend:
        found = answers(SessionManager(backend), backend, args.seeds, args.max_tokens)
    rows = []
    for name, r in found.items():
        fmt, mode = name.split(" ")
        cut = sum(x["finish"] == "length" for x in r["with"])
        rows.append([f"`{fmt}`", r["template"], mode, f"{sum(x['valid'] for x in r['with'])}/{len(r['with'])}",
                     cut, f"{sum(x['valid'] for x in r['without'])}/{len(r['without'])}"])
    out = table(["format", "template", "tool_choice", "valid with the grammar", "of those cut", "valid without"],
                rows)
    print(out)
    save("forced_calls", {"seeds": args.seeds, "max_tokens": args.max_tokens, "answers": found})
    return 0
