"""Constraints on answers (issue 28) on the bundled model: how often answers are valid, what it costs.

Through the session manager on the embedded llama.cpp engine, sampling on (temperature 0.8, seeds
0..N-1), the prompt asking for JSON with the schema in its text:

(a) validity: for each of 6 schemas of different shapes (tests/test_constraints.py's) and for any JSON
    object, the share of answers that parse (the whole answer, stripped) and validate, with the constraint
    and without it (the same prompt, the same seeds); "lenient" also takes an unconstrained answer's first
    ``{...}`` span (inside a code fence or after a preamble), the best a client could do by hand;
(b) cost: decode tokens per second (first generated token to the last) with the constraint and without,
    the two runs alternating so that other work on the machine slows both alike; the ratio of the medians
    (target >= 0.8); and the same over the whole turn (prompt included: a shorter answer pays it over fewer
    tokens);
(c) compile time: ``LlamaCppBackend.check_constraint`` of each schema the first time (llguidance builds its
    grammar for the model's tokenizer) and the second (cached).
"""
from __future__ import annotations

import argparse
import json
import statistics
import time

from lmchat.manager import TurnRequest
from tests.constraint_schemas import SCHEMAS

from .common import save, table

#: any JSON object: the schema that json_object() enforces, for validating unconstrained answers alike
OBJECT = ({"type": "object"}, "Describe your favourite animal.")
SAMPLED = {"temperature": 0.8}


def prompt(question: str, schema: dict | None) -> str:
    if schema is None:
        return f"{question} Answer with a JSON object only."
    return f"{question} Answer with JSON only, valid against this JSON schema: {json.dumps(schema)}"


def lenient(text: str):
    """The first ``{...}`` span of ``text`` that parses (None: none)."""
    decoder = json.JSONDecoder()
    for at, ch in enumerate(text):
        if ch == "{":
            try:
                return decoder.raw_decode(text, at)[0]
            except ValueError:
                continue
    return None


def valid(value, schema: dict) -> bool:
    import jsonschema

    try:
        jsonschema.validate(value, schema)
    except jsonschema.ValidationError:
        return False
    return True


def check(text: str, schema: dict) -> dict:
    try:
        value = json.loads(text.strip())
        strict = valid(value, schema)
    except ValueError:
        strict = False
    found = lenient(text)
    return {"valid": strict, "lenient": strict or (found is not None and valid(found, schema))}


def compile_times(backend, schemas: dict) -> dict:
    """Seconds of check_constraint per schema, the first time and the second (before any turn used them)."""
    from lmchat import constraints

    out = {}
    for name, (schema, _) in schemas.items():
        times = []
        for _ in range(2):
            c = constraints.json_schema(schema)  # a new object each time: the cache must key on its content
            started = time.perf_counter()
            backend.check_constraint(c)
            times.append(time.perf_counter() - started)
        out[name] = {"first_ms": round(times[0] * 1000, 2), "second_ms": round(times[1] * 1000, 3)}
    return out


def validity(mgr, shapes: dict, seeds: int, max_tokens: int) -> dict:
    from lmchat import constraints

    out = {}
    for name, (schema, question) in shapes.items():
        made = constraints.json_object() if name == "json_object" else constraints.json_schema(schema)
        text = prompt(question, None if name == "json_object" else schema)
        rows = {"with": [], "without": []}
        for seed in range(seeds):
            for how, constraint in (("with", made), ("without", None)):
                r = mgr.run_turn(TurnRequest(mgr.oneoff(), [{"role": "user", "content": text}],
                                             max_new_tokens=max_tokens,
                                             params={**SAMPLED, "seed": seed, "constraint": constraint}))
                rows[how].append({"seed": seed, "text": r.text, "finish": r.finish_reason, **check(r.text, schema)})
        out[name] = rows
        print(name, {how: f"{sum(x['valid'] for x in a)}/{len(a)}" for how, a in rows.items()}, flush=True)
    return out


def decode_speed(mgr, question: str, constraint, seed: int, max_tokens: int) -> tuple[float, float, float]:
    """Decode tokens/s (from the first generated token to the last: the prompt's prefill is the same both
    ways, the answer's length is not), tokens/s over the whole turn, and seconds to the first token."""
    started = time.perf_counter()
    first = last = None
    count = 0
    ask = TurnRequest(mgr.oneoff(), [{"role": "user", "content": question}], max_new_tokens=max_tokens,
                      params={**SAMPLED, "seed": seed, "constraint": constraint})
    for chunk in mgr.stream_turn(ask):
        if chunk.token_ids:
            now = time.perf_counter()
            first = first or now
            last = now
            count += len(chunk.token_ids)
    whole = count / (time.perf_counter() - started)
    decode = (count - 1) / (last - first) if count > 1 and last > first else float("nan")
    return decode, whole, (first or time.perf_counter()) - started


def cost(mgr, constraint, question: str, runs: int, max_tokens: int) -> dict:
    """Tokens/s with ``constraint`` and without, alternating (which goes first too), ``runs`` times each (seed
    i for run i of both)."""
    speeds = {"with": [], "without": []}
    whole = {"with": [], "without": []}
    firsts = {"with": [], "without": []}
    for i in range(runs + 1):
        for how, c in (("with", constraint), ("without", None)) if i % 2 else (("without", None), ("with", constraint)):
            decode, overall, first = decode_speed(mgr, question, c, i, max_tokens)
            if i:  # the first pair warms the engine and the grammar cache up
                speeds[how].append(decode)
                whole[how].append(overall)
                firsts[how].append(first)
    medians = {how: statistics.median(s) for how, s in speeds.items()}
    return {"decode_tokens_per_s": {how: [round(x, 1) for x in s] for how, s in speeds.items()},
            "turn_tokens_per_s": {how: [round(x, 1) for x in s] for how, s in whole.items()},
            "median_with": round(medians["with"], 1), "median_without": round(medians["without"], 1),
            "ratio": round(medians["with"] / medians["without"], 3),
            "turn_ratio": round(statistics.median(whole["with"]) / statistics.median(whole["without"]), 3),
            "first_token_s": {how: [round(x, 3) for x in s] for how, s in firsts.items()},
            "first_token_median_s": {how: round(statistics.median(s), 3) for how, s in firsts.items()}}


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m bench constraints", description=__doc__.split("\n\n")[0])
    p.add_argument("--seeds", type=int, default=5, help="answers per schema, with and without (seeds 0..N-1)")
    p.add_argument("--runs", type=int, default=7, help="timed runs per side of each cost measure")
    p.add_argument("--max-tokens", type=int, default=300)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--parts", default="compile,validity,cost",
                   help="which of compile, validity, cost to run (comma-separated; results of a part go to "
                        "constraints_PART.{json,md})")
    args = p.parse_args(argv)
    parts = set(args.parts.split(","))

    from lmchat import SessionManager, constraints
    from lmchat.backends.llamacpp import LlamaCppBackend

    with LlamaCppBackend(threads=args.threads, sessions=1, ctx=4096) as backend:
        mgr = SessionManager(backend)
        # first: no turn has compiled these yet
        compiled = compile_times(backend, SCHEMAS) if "compile" in parts else {}
        shapes = {**SCHEMAS, "json_object": OBJECT}
        answers = validity(mgr, shapes, args.seeds, args.max_tokens) if "validity" in parts else {}
        person, person_q = SCHEMAS["enum and bounded integer"]
        costs = {}
        if "cost" in parts:
            costs = {"json_schema (enum and bounded integer)": cost(mgr, constraints.json_schema(person),
                                                                    prompt(person_q, person), args.runs,
                                                                    args.max_tokens),
                     "json_object": cost(mgr, constraints.json_object(), prompt(OBJECT[1], None), args.runs,
                                         args.max_tokens)}
    summary = {name: {how: {"valid": sum(x["valid"] for x in a), "lenient": sum(x["lenient"] for x in a),
                            "answers": len(a)} for how, a in rows.items()} for name, rows in answers.items()}
    parts_out = []
    if answers:
        parts_out += [
            "(a) answers that parse and validate (lenient: an unconstrained answer's first {...} span counts)",
            table(["schema", "with the constraint", "without", "without, lenient"],
                  [[n, f"{s['with']['valid']}/{s['with']['answers']}",
                    f"{s['without']['valid']}/{s['without']['answers']}",
                    f"{s['without']['lenient']}/{s['without']['answers']}"] for n, s in summary.items()]), ""]
    if costs:
        parts_out += [
            "(b) decode tokens/s, runs alternating (median); the ratio over whole turns (prompt included) after it",
            table(["constraint", "with", "without", "ratio", "whole turns' ratio", "first token with / without (s)"],
                  [[n, c["median_with"], c["median_without"], f"{c['ratio']}x", f"{c['turn_ratio']}x",
                    f"{c['first_token_median_s']['with']} / {c['first_token_median_s']['without']}"]
                   for n, c in costs.items()]), ""]
    if compiled:
        parts_out += ["(c) check_constraint (compile), first time vs cached",
                      table(["schema", "first (ms)", "second (ms)"],
                            [[n, c["first_ms"], c["second_ms"]] for n, c in compiled.items()])]
    out = "\n".join(parts_out).strip()
    print(out)
    name = "constraints" if parts >= {"compile", "validity", "cost"} else "constraints_" + "_".join(sorted(parts))
    path = save(name, {"args": vars(args), "summary": summary, "cost": costs, "compile": compiled,
                                "answers": answers})
    path.with_suffix(".md").write_text(out + "\n")
    return 0
