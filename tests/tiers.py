"""The tiers of the suite: which tests load a model, start a process, drive a browser, run redis-server or soak,
decided here, in one place, from what each test uses (its fixtures and the code it reaches), not by hand in each
file. tests/conftest.py applies it at collection and guards it while the tests run.

At collection (:func:`markers_for`), a test is given the marker of every resource its code can reach: the names
in :data:`USES` met in the test function, in the fixtures it requests (their whole closure) and, through them,
in every function and class of this package they call, followed to any depth. A string constant naming the
llama.cpp engine (``"llamacpp"``, as in ``Server("--backend", "llamacpp")``) means the model too. ``slow`` is a
judgement, not a use: :data:`SLOW` lists those tests.

While the tests run (:class:`Guard`), starting a process or loading a GGUF's weights checks the running test's
markers, so a test that reaches a resource by a path the collection did not see fails with what to add here,
rather than running in a tier that promises it does not: ``pytest -m "not model and not server"`` starts no
process and loads no model, or fails saying which test would have.
"""
from __future__ import annotations

import contextlib
import dis
import importlib
import os
import types
from typing import Any

import pytest

#: the markers and what each means (registered by tests/conftest.py; ``pytest --markers`` lists them)
MARKERS = {
    "model": "loads a real GGUF's weights into llama.cpp, in this process or in a process it starts",
    "server": "starts a process: lmchat serve, the REPL in a terminal, an lmchat command, a reference server",
    "browser": "drives a real browser (Debian's chromium)",
    "redis": "runs a real redis-server",
    "slow": "a soak or a long run of one path (a minute or more); tests/tiers.py SLOW lists them",
}

#: the markers of something a fixture starts or loads (what a worker should start once, not the soaks)
RESOURCES = frozenset({"model", "server", "browser", "redis"})

#: names met in a test's code (a call, a class, a fixture) and the resources each one means
USES: dict[str, frozenset[str]] = {
    # the llama.cpp engine and llama-cpp-python's own Llama, on a GGUF's weights
    "LlamaCppBackend": frozenset({"model"}),
    "Llama": frozenset({"model"}),
    "load_model": frozenset({"model"}),
    # transformers on the GGUF's weights (--backend hf): not guarded while running (the guard would have to
    # import torch in every worker), so this name is the only way it is seen
    "HFBackend": frozenset({"model"}),
    # processes: tests/serve_helpers.Service and its kinds, a pseudo-terminal, any subprocess of a helper
    "Service": frozenset({"server"}),
    "Server": frozenset({"server"}),
    "spawn": frozenset({"server"}),
    "Popen": frozenset({"server"}),
    "check_output": frozenset({"server"}),
    # a real redis-server (tests/store_helpers.RedisServer and the fixtures on it)
    "RedisServer": frozenset({"redis"}),
    "redis_server": frozenset({"redis"}),
    "own_redis": frozenset({"redis"}),
    # a real browser
    "sync_playwright": frozenset({"browser"}),
    "async_playwright": frozenset({"browser"}),
    "webdriver": frozenset({"browser"}),
}

#: string constants that name the llama.cpp engine or a server on it: a process started with them loads a model
MODEL_WORDS = ("llamacpp", "hf", "llama_cpp.server", "llama-server")

#: parameters (of a parametrized fixture or test) that mean a resource: the store kinds on a real redis-server
PARAMS = {"redis": frozenset({"redis"})}

#: the soaks: node ids (a file, or a file::test)
SLOW = (
    "tests/test_serve_soak.py",
    "tests/test_stores_soak.py::test_soak_descriptors_memory_and_the_cost_of_an_append_stay_flat",
    "tests/test_prefix_cache.py::test_a_soak_of_stateless_requests_stays_within_every_bound",
    "tests/test_batch_invariance.py::test_sixteen_conversations_of_five_turns_answer_as_alone",
)

#: module-scoped fixtures of a resource that start in about a second (llama-cpp-python's own Llama on the bundled
#: GGUF, a redis-server): worth starting on both workers rather than holding their tests to one
CHEAP_TO_SHARE = frozenset({"llm", "redis_server"})


def groups(items: list[pytest.Item]) -> dict[str, str]:
    """Node id -> xdist group, for the tests that share a module- or class-scoped fixture of a resource (a server,
    a backend), so that ``--dist loadgroup`` starts each such fixture on one worker only: the tests of a file
    whose fixtures of that kind overlap form one group, named by the file and those fixtures; the other tests of
    the file spread one by one."""
    shared: dict[str, tuple[str, frozenset[str]]] = {}
    for item in items:
        names = _shared_resources(item)
        if names:
            shared[item.nodeid] = (item.nodeid.split("::", 1)[0], names)
    components: dict[str, list[frozenset[str]]] = {}  # file -> disjoint sets of fixture names
    for path, names in shared.values():
        merged, rest = set(names), []
        for component in components.get(path, []):
            if component & merged:
                merged |= component
            else:
                rest.append(component)
        components[path] = [*rest, frozenset(merged)]
    found = {}
    for nodeid, (path, names) in shared.items():
        component = next(c for c in components[path] if c & names)
        found[nodeid] = f"{path}::{'+'.join(sorted(component))}"
    return found


def _shared_resources(item: pytest.Item) -> frozenset[str]:
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return frozenset()
    return frozenset(name for name, definitions in info.name2fixturedefs.items()
                     if name not in GUARD_FIXTURES and name not in CHEAP_TO_SHARE
                     and definitions[-1].scope in ("module", "class", "package")
                     and _reached(None, (name,), info) & RESOURCES)


def leaves_a_tier_out(markexpr: str) -> bool:
    """Whether a run's ``-m`` leaves out a tier of resources (``not model``, ``not server`` ...): a developer's
    quicker run, which the property tests run at the ``dev`` profile (tests/hypothesis_profiles.py). Leaving out
    the soaks does not count: that is the default run (setup.cfg), which runs them at ``ci``."""
    return any(f"not {name}" in markexpr for name in RESOURCES)


#: conftest's fixtures that watch for resources (they name Popen to wrap it, and use nothing)
GUARD_FIXTURES = frozenset({"_tier_guard", "_tier_check"})

#: the processes a test may start without a marker: git (the style check lists tracked files), uname (the openai
#: client asks it for the processor once, through platform.processor())
FREE_PROGRAMS = frozenset({"git", "uname"})
#: the helpers that start only those (not followed into)
FREE_HELPERS = frozenset({"tracked_python_files"})
#: modules whose use in a test's code means it starts a process
PROCESS_MODULES = frozenset({"subprocess", "pexpect", "ptyprocess", "multiprocessing"})


# ---------------------------------------------------------------------- at collection
def markers_for(item: pytest.Item) -> set[str]:
    """The markers of the resources ``item`` uses (a subset of :data:`MARKERS`)."""
    function = getattr(item, "function", None)
    info = getattr(item, "_fixtureinfo", None)
    fixtures = tuple(getattr(item, "fixturenames", ()))
    found = set(_reached(function, fixtures, info))
    for value in getattr(getattr(item, "callspec", None), "params", {}).values():
        found |= PARAMS.get(value, frozenset()) if isinstance(value, str) else frozenset()
    if any(item.nodeid == slow or item.nodeid.startswith((slow + "::", slow + "[")) for slow in SLOW):
        found.add("slow")
    return found


def unknown_slow(items: list[pytest.Item]) -> list[str]:
    """The entries of :data:`SLOW` that name a test their collected file does not define (a test renamed or
    removed: it would leave the ``slow`` tier silently). Read from the file's module, not from the items: a run
    of one test by its node id collects no other test of its file, and pytest-xdist appends ``@group`` to ids."""
    modules = {}
    for item in items:
        module = getattr(item, "module", None)
        if module is not None:
            modules.setdefault(item.nodeid.split("::")[0], module)
    unknown = []
    for slow in SLOW:
        path, *names = slow.split("::")
        if path in modules and names and _defined(modules[path], names) is None:
            unknown.append(slow)
    return unknown


def _defined(scope: Any, names: list[str]) -> Any:
    for name in names:
        scope = getattr(scope, name, None)
    return scope


#: what a test function and its fixtures reach, walked once for all the items of one parametrized test
_REACHED: dict[tuple[Any, ...], frozenset[str]] = {}


def _reached(function: Any, fixtures: tuple[str, ...], info: Any) -> frozenset[str]:
    definitions = tuple(d.func for name in fixtures if name not in GUARD_FIXTURES
                        for d in (info.name2fixturedefs.get(name, ()) if info is not None else ()))
    key = (function, fixtures, definitions)
    if key in _REACHED:
        return _REACHED[key]
    walk = _Walk()
    if function is not None:
        walk.reach(function)
    for name in fixtures:
        if name not in GUARD_FIXTURES:
            walk.found |= USES.get(name, frozenset())
    for definition in definitions:
        walk.reach(definition)
    if "server" in walk.found and _loads_a_model(walk.strings):
        walk.found.add("model")
    _REACHED[key] = frozenset(walk.found)
    return _REACHED[key]


def _ours(obj: Any) -> bool:
    """Whether ``obj`` is defined in this test package (followed into), not in lmchat or a library."""
    module = getattr(obj, "__module__", None) or ""
    return module.startswith(("tests.", "test_", "conftest")) and module != __name__


class _Walk:
    """What a test's code reaches: the resources met (``found``) and the string constants read on the way
    (``strings``: a command line a process is started with is made of them)."""

    def __init__(self) -> None:
        self.found: set[str] = set()
        self.strings: list[str] = []
        self.seen: set[int] = set()

    def reach(self, obj: Any) -> None:
        if id(obj) in self.seen or getattr(obj, "__name__", None) in FREE_HELPERS:
            return
        self.seen.add(id(obj))
        inner = getattr(getattr(obj, "hypothesis", None), "inner_test", None)
        if inner is not None:  # @given's wrapper is hypothesis' code: the test is the function it wraps
            self.reach(inner)
            return
        if isinstance(obj, type):
            for member in vars(obj).values():
                self.reach(getattr(member, "__func__", member))
            for base in obj.__mro__[1:]:
                self.found |= USES.get(base.__name__, frozenset()) if _ours(base) else set()
            return
        code = getattr(obj, "__code__", None)
        if code is None:
            wrapped = getattr(obj, "__wrapped__", None) or getattr(obj, "func", None)  # decorators, partials
            if wrapped is not None:
                self.reach(wrapped)
            return
        self._code(code, getattr(obj, "__globals__", {}))

    def _code(self, code: types.CodeType, namespace: dict[str, Any]) -> None:
        names = list(code.co_names)
        for name in names:
            if name in USES:  # its meaning is the table's: not followed (a RedisServer is redis, not a process)
                self.found |= USES[name]
                continue
            target = namespace.get(name)
            if isinstance(target, types.ModuleType):
                if target.__name__ in PROCESS_MODULES:
                    self.found.add("server")
                elif target.__name__.startswith("tests.") and target.__name__ != __name__:  # module.name
                    for attribute in names:
                        self._follow(getattr(target, attribute, None))
            else:
                self._follow(target)
        for target in _imported_inside(code, namespace):
            self._follow(target)
        for constant in code.co_consts:
            if isinstance(constant, types.CodeType):
                self._code(constant, namespace)
            else:
                self._constant(constant)

    def _follow(self, target: Any) -> None:
        if _ours(target) and callable(target):
            self.reach(target)
        else:
            self._constant(target)

    def _constant(self, value: Any) -> None:
        for v in value if isinstance(value, (tuple, list, frozenset, set)) else (value,):
            if isinstance(v, str):
                self.strings.append(v)
                if v in MODEL_WORDS:
                    self.found.add("model")


_IMPORT_NAME = dis.opmap["IMPORT_NAME"]


def _imported_inside(code: types.CodeType, namespace: dict[str, Any]) -> list[Any]:
    """What ``from .module import name`` inside a function brings from this package (a fixture's import is
    local to it, so its names are not in the module's namespace). Only this package's modules are looked up:
    importing a library here would slow every collection."""
    if _IMPORT_NAME not in code.co_code[::2]:  # most code imports nothing: reading its opcodes is cheap
        return []
    package, module, targets, level = namespace.get("__package__") or "", None, [], 0
    for instruction in dis.get_instructions(code):
        if instruction.opname == "LOAD_CONST" and isinstance(instruction.argval, int):
            level = instruction.argval
        elif instruction.opname == "IMPORT_NAME":  # its level (the dots) is the integer loaded before the names
            name = f"{package}.{instruction.argval}".rstrip(".") if level else instruction.argval
            module = name if name.split(".")[0] == "tests" else None
        elif instruction.opname == "IMPORT_FROM" and module is not None:
            with contextlib.suppress(ImportError):
                targets.append(getattr(importlib.import_module(module), instruction.argval, None))
    return targets


# ---------------------------------------------------------------------- while the tests run
class Guard:
    """Checks each process start and model load against the running test's markers.

    ``current`` is the test being set up, run or torn down (conftest sets it); what it starts without the
    marker is kept in ``violations`` and fails that test at its teardown, naming what to add to :data:`USES`.
    """

    def __init__(self) -> None:
        self.current: pytest.Item | None = None
        self.violations: list[str] = []

    def require(self, needs: set[str], what: str) -> None:
        item = self.current
        if item is None:
            return
        missing = needs - {mark.name for mark in item.iter_markers()}
        if missing:
            self.violations.append(
                f"{item.nodeid} {what} but is not marked {', '.join(sorted(missing))}: the collection did not see "
                "it use the resource; name the helper or fixture it goes through in tests/tiers.py USES")

    def process(self, argv: Any) -> None:
        """A process is being started with ``argv`` (a list, or a string run by a shell)."""
        words = [os.fspath(a) for a in argv] if isinstance(argv, (list, tuple)) else str(argv).split()
        program = os.path.basename(str(words[0])) if words else ""
        if program in FREE_PROGRAMS:
            return
        needs = {"redis"} if program == "redis-server" else {"server"}
        if _loads_a_model(words):
            needs.add("model")
        command = " ".join(map(str, words[:6])).replace("\n", " ")
        self.require(needs, f"starts {command[:160]}")

    def model(self, vocab_only: bool) -> None:
        if not vocab_only:
            self.require({"model"}, "loads a GGUF's weights")


def _loads_a_model(words: list[Any]) -> bool:
    """Whether an ``lmchat chat``/``lmchat serve`` command line runs the llama.cpp engine (its default)."""
    text = [str(w) for w in words]
    if any("LlamaCppBackend" in w or "Llama(" in w or w in MODEL_WORDS[2:] for w in text):  # the engine, a server
        return True
    if "--help" in text or "--version" in text:
        return False
    command = next((w for w in text if w in ("chat", "serve")), None)
    if command is None or not any("lmchat" in w or w == "-c" for w in text):
        return False
    backends = [text[i + 1] for i, w in enumerate(text[:-1]) if w == "--backend"]
    backends += [w.split("=", 1)[1] for w in text if w.startswith("--backend=")]
    return (backends[-1] if backends else "llamacpp") in MODEL_WORDS
