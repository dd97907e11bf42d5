"""A public suite of real-world schemas (issue 28): the official JSON-Schema-Test-Suite's schemas through
lmchat's constraint on the bundled model: the share the constraint supports, and how valid its answers are.

The suite ships inside jsonschema's sdist on PyPI (``json/tests/DRAFT/**/*.json``, optional/ and
optional/format/ included); ``pip download`` fetches it once into ``--cache``. Each test group has a schema;
the schemas are deduplicated per draft (the same text under two drafts counts twice: a validator reads it
by its draft).

(a) support: ``lmchat.constraints.json_schema(schema)`` then the llama.cpp backend's ``check_constraint``
    (llguidance compiles it for the model's vocabulary) on every schema; refused ones are grouped by
    reason, and the keywords llguidance does not implement are counted. Schemas that need the suite's
    remotes (``http://localhost:1234/...``, served by the suite's test harness from json/remotes: a
    ``$schema`` there, or a ``$ref`` that validating the group's tests cannot resolve without them) stay in
    the total and go through the same check: llguidance fetches nothing, so it refuses them, and they count
    as unsupported (the share without them is given too).
    Then the suite's own test instances of every supported schema go through its grammar, no model:
    written as the constraint writes JSON, tokenized, fed to a fresh matcher; an instance the suite calls
    invalid that the grammar accepts is JSON the constraint would let through and a validator rejects.
(b) validity: on a deterministic sample of the supported schemas (round robin over the suite's files, so
    that every keyword's file comes up early; the first ``--answers``, fewer if ``--minutes`` runs out),
    one answer each, sampling on (temperature 0.8, seed ``--seed`` + i), the prompt asking for JSON valid
    against the schema (its text in the prompt), with the constraint; each answer is checked with
    jsonschema's validator of the schema's draft (``$schema`` first), the suite's remotes registered.
    "cut": the budget ended the answer (``finish_reason`` length), not counted as invalid. Format is an
    annotation in both drafts, so "valid" ignores it; the answers that a format checker rejects are
    counted apart.
(c) the same prompt and seed without the constraint on one schema in ``--unconstrained-every`` of the
    sample: today's rate with no constraint (strict: the whole answer parses and validates; lenient: its
    first ``{...}`` or ``[...]`` span that parses does).

One engine thread by default: on 2 cores shared with other work, 2 threads decoded 7x slower (llama.cpp's
threads wait on each other). Progress goes to stderr, the tables to stdout and ``bench/results/``.
"""
from __future__ import annotations

import argparse
import collections
import json
import re
import statistics
import subprocess
import sys
import tarfile
import time
import warnings
from pathlib import Path

from lmchat import TurnRequest

from .common import save, table
from .constraints import SAMPLED, prompt

QUESTION = "Give an example value."
#: where the suite's harness serves json/remotes
REMOTES = "http://localhost:1234/"

#: refusal messages (after "failed to compile JSON schema: ") -> a reason's label
REASONS = [
    (r"^Unimplemented keys", "keyword not implemented by llguidance"),
    (r"^Resource 'http://localhost:1234/", "$ref to the suite's remotes (not fetched)"),
    (r"^Resource ", "$ref to another document (not fetched)"),
    (r"^oneOf constraints are not supported", "oneOf (llguidance: not unless coerced to anyOf)"),
    (r"^Unsatisfiable schema", "unsatisfiable (a false schema somewhere)"),
    (r"a JSON schema is an object", "boolean schema (lmchat takes an object)"),
    (r"^Unknown format", "unknown format"),
    (r"^Expected positive integer for", "a count written as a float (2.0)"),
    (r"^patternProperty regexes .* are not disjoint", "overlapping patternProperties"),
    (r"^Failed to generate regex for float range", "number bound too large for a regex"),
    (r"^Value for 'multipleOf' has too many digits", "multipleOf with too many digits"),
    (r"^regex parse error", "pattern llguidance's regex syntax rejects (ECMAScript \\c escape)"),
    (r"^Anchor '.*' does not exist", "anchor not found (draft 7's \"$id\": \"#name\")"),
]


def fetch_suite(cache: Path, version: str) -> Path:
    """jsonschema's sdist (which carries the suite) in ``cache``, downloaded with pip if absent."""
    sdist = cache / f"jsonschema-{version}.tar.gz"
    if not sdist.is_file():
        cache.mkdir(parents=True, exist_ok=True)
        subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--no-binary", ":all:",
                        f"jsonschema=={version}", "-d", str(cache)], check=True)
    return sdist


def read_suite(sdist: Path, drafts: list[str]) -> tuple[dict, dict]:
    """The schemas of ``drafts`` ({(draft, canonical text): entry}, first group's file, description and tests,
    and how many groups share it) and the remotes ({url: contents})."""
    root = sdist.name.removesuffix(".tar.gz") + "/json/"
    schemas: dict = {}
    remotes = {}
    with tarfile.open(sdist) as tar:
        for member in sorted(tar.getmembers(), key=lambda m: m.name):
            if not member.isfile() or not member.name.endswith(".json"):
                continue
            name = member.name.removeprefix(root)
            if name.startswith("remotes/"):
                remotes[REMOTES + name.removeprefix("remotes/")] = json.load(tar.extractfile(member))
                continue
            for draft in drafts:
                if not name.startswith(f"tests/{draft}/"):
                    continue
                for group in json.load(tar.extractfile(member)):
                    key = (draft, json.dumps(group["schema"], sort_keys=True))
                    if key in schemas:
                        schemas[key]["groups"] += 1
                    else:
                        schemas[key] = {"draft": draft, "file": name.removeprefix(f"tests/{draft}/"),
                                        "description": group["description"], "schema": group["schema"],
                                        "tests": group["tests"], "groups": 1}
    return schemas, remotes


class Validators:
    """jsonschema's validators of the suite's drafts, with and without the suite's remotes registered."""

    def __init__(self, remotes: dict) -> None:
        import jsonschema
        from jsonschema.validators import SPECIFICATIONS
        from referencing import Resource
        from referencing.jsonschema import DRAFT7, DRAFT202012

        self.classes = {"draft7": jsonschema.Draft7Validator, "draft2020-12": jsonschema.Draft202012Validator}
        self.bare = SPECIFICATIONS
        self.full = SPECIFICATIONS.with_resources(
            (url, Resource.from_contents(doc, default_specification=DRAFT7 if "/draft7/" in url else DRAFT202012))
            for url, doc in remotes.items())

    def of(self, schema, draft: str, *, remotes: bool = True, formats: bool = False):
        from jsonschema.validators import validator_for

        with warnings.catch_warnings():  # a $schema it does not know: the draft's validator, with a warning
            warnings.simplefilter("ignore")
            cls = validator_for(schema, default=self.classes[draft])
        return cls(schema, registry=self.full if remotes else self.bare,
                   format_checker=cls.FORMAT_CHECKER if formats else None)

    def needs_remotes(self, entry: dict) -> bool:
        """Whether validating the group's tests resolves a reference only the suite's remotes hold."""
        from referencing.exceptions import Unresolvable

        schema = entry["schema"]
        if isinstance(schema, dict) and str(schema.get("$schema", "")).startswith(REMOTES):
            return True  # a meta-schema of the remotes (llguidance fetches it; jsonschema's default reads none)
        validator = self.of(schema, entry["draft"], remotes=False)
        try:
            for test in entry["tests"]:
                validator.is_valid(test["data"])
        except Unresolvable:
            return True
        except Exception:  # noqa: BLE001 - a pattern Python's re cannot compile (ECMAScript's \\c): not a ref
            return False
        return False

    def errors(self, value, schema, draft: str) -> list[str]:
        """Why ``value`` does not validate (empty: it does), format ignored."""
        return [e.message[:200] for e in self.of(schema, draft).iter_errors(value)][:3]

    def formats_ok(self, value, schema, draft: str) -> bool:
        return self.of(schema, draft, formats=True).is_valid(value)


def reason_of(message: str) -> tuple[str, list[str]]:
    """A refusal's reason label and, for unimplemented keywords, which."""
    detail = message.split("failed to compile JSON schema: ", 1)[-1].strip()
    for pattern, label in REASONS:
        if re.search(pattern, detail):
            keys = json.loads(detail.split(":", 1)[1].splitlines()[0]) if label.startswith("keyword not") else []
            return label, keys
    return detail.splitlines()[0][:100], []


def support(backend, schemas: dict, validators: Validators) -> None:
    """Check each schema with the constraint (in place: ``supported``, ``reason``, ``keys``, ``remotes``)."""
    from lmchat import constraints
    from lmchat.errors import ConstraintUnsupported

    for entry in schemas.values():
        entry["remotes"] = validators.needs_remotes(entry)
        try:
            backend.check_constraint(constraints.json_schema(entry["schema"]))
        except ConstraintUnsupported as exc:
            entry["supported"] = False
            entry["message"] = str(exc).split("\n")[0][:300]
            entry["reason"], entry["keys"] = reason_of(str(exc))
        else:
            entry["supported"] = True


def instances(backend, schemas: dict) -> list[dict]:
    """The suite's own test instances of every supported schema through its grammar, no model: each written as
    the constraint writes JSON (compact, ", " and ": "), tokenized with the model's vocabulary, fed to a fresh
    matcher; accepted if every token is allowed and the grammar may end there. One row per instance."""
    from lmchat import constraints

    grammars = backend._engine().grammars  # the engine's compiled matchers (private: a benchmark looks inside)
    rows = []
    for entry in schemas.values():
        if not entry["supported"]:
            continue
        constraint = constraints.json_schema(entry["schema"])
        for test in entry["tests"]:
            text = json.dumps(test["data"], ensure_ascii=False, separators=(", ", ": "))
            matcher = grammars.matcher(constraint)
            ids = grammars._tokenizer.tokenize_str(text)
            accepted = matcher.validate_tokens(ids) == len(ids) and matcher.consume_tokens(ids) \
                and matcher.is_accepting()
            row = {"draft": entry["draft"], "file": entry["file"], "description": entry["description"],
                   "test": test["description"], "instance": text, "valid": test["valid"], "accepted": bool(accepted)}
            if row["accepted"] != row["valid"]:  # the schema of a disagreement only (the suite holds the others')
                row["schema"] = entry["schema"]
            rows.append(row)
    return rows


def sample(schemas: dict, size: int) -> list[dict]:
    """The first ``size`` supported schemas taking one of each (draft, file) in turn, in the suite's order."""
    files: dict = collections.defaultdict(list)
    for entry in schemas.values():
        if entry["supported"]:
            files[(entry["draft"], entry["file"])].append(entry)
    queues = [files[k] for k in sorted(files)]
    out: list[dict] = []
    for turn in range(max((len(q) for q in queues), default=0)):
        out += [q[turn] for q in queues if turn < len(q)]
    return out[:size]


def first_span(text: str):
    """The first ``{...}`` or ``[...]`` span of ``text`` that parses (None: none)."""
    decoder = json.JSONDecoder()
    for at, ch in enumerate(text):
        if ch in "{[":
            try:
                return decoder.raw_decode(text, at)[0]
            except ValueError:
                continue
    return None


def answer(mgr, entry: dict, seed: int, constrained: bool, max_tokens: int, validators: Validators) -> dict:
    from lmchat import constraints

    params = {**SAMPLED, "seed": seed, "constraint": constraints.json_schema(entry["schema"]) if constrained else None}
    started = time.perf_counter()
    r = mgr.run_turn(TurnRequest(mgr.oneoff(), [{"role": "user", "content": prompt(QUESTION, entry["schema"])}],
                                 params=params, max_new_tokens=max_tokens))
    row = {"draft": entry["draft"], "file": entry["file"], "description": entry["description"],
           "schema": entry["schema"], "seed": seed, "text": r.text, "finish": r.finish_reason,
           "tokens": len(r.token_ids), "seconds": round(time.perf_counter() - started, 3)}
    schema, draft = entry["schema"], entry["draft"]
    try:
        value = json.loads(r.text.strip())
    except ValueError:
        errors = ["does not parse as JSON"]
    else:
        try:
            errors = validators.errors(value, schema, draft)
            if not errors and not validators.formats_ok(value, schema, draft):
                row["format_rejected"] = True
        except Exception as exc:  # noqa: BLE001 - the validator's own failure (a pattern re cannot compile)
            row["unchecked"] = f"{type(exc).__name__}: {exc}"
            errors = []
    row["verdict"] = ("cut" if r.finish_reason == "length" else "invalid" if errors
                      else "unchecked" if "unchecked" in row else "valid")
    if errors:
        row["errors"] = errors
    if not constrained:
        found = first_span(r.text)
        row["lenient"] = row["verdict"] == "valid" or (found is not None and not validators.errors(found, schema,
                                                                                                  draft))
    return row


def cell(text: str) -> str:
    """``text`` in a Markdown table's cell."""
    return text.replace("|", "\\|").replace("\n", " ")


def counts(rows: list[dict]) -> dict:
    c = collections.Counter(r["verdict"] for r in rows)
    out = {"answers": len(rows), "valid": c["valid"], "invalid": c["invalid"], "cut": c["cut"],
           "unchecked": c["unchecked"], "format_rejected": sum(bool(r.get("format_rejected")) for r in rows),
           "lenient": sum(bool(r.get("lenient")) for r in rows),
           "median_s": None, "mean_s": None, "median_tokens": None, "tokens_per_s": None}
    if rows:
        seconds = [r["seconds"] for r in rows]
        out.update(median_s=round(statistics.median(seconds), 2), mean_s=round(statistics.mean(seconds), 2),
                   median_tokens=statistics.median(r["tokens"] for r in rows),
                   tokens_per_s=round(sum(r["tokens"] for r in rows) / sum(seconds), 1))
    return out


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m bench schema_suite", description=__doc__.split("\n\n")[0])
    p.add_argument("--version", default="4.26.0", help="jsonschema's version whose sdist carries the suite")
    p.add_argument("--drafts", default="draft2020-12,draft7")
    p.add_argument("--cache", type=Path, default=Path.home() / ".cache" / "lmchat" / "schema-suite")
    p.add_argument("--answers", type=int, default=220, help="supported schemas answered with the constraint, "
                   "at most (the sample's first; fewer if --minutes runs out)")
    p.add_argument("--unconstrained-every", type=int, default=3,
                   help="every Nth of those answered without the constraint too (0: none)")
    p.add_argument("--minutes", type=float, default=8,
                   help="no new schema is answered past this time since the start")
    p.add_argument("--max-tokens", type=int, default=96)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=1,
                   help="engine threads (1: on 2 cores shared with other work, 2 threads ran 7x slower)")
    args = p.parse_args(argv)

    from lmchat import SessionManager
    from lmchat.backends import get_backend

    started = time.perf_counter()
    sdist = fetch_suite(args.cache, args.version)
    drafts = args.drafts.split(",")
    schemas, remotes = read_suite(sdist, drafts)
    validators = Validators(remotes)
    with get_backend("llamacpp", threads=args.threads, sessions=1, ctx=4096) as backend:
        checked = time.perf_counter()
        support(backend, schemas, validators)
        checked = time.perf_counter() - checked
        suite_tests = instances(backend, schemas)
        chosen = sample(schemas, args.answers)
        mgr = SessionManager(backend)
        rows: dict = {"with": [], "without": [], "with_paired": []}
        for i, entry in enumerate(chosen):
            if time.perf_counter() - started > args.minutes * 60:
                print(f"time budget of {args.minutes} min reached after {i} schemas", file=sys.stderr, flush=True)
                break
            rows["with"].append(answer(mgr, entry, args.seed + i, True, args.max_tokens, validators))
            if args.unconstrained_every and i % args.unconstrained_every == 0:
                rows["without"].append(answer(mgr, entry, args.seed + i, False, args.max_tokens, validators))
                rows["with_paired"].append(rows["with"][-1])
            if (i + 1) % 20 == 0:
                print(f"{i + 1}/{len(chosen)} answered, {time.perf_counter() - started:.0f} s", file=sys.stderr,
                      flush=True)
        paired = rows.pop("with_paired")

    entries = list(schemas.values())
    per_draft = {}
    for draft in drafts:
        mine = [e for e in entries if e["draft"] == draft]
        per_draft[draft] = {"files": len({e["file"] for e in mine}), "groups": sum(e["groups"] for e in mine),
                            "schemas": len(mine), "supported": sum(e["supported"] for e in mine),
                            "needs_remotes": sum(e["remotes"] for e in mine)}
    total = len(entries)
    supported = sum(e["supported"] for e in entries)
    local = [e for e in entries if not e["remotes"]]
    reasons = collections.Counter(e["reason"] for e in entries if not e["supported"])
    keys = collections.Counter(k for e in entries if not e["supported"] for k in e["keys"])
    summary = {"schemas": total, "supported": supported, "share": round(supported / total, 3),
               "needs_remotes": total - len(local), "supported_without_remotes": sum(e["supported"] for e in local),
               "share_without_remotes": round(sum(e["supported"] for e in local) / len(local), 3),
               "check_seconds": round(checked, 2), "per_draft": per_draft, "refused": dict(reasons.most_common()),
               "unimplemented_keywords": dict(keys.most_common()),
               "with": counts(rows["with"]), "without": counts(rows["without"]),
               "with_on_unconstrained_sample": counts(paired),
               "seconds": round(time.perf_counter() - started, 1)}
    grid = collections.Counter((t["valid"], t["accepted"]) for t in suite_tests)
    summary["instances"] = {"valid_accepted": grid[True, True], "valid_refused": grid[True, False],
                            "invalid_accepted": grid[False, True], "invalid_refused": grid[False, False]}
    leaks = [t for t in suite_tests if t["accepted"] and not t["valid"]]
    invalid = [r for r in rows["with"] if r["verdict"] == "invalid"]
    formats = [r for r in rows["with"] if r.get("format_rejected")]

    w, wo, ws = summary["with"], summary["without"], summary["with_on_unconstrained_sample"]
    out = [f"JSON-Schema-Test-Suite (jsonschema {args.version} sdist), drafts {', '.join(drafts)}: {total} distinct "
           f"schemas; supported by the constraint: {supported} ({summary['share']:.0%}); of the "
           f"{len(local)} that need none of the suite's remotes: {summary['supported_without_remotes']} "
           f"({summary['share_without_remotes']:.0%}); all checked in {checked:.1f} s", "",
           table(["draft", "files", "groups", "distinct schemas", "supported", "share", "need the remotes"],
                 [[d, s["files"], s["groups"], s["schemas"], s["supported"], f"{s['supported'] / s['schemas']:.0%}",
                   s["needs_remotes"]] for d, s in per_draft.items()]), "",
           "refused, by reason (one per schema)",
           table(["reason", "schemas"], [[cell(r), n] for r, n in reasons.most_common()]), "",
           "keywords llguidance does not implement (schemas naming each, among the refused)",
           table(["keyword", "schemas"], [[k, n] for k, n in keys.most_common()]), "",
           "the suite's own test instances of the supported schemas through their grammars (no model; written "
           "compactly as the constraint writes JSON)",
           table(["suite's label", "the grammar accepts", "the grammar refuses"],
                 [["valid", grid[True, True], grid[True, False]], ["invalid", grid[False, True], grid[False, False]]]),
           "",
           f"answers (temperature 0.8, seeds {args.seed}.., max {args.max_tokens} new tokens, "
           f"{args.threads} engine thread{'s' if args.threads > 1 else ''}): "
           f"{w['answers']} of the {supported} supported schemas with the constraint (the sample's first"
           f"{'; --minutes stopped it' if w['answers'] < min(args.answers, supported) else ''}), "
           f"{wo['answers']} of them (one in {args.unconstrained_every}) without it too, "
           f"{summary['seconds']:.0f} s in all",
           table(["", "answers", "valid", "invalid", "cut by the budget", "format rejected (of valid)",
                  "lenient valid", "median s / answer", "median tokens", "tokens/s (turns)"],
                 [[label, c["answers"], c["valid"], c["invalid"], c["cut"], c["format_rejected"],
                   c["lenient"] if label.startswith("without") else "", c["median_s"], c["median_tokens"],
                   c["tokens_per_s"]]
                  for label, c in (("with the constraint", w), ("with, on the schemas answered without too", ws),
                                   ("without the constraint", wo))])]
    if w["unchecked"] or wo["unchecked"]:
        out += [f"(not checked: the validator failed on {w['unchecked']} answers with, {wo['unchecked']} without)"]
    if leaks:
        out += ["", "instances the suite calls invalid that a grammar accepts",
                table(["draft/file", "group", "schema", "test", "instance"],
                      [[f"{t['draft']}/{t['file']}", cell(t["description"]), cell(json.dumps(t["schema"])[:150]),
                        cell(t["test"]), cell(t["instance"][:100])] for t in leaks])]
    if invalid:
        out += ["", "invalid answers with the constraint (the grammar let through JSON the validator rejects)",
                table(["draft/file", "group", "schema", "answer", "why"],
                      [[f"{r['draft']}/{r['file']}", cell(r["description"]), cell(json.dumps(r["schema"])[:150]),
                        cell(json.dumps(r["text"])[:100]), cell("; ".join(r["errors"])[:150])] for r in invalid])]
    if formats:
        out += ["", "valid answers a format checker rejects",
                table(["draft/file", "group", "answer"],
                      [[f"{r['draft']}/{r['file']}", cell(r["description"]), cell(json.dumps(r["text"])[:100])]
                       for r in formats])]
    text = "\n".join(out)
    print(text)
    path = save("schema_suite", {"args": {**vars(args), "cache": str(args.cache)}, "summary": summary,
                                 "refused": [{k: e[k] for k in ("draft", "file", "description", "schema", "reason",
                                                                "message")} for e in entries if not e["supported"]],
                                 "instances": suite_tests, "answers": rows})
    path.with_suffix(".md").write_text(text + "\n")
    print(f"results: {path}")
    return 0
