"""The package's shape: three parts in layers, no import cycle, no private reach.

``alf_env`` has a control plane (worker processes and the pipe), a data plane
(shared memory and the job loop) and front ends (ALF API, gymnasium, SB3, Ray)
over a shared vocabulary (nest, specs, time steps, errors, the ALF environment
model). Imports may only point down that stack; re-export modules (the public
import paths kept for users) sit on top and only import. The native module
``alf_env._penv`` is part of the data plane, and the data plane is transport
only: no gymnasium, no front end, no name of a front end's class. No module
imports another module's underscore-prefixed (private) name. These tests
read the source with ``ast``, so an import inside a function counts as well.
"""

import ast
import importlib
import inspect
import re
import subprocess
import sys
from pathlib import Path
from typing import Dict, List, Set, Tuple

import pytest

from tests.support.paths import REPO_ROOT

PACKAGE = REPO_ROOT / "alf_env"
RE_EXPORT = "Re-export (public import path):"

# Layer of each part: a module may import only from its own layer or lower ones.
VOCABULARY, CONTROL_PLANE, DATA_PLANE, FRONT_ENDS, TOOLS = range(5)
LAYER_OF_PREFIX = {
    "alf_env._penv": DATA_PLANE,
    "alf_env.control_plane": CONTROL_PLANE,
    "alf_env.data_plane": DATA_PLANE,
    "alf_env.front_ends": FRONT_ENDS,
    "alf_env.bench": TOOLS,
    "alf_env.__main__": TOOLS,
}
LAYER_NAMES = {VOCABULARY: "the shared vocabulary", CONTROL_PLANE: "the control plane",
               DATA_PLANE: "the data plane", FRONT_ENDS: "the front ends", TOOLS: "the tools"}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO_ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def source_files() -> Dict[str, Path]:
    return {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


MODULES = source_files()
# Native extension modules: imported like the others, with no source to read.
NATIVE = {"alf_env._penv"}

# What the data plane may not import (module prefixes) and may not name: the
# front ends, the ALF environment model and the libraries they wrap.
FRONT_END_MODULES = ("gymnasium", "gym", "stable_baselines3", "ray", "torch",
                     "alf_env.front_ends", "alf_env.environments", "alf_env.data_structures",
                     "alf_env.vector", "alf_env.sb3")
FRONT_END_WORDS = {"TimeStep", "StepType", "AlfEnvironment", "AlfEnvBatch", "gym", "gymnasium"}


def is_re_export(name: str) -> bool:
    doc = ast.get_docstring(ast.parse(MODULES[name].read_text())) or ""
    return doc.startswith(RE_EXPORT)


def layer(name: str) -> int:
    for prefix, value in LAYER_OF_PREFIX.items():
        if name == prefix or name.startswith(prefix + "."):
            return value
    return VOCABULARY


def imports_of(name: str) -> Set[str]:
    """The alf_env modules that ``name`` imports (anywhere in its source)."""
    return {target for target in imported_names(MODULES[name].read_text())
            if target.startswith("alf_env") and target != name}


def imported_names(source: str) -> Set[str]:
    """Every module ``source`` imports: an ``alf_env`` one as the module (or native
    module) it names, any other as written."""
    known = set(MODULES) | NATIVE
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            targets = [f"{node.module}.{alias.name}" for alias in node.names]
            targets = [t if t in known else node.module for t in targets]
        else:
            continue
        for target in targets:
            if not target.startswith("alf_env"):
                found.add(target)
                continue
            while target and target not in known:  # `import a.b.c` of a package path
                target = target.rpartition(".")[0]
            if target:
                found.add(target)
    return found


def front_end_class_names() -> Set[str]:
    """The classes the front ends define, and the front ends' words."""
    names = set(FRONT_END_WORDS)
    for path in sorted((PACKAGE / "front_ends").rglob("*.py")):
        names |= {node.name for node in ast.walk(ast.parse(path.read_text()))
                  if isinstance(node, ast.ClassDef)}
    return names


def front_end_mentions(source: str, class_names: Set[str]) -> List[str]:
    """What of the front ends ``source`` imports or names (identifiers, not prose)."""
    found = [f"imports {target}" for target in sorted(imported_names(source))
             if any(target == p or target.startswith(p + ".") for p in FRONT_END_MODULES)]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Name):
            words = [node.id]
        elif isinstance(node, ast.Attribute):
            words = [node.attr]
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            words = [node.name]
        elif isinstance(node, ast.arg):
            words = [node.arg]
        elif isinstance(node, ast.alias):
            words = [node.name.rpartition(".")[2], node.asname or ""]
        else:
            continue
        found += [f"names {word} (line {node.lineno})" for word in words
                  if word in class_names and hasattr(node, "lineno")]
    return found


def graph() -> Dict[str, Set[str]]:
    # Package __init__ modules that only document their folder are left out of
    # cycles: importing a.b.c runs a/__init__ first, which imports nothing.
    return {name: imports_of(name) for name in MODULES}


def cycles(edges: Dict[str, Set[str]]) -> List[List[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: Dict[str, int] = {}
    low: Dict[str, int] = {}
    stack: List[str] = []
    on_stack: Set[str] = set()
    found: List[List[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def test_the_three_parts_are_folders():
    for part in ("control_plane", "data_plane", "front_ends"):
        assert (PACKAGE / part / "__init__.py").is_file(), part
    for front_end in ("alf", "gym", "sb3", "ray"):
        assert (PACKAGE / "front_ends" / front_end / "__init__.py").is_file(), front_end


def test_no_import_cycle():
    assert cycles(graph()) == []


def test_cycle_finder_finds_a_planted_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_imports_only_point_down_the_layers():
    wrong = []
    for name, targets in graph().items():
        if is_re_export(name):
            continue  # the public paths sit on top of everything
        for target in targets:
            if layer(target) > layer(name):
                wrong.append(f"{name} ({LAYER_NAMES[layer(name)]}) imports {target} "
                             f"({LAYER_NAMES[layer(target)]})")
    assert wrong == []


def test_the_native_module_is_imported_from_the_data_plane_up():
    below = [f"{name} ({LAYER_NAMES[layer(name)]})" for name, targets in graph().items()
             if "alf_env._penv" in targets and layer(name) < DATA_PLANE]
    assert below == []


def test_the_import_reader_sees_the_native_module():
    assert imported_names("from alf_env._penv import _copy_leaves") == {"alf_env._penv"}
    assert imported_names("from alf_env import _penv") == {"alf_env._penv"}
    assert layer("alf_env._penv") == DATA_PLANE


def test_the_data_plane_knows_no_front_end():
    class_names = front_end_class_names()
    assert {"FastVectorEnv", "GymRowsHandler", "AlfEnvBatch", "TimeStep"} <= class_names
    found = {name: mentions for name in MODULES if layer(name) == DATA_PLANE
             for mentions in [front_end_mentions(MODULES[name].read_text(), class_names)]
             if mentions}
    assert found == {}


@pytest.mark.parametrize("source", [
    "import gymnasium as gym",
    "from gymnasium import spaces",
    "from alf_env.front_ends.gym import gym_rows",
    "from alf_env.data_structures import TimeStep",
    "def f(env):\n    return env.step_member if isinstance(env, AlfEnvBatch) else None",
    "x: 'int' = handler.GymEnvBatch",
])
def test_the_front_end_check_finds_a_planted_mention(source):
    assert front_end_mentions(source, front_end_class_names() | {"GymEnvBatch"}) != []


def test_re_export_modules_only_import():
    re_exports = [name for name in MODULES if is_re_export(name)]
    assert {"alf_env.vector", "alf_env.sb3",
            "alf_env.environments.process_environment"} <= set(re_exports)
    for name in re_exports:
        body = ast.parse(MODULES[name].read_text()).body[1:]  # after the docstring
        kinds = {type(node).__name__ for node in body}
        assert kinds <= {"ImportFrom", "Import", "Assign"}, (name, kinds)
        for node in body:
            if isinstance(node, ast.Assign):  # only __all__
                assert [t.id for t in node.targets] == ["__all__"], name


def private_imports(name: str, source: str) -> List[str]:
    """``module: name from other_module`` for each underscore-prefixed name that
    ``source`` (the module ``name``) imports from another ``alf_env`` module; the
    native module's names aside."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not (isinstance(node, ast.ImportFrom) and node.module and node.level == 0):
            continue
        if not (node.module == "alf_env" or node.module.startswith("alf_env.")):
            continue
        if node.module == name or node.module in NATIVE:
            continue
        for alias in node.names:
            private = alias.name.startswith("_") and not alias.name.startswith("__")
            if private and f"{node.module}.{alias.name}" not in NATIVE:
                found.append(f"{name}: {alias.name} from {node.module}")
    return found


def test_no_private_name_is_imported_across_modules():
    found = [entry for name, path in MODULES.items()
             for entry in private_imports(name, path.read_text())]
    assert found == []


def test_the_private_import_finder_finds_a_planted_import():
    source = ("from alf_env.nest import KINDS, _MAX_CACHED_KINDS\n"
              "def f():\n    from alf_env.control_plane import _hidden\n"
              "from alf_env._penv import _copy_leaves\nfrom alf_env import _penv\n"
              "from alf_env.x import __version__\nfrom other import _ok\n")
    assert private_imports("alf_env.y", source) == [
        "alf_env.y: _MAX_CACHED_KINDS from alf_env.nest",
        "alf_env.y: _hidden from alf_env.control_plane"]


def self_attributes(source: str, class_name: str) -> Dict[str, Set[str]]:
    """``{"set": ..., "read": ...}``: the ``self.<name>`` attributes that the
    methods of ``class_name`` in ``source`` assign and read."""
    found: Dict[str, Set[str]] = {"set": set(), "read": set()}
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ClassDef) and node.name == class_name:
            for inner in ast.walk(node):
                if (isinstance(inner, ast.Attribute) and isinstance(inner.value, ast.Name)
                        and inner.value.id == "self"):
                    kind = "read" if isinstance(inner.ctx, ast.Load) else "set"
                    found[kind].add(inner.attr)
    return found


def shared_across_files(classes: List[Tuple[str, str, str]]) -> List[str]:
    """The attributes that the methods of one file's classes set and another
    file's classes read, of ``classes`` (``(file, its source, class name)``: a
    class and its bases)."""
    by_file: Dict[str, Dict[str, Set[str]]] = {}
    for path, source, class_name in classes:
        found = self_attributes(source, class_name)
        entry = by_file.setdefault(path, {"set": set(), "read": set()})
        entry["set"] |= found["set"]
        entry["read"] |= found["read"]
    shared = []
    for setter, sets in by_file.items():
        for reader, reads in by_file.items():
            if setter != reader:
                shared += [f"{name}: set in {setter}, read in {reader}"
                           for name in sorted(sets["set"] & reads["read"] - reads["set"])]
    return shared


@pytest.mark.parametrize("dotted", [
    "alf_env.front_ends.gym.vector_env.FastVectorEnv",
    "alf_env.front_ends.ray.vector_env.RayVectorEnv",
    "alf_env.front_ends.alf.fast_parallel_environment.FastParallelEnvironment",
    "alf_env.front_ends.alf.parallel_environment.ParallelAlfEnvironment"])
def test_no_attribute_is_set_in_one_file_and_read_in_another(dotted):
    module, name = dotted.rsplit(".", 1)
    cls = getattr(importlib.import_module(module), name)
    classes = []
    for klass in cls.__mro__:  # the class and its bases in the package
        if klass.__module__.startswith("alf_env."):
            path = Path(inspect.getsourcefile(klass) or "")
            classes.append((path.name, path.read_text(), klass.__name__))
    assert len(classes) > 1 and shared_across_files(classes) == []


def test_the_shared_attribute_finder_finds_a_mixin():
    env = ("class Env(Mixin):\n    def __init__(self):\n        self.count = 0\n"
           "        self.own = 1\n")
    mixin = "class Mixin:\n    def total(self):\n        return self.count + self.own\n"
    assert shared_across_files([("env.py", env, "Env"), ("mixin.py", mixin, "Mixin")]) == [
        "count: set in env.py, read in mixin.py", "own: set in env.py, read in mixin.py"]
    # An attribute the mixin sets itself is its own.
    mixin += "    def reset(self):\n        self.own = 0\n"
    assert shared_across_files([("env.py", env, "Env"), ("mixin.py", mixin, "Mixin")]) == [
        "count: set in env.py, read in mixin.py"]


def test_every_module_says_what_it_holds():
    missing = [name for name, path in MODULES.items()
               if not ast.get_docstring(ast.parse(path.read_text()))]
    assert missing == []


def contract_paths() -> Dict[str, List[str]]:
    """Public module -> names, from the package table of docs/contract.rst."""
    text = (REPO_ROOT / "docs" / "contract.rst").read_text()
    found: Dict[str, List[str]] = {}
    table = text.split(".. list-table::", 1)[1].split("\n\n")[1]
    rows = re.split(r"^   \* - ", table, flags=re.M)
    for row in rows[1:]:
        module_cell, _, names_cell = row.partition("\n     - ")
        module = re.match(r"``([\w.]+)``", module_cell)
        if module and (module.group(1) == "alf_env" or module.group(1).startswith("alf_env.")):
            described = re.sub(r" \([^)]*\)", "", names_cell)  # "(a gymnasium.Env ...)"
            found[module.group(1)] = re.findall(r"``(\w+)[`(]", described)
    return found


def test_contract_lists_the_public_paths():
    paths = contract_paths()
    assert "alf_env.vector" in paths and "alf_env.environments.process_environment" in paths
    assert "FastVectorEnv" in paths["alf_env.vector"]
    assert {"FastVectorEnv", "FastSubprocVecEnv", "FastParallelEnvironment",
            "ParallelAlfEnvironment", "ProcessEnvironment", "GymProxy",
            "RestartPolicy"} <= set(paths["alf_env"])


def test_importing_alf_env_imports_no_front_ends_library():
    code = ("import sys, alf_env; from alf_env import WorkerDiedError; "
            "print(sorted(m for m in ('gymnasium', 'torch', 'stable_baselines3', 'ray') "
            "if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True, cwd=REPO_ROOT)
    assert done.stdout.strip() == "[]"


@pytest.mark.parametrize("module, names", sorted(contract_paths().items()))
def test_public_paths_of_the_contract_still_import(module, names):
    imported = importlib.import_module(module)
    for name in names:
        assert hasattr(imported, name), f"{module} lost {name}"
