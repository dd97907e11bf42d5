"""The tiers (tests/tiers.py): what a test's code reaches decides its markers, and the guard fails a test that
starts a process or loads a model its markers do not name. The functions below are never run: they are read."""
from __future__ import annotations

import importlib
import subprocess
import sys
import types

import pytest
from hypothesis import given
from hypothesis import strategies as st

from . import tiers
from .serve_helpers import Server
from .store_helpers import RedisServer

ECHO = ("--template", "qwen2.5", "--backend", "echo")
LLAMA = ("--backend", "llamacpp", "--template", "smollm2")


class Item:
    """What tiers reads of a collected test: its function, its fixtures, its parameters, its node id."""

    def __init__(self, function, fixtures=(), params=None, nodeid="tests/test_x.py::test_x", module=None):
        self.function, self.fixturenames, self.nodeid = function, list(fixtures), nodeid
        if params is not None:
            self.callspec = type("CallSpec", (), {"params": params})()
        if module is not None:
            self.module = module


def pure():
    return sorted([3, 1, 2])


def starts_the_echo_server():
    with Server(*ECHO) as server:
        return server


def starts_a_server_on_the_model():
    return Server(*LLAMA)


def helper_running_lmchat():
    return subprocess.run([sys.executable, "-m", "lmchat", "render", "--template", "qwen2.5"])


def through_a_helper():
    return helper_running_lmchat()


def one_shot_on_the_bundled_model():
    return subprocess.run([sys.executable, "-m", "lmchat", "chat", "--store", "memory", "Hi"])


def runs_redis(tmp_path):
    return RedisServer(tmp_path, "redis-server")


class Booted:
    def __init__(self):
        self.server = Server(*ECHO)


def makes_a_helper_object():
    return Booted()


@given(st.integers())
def a_property_on_the_model(n):  # @given hides this body behind hypothesis' wrapper
    return Server(*LLAMA)


def imports_its_helper_inside():  # as a fixture does: the name is local to the function
    from .llama_helpers import reference_llama

    return reference_llama()


@pytest.mark.parametrize("function, expected", [
    (pure, set()),
    (starts_the_echo_server, {"server"}),
    (starts_a_server_on_the_model, {"server", "model"}),
    (through_a_helper, {"server"}),
    (one_shot_on_the_bundled_model, {"server", "model"}),
    (runs_redis, {"redis"}),
    (makes_a_helper_object, {"server"}),
    (a_property_on_the_model, {"server", "model"}),
    (imports_its_helper_inside, {"model"}),
])
def test_markers_come_from_what_the_code_reaches(function, expected):
    assert tiers.markers_for(Item(function)) == expected


def test_fixtures_and_parameters_name_resources_too():
    assert tiers.markers_for(Item(pure, fixtures=["redis_server"])) == {"redis"}
    assert tiers.markers_for(Item(pure, fixtures=["any_store"], params={"any_store": "redis"})) == {"redis"}
    assert tiers.markers_for(Item(pure, fixtures=["any_store"], params={"any_store": "sqlite"})) == set()


def test_the_soaks_are_slow_by_their_node_id():
    assert tiers.markers_for(Item(pure, nodeid=tiers.SLOW[0] + "::test_anything")) == {"slow"}


def test_a_soak_renamed_is_a_collection_error_not_a_quick_test(request):
    """A SLOW entry naming no test of its collected file fails the collection (conftest): a renamed soak
    (test_stores_soak's, 2026-12-02) had left the slow tier for the quick one unnoticed."""
    soak = next(s for s in tiers.SLOW if "::" in s)
    path, name = soak.split("::")
    renamed, kept = types.ModuleType("renamed"), types.ModuleType("kept")
    renamed.test_another_name = kept.test_another_name = pure
    setattr(kept, name, pure)
    assert tiers.unknown_slow([Item(pure, nodeid=f"{path}::test_another_name", module=renamed)]) == [soak]
    # the soak present in its file: run whole, run by another test's node id (the soak not collected), or in a
    # worker of pytest-xdist (which appends @group to every id)
    for nodeid in (soak, f"{path}::test_another_name", f"{soak}@{path}::backend"):
        assert tiers.unknown_slow([Item(pure, nodeid=nodeid, module=kept)]) == []
    assert tiers.unknown_slow([Item(pure, nodeid="tests/test_parsers.py::test_x", module=renamed)]) == []
    assert tiers.unknown_slow(request.session.items) == []


def test_one_test_of_a_soaks_file_runs_by_its_node_id():
    """``pytest FILE::TEST`` collects no other test of FILE: the soak's SLOW entry is not stale for that."""
    other = next(f"{path}::{name}" for path, soak in (s.split("::") for s in tiers.SLOW if "::" in s)
                 for name in dir(importlib.import_module(path.removesuffix(".py").replace("/", ".")))
                 if name.startswith("test_") and name != soak)
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "--collect-only", "-p", "no:randomly", "-p",
                           "no:cacheprovider", other], capture_output=True, text=True)
    assert proc.returncode == 0 and other in proc.stdout, proc.stdout + proc.stderr


@pytest.mark.parametrize("markexpr, quick", [
    ("not slow", False),  # the README's test command and CI (setup.cfg): every tier but the soaks, every example
    ("", False),
    ("slow", False),  # the soaks, run before a stop
    ("not model and not server and not browser and not redis and not slow", True),  # the quick tier
    ("not server", True),
    ("model", False),
])
def test_a_run_that_leaves_a_tier_out_is_a_quick_one(markexpr, quick):
    assert tiers.leaves_a_tier_out(markexpr) is quick


class Running:
    """A running test, as the guard reads it: its markers."""

    def __init__(self, *marks: str):
        self.nodeid = "tests/test_x.py::test_x"
        self._marks = [getattr(pytest.mark, name).mark for name in marks]

    def iter_markers(self):
        return iter(self._marks)


@pytest.mark.parametrize("argv, marks, missing", [
    ([sys.executable, "-m", "lmchat", "render", "--template", "qwen2.5"], (), ("server",)),
    ([sys.executable, "-m", "lmchat", "render"], ("server",), None),
    ([sys.executable, "-m", "lmchat", "serve", "--backend", "echo", "--backend", "llamacpp"], ("server",), ("model",)),
    ([sys.executable, "-m", "lmchat", "serve", "--backend", "llamacpp", "--backend", "echo"], ("server",), None),
    ([sys.executable, "-m", "lmchat", "chat", "--store", "memory"], ("server",), ("model",)),
    ([sys.executable, "-m", "lmchat", "serve", "--help"], ("server",), None),
    (["/usr/bin/redis-server", "--port", "1"], (), ("redis",)),
    (["/usr/bin/redis-server", "--port", "1"], ("redis",), None),
    (["git", "ls-files"], (), None),
    ("lmchat chat --backend echo", (), ("server",)),
])
def test_the_guard_names_the_marker_a_process_needs(argv, marks, missing):
    guard = tiers.Guard()
    guard.current = Running(*marks)
    guard.process(argv)
    # (the missing marker in a tuple: a parameter "redis" would mean a store on redis-server to tiers.PARAMS)
    assert [f"not marked {missing[0]}" in v for v in guard.violations] == ([True] if missing else [])


def test_the_guard_lets_a_vocabulary_load_through_but_not_the_weights():
    guard = tiers.Guard()
    guard.current = Running("server")
    guard.model(vocab_only=True)
    assert guard.violations == []
    guard.model(vocab_only=False)
    assert len(guard.violations) == 1 and "not marked model" in guard.violations[0]
    guard.current = None  # between tests (a session fixture's setup): nothing to check against
    guard.model(vocab_only=False)
    assert len(guard.violations) == 1
