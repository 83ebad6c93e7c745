"""The docs cannot go stale silently: the architecture tree and every path they name.

* The tree at the top of ``docs/architecture.rst`` (its first ``code-block:: text``)
  lists exactly the files of ``alf_env/`` (``*.py``) and ``csrc/`` (``*.cc``,
  ``*.h``): none missing, none extra.
* Every dotted path ``alf_env.x.y`` named in ``docs/*.rst``, ``docs/*.md`` and
  ``README.md`` imports (a module) or resolves (an attribute of a module).
* Every file the same pages name (``job_board.py``, ``csrc/futex.h``,
  ``tests/support/faults.py``) exists, and every ``file.py:name`` or
  ``file.cc:Name::name`` (the traces of the architecture page) names something
  that file holds.
* The two traces of one step are the calls one step makes: the reference that
  opens each numbered step is called, in the trainer or in each worker as the
  trace says, in the trace's order (recorded by ``tests/support/call_trace.py``).

The tree's format: a directory is a line whose first word ends with ``/``, its
entries are indented below it, a file is a line whose first word is the file's
name, and lines starting with ``#`` are group labels. Nothing else may appear.
"""

import ast
import functools
import importlib
import os
import re
from pathlib import Path
from typing import Dict, List, Set, Tuple

import gymnasium as gym
import numpy as np
import pytest

from tests.support.call_trace import (
    CallRecorder,
    Record,
    first_missing,
    read_records,
    step_calls,
)
from tests.support.paths import REPO_ROOT

ARCHITECTURE = REPO_ROOT / "docs" / "architecture.rst"
DOC_PAGES = sorted([*(REPO_ROOT / "docs").glob("*.rst"), *(REPO_ROOT / "docs").glob("*.md"),
                    REPO_ROOT / "README.md"])
SOURCE_TREES = {"alf_env": (".py",), "csrc": (".cc", ".h")}
SKIPPED_DIRS = {".git", "build", "_build", "__pycache__", ".eggs", ".pytest_cache"}

DOTTED_PATH = re.compile(r"(?<![\w./-])alf_env(?:\.[A-Za-z_]\w*)+")
# A file name, with or without folders, optionally followed by ":name" (a
# Python attribute path, or a C++ name such as Controller::post).
FILE_REFERENCE = re.compile(
    r"(?<![\w./-])((?:[\w-]+/)*[\w-]+\.(?:py|cc|h))(?![\w])"
    r"(?::([A-Za-z_]\w*(?:(?:\.|::)[A-Za-z_]\w*)*))?")
RE_EXPORT = "Re-export (public import path):"
TREE_ENTRY = re.compile(r"^[\w.-]+(/|\.py|\.cc|\.h)$")


def relative(path: Path) -> str:
    return path.relative_to(REPO_ROOT).as_posix()


# -- the tree -------------------------------------------------------------------


def tree_block(text: str) -> List[str]:
    """The lines of the first ``.. code-block:: text`` of ``text`` (dedent kept)."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip() == ".. code-block:: text")
    block = []
    for line in lines[start + 1:]:
        if line.strip() and not line.startswith(" "):
            break  # the first unindented line ends the block
        block.append(line)
    return block


def tree_entries(block: List[str]) -> List[Tuple[str, str]]:
    """``(file path, its line)`` for each file the tree lists, folders joined by indentation.

    Raises:
        ValueError: a line that is neither a folder, a file nor a ``#`` label.
    """
    entries: List[Tuple[str, str]] = []
    folders: List[Tuple[int, str]] = []  # (indentation, "name/") of the open folders
    for line in block:
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        indent = len(line) - len(line.lstrip())
        name = stripped.split()[0]
        if not TREE_ENTRY.match(name):
            raise ValueError(f"not a file or folder of the tree: {line!r}")
        while folders and folders[-1][0] >= indent:
            folders.pop()
        if name.endswith("/"):
            folders.append((indent, name))
        else:
            entries.append(("".join(folder for _, folder in folders) + name, line))
    return entries


def tree_paths(block: List[str]) -> List[str]:
    return [path for path, _ in tree_entries(block)]


def source_files() -> Set[str]:
    found = set()
    for folder, suffixes in SOURCE_TREES.items():
        for path in (REPO_ROOT / folder).rglob("*"):
            if path.suffix in suffixes and "__pycache__" not in path.parts:
                found.add(relative(path))
    return found


def test_the_tree_lists_exactly_the_source_files():
    listed = tree_paths(tree_block(ARCHITECTURE.read_text()))
    repeated = sorted({p for p in listed if listed.count(p) > 1})
    assert repeated == [], f"listed more than once in docs/architecture.rst: {repeated}"
    existing = source_files()
    missing = sorted(existing - set(listed))
    extra = sorted(set(listed) - existing)
    assert missing == [], f"files missing from the tree of docs/architecture.rst: {missing}"
    assert extra == [], f"the tree of docs/architecture.rst lists files that do not exist: {extra}"


def test_the_tree_check_notices_a_missing_or_stray_line():
    block = tree_block(ARCHITECTURE.read_text())
    assert "alf_env/data_plane/job_board.py" in tree_paths(block)
    without = [line for line in block if not line.strip().startswith("job_board.py")]
    assert len(without) == len(block) - 1
    assert "alf_env/data_plane/job_board.py" not in tree_paths(without)
    with pytest.raises(ValueError, match="not a file or folder"):
        tree_paths(block + ["    a description that lost its file"])


def is_re_export(path: str) -> bool:
    """The rule of tests/test_layout.py: the docstring says so."""
    doc = ast.get_docstring(ast.parse((REPO_ROOT / path).read_text())) or ""
    return doc.startswith(RE_EXPORT)


def test_the_tree_marks_exactly_the_re_export_modules():
    entries = tree_entries(tree_block(ARCHITECTURE.read_text()))
    marked = sorted(path for path, line in entries if "[re-export]" in line)
    re_exports = sorted(path for path in source_files()
                        if path.endswith(".py") and is_re_export(path))
    assert marked == re_exports


# -- dotted paths ---------------------------------------------------------------


def named_in_docs(pattern: re.Pattern) -> Dict[str, List[str]]:
    """Each match of ``pattern`` in the doc pages -> where it appears ("page:line")."""
    found: Dict[str, List[str]] = {}
    for page in DOC_PAGES:
        for number, line in enumerate(page.read_text().splitlines(), start=1):
            for match in pattern.finditer(line):
                found.setdefault(match.group(0), []).append(f"{relative(page)}:{number}")
    return found


DOTTED = named_in_docs(DOTTED_PATH)


def resolve(dotted: str) -> object:
    """Imports the longest module prefix of ``dotted`` and looks the rest up in it."""
    parts = dotted.split(".")
    for end in range(len(parts), 0, -1):
        name = ".".join(parts[:end])
        try:
            value = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name and (name == exc.name or name.startswith(exc.name + ".")):
                continue  # no module of that name: look the last part up instead
            if exc.name and not exc.name.startswith("alf_env"):
                pytest.skip(f"{dotted} needs {exc.name}, which is not installed")
            raise
        for attribute in parts[end:]:
            value = getattr(value, attribute)
        return value
    raise ModuleNotFoundError(dotted)


def test_the_docs_name_dotted_paths():
    assert "alf_env.vector.FastVectorEnv" in DOTTED and len(DOTTED) > 20


@pytest.mark.parametrize("dotted", sorted(DOTTED))
def test_every_dotted_path_in_the_docs_resolves(dotted):
    try:
        resolve(dotted)
    except (ImportError, AttributeError) as exc:
        pytest.fail(f"{dotted} (named at {', '.join(DOTTED[dotted])}) does not resolve: {exc!r}")


def test_resolve_rejects_a_moved_name():
    with pytest.raises(AttributeError):
        resolve("alf_env.environments.process_environment.CLOSE_POLITE_TIMEOUT")
    assert resolve("alf_env.control_plane.shutdown.CLOSE_POLITE_TIMEOUT") > 0


# -- file names and file:name references ----------------------------------------


def repository_files() -> List[str]:
    files = []
    for path in REPO_ROOT.rglob("*"):
        if path.is_file() and not SKIPPED_DIRS & set(path.relative_to(REPO_ROOT).parts):
            files.append(relative(path))
    return files


REPOSITORY_FILES = repository_files()
FILE_REFERENCES = named_in_docs(FILE_REFERENCE)


def files_named(reference: str) -> List[str]:
    """The repository files that ``reference`` (a path or its last parts) can mean."""
    return sorted(f for f in REPOSITORY_FILES if f == reference or f.endswith("/" + reference))


def holds(path: str, name: str) -> bool:
    """Whether the file at ``path`` holds ``name`` (an attribute path, or a C++ name)."""
    if path.startswith("alf_env/") and path.endswith(".py"):
        parts = Path(path).with_suffix("").parts
        module = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        try:
            resolve(f"{module}.{name}")
        except (ImportError, AttributeError):
            return False
        return True
    return re.search(rf"(?<![\w]){re.escape(name)}(?![\w])",
                     (REPO_ROOT / path).read_text()) is not None


def test_the_docs_name_files_and_functions():
    assert any(":" in reference for reference in FILE_REFERENCES)


@pytest.mark.parametrize("reference", sorted(FILE_REFERENCES))
def test_every_file_the_docs_name_exists_and_holds_the_name(reference):
    where = ", ".join(FILE_REFERENCES[reference])
    match = FILE_REFERENCE.fullmatch(reference)
    path, name = match.group(1), match.group(2)
    candidates = files_named(path)
    assert candidates, f"{path} (named at {where}) is no file of the repository"
    if name is not None:
        assert any(holds(c, name) for c in candidates), (
            f"{reference} (named at {where}): {' / '.join(candidates)} holds no {name}")


# -- the traces of one step ---------------------------------------------------------

TRACE_STEP = re.compile(r"^\d+\. ``([^`]+)``")


def trace_steps(title: str) -> Dict[str, List[Record]]:
    """The calls that open the numbered steps of the trace titled ``title``, by
    side (``"Trainer"`` or ``"Worker"``: the paragraph above them says), as
    records of :mod:`tests.support.call_trace`."""
    lines = ARCHITECTURE.read_text().splitlines()
    start = lines.index(title) + 2
    end = next(i for i in range(start, len(lines) - 1)
               if lines[i + 1].startswith("---") and lines[i].strip())
    steps: Dict[str, List[Record]] = {}
    side = None
    for line in lines[start:end]:
        if line.startswith(("Trainer", "Worker")):
            side = line.split()[0].rstrip(",")
        match = TRACE_STEP.match(line)
        if match:
            assert side is not None, f"{title}: step {line!r} comes before any side"
            path, name = match.group(1).split(":", 1)
            if path.endswith(".py"):
                record = Record(0, "call", f"{path}:{name}")
            else:  # a C++ name; its binding in _penv has the method's name
                record = Record(0, "native", name.split("::")[-1])
            steps.setdefault(side, []).append(record)
    return steps


def test_a_trace_is_read_as_its_opening_calls():
    steps = trace_steps("One step of ``FastVectorEnv``")
    assert steps["Trainer"][0] == Record(0, "call", "front_ends/gym/vector_env.py:"
                                                    "FastVectorEnv.step")
    assert Record(0, "native", "wait_job") in steps["Worker"]
    assert first_missing([Record(0, "call", "a"), Record(0, "call", "b")],
                         [Record(1, "call", "b"), Record(1, "call", "a")]) is not None


def check_trace(title: str, made: Dict[int, List[Record]], workers: List[int]) -> None:
    steps = trace_steps(title)
    missing = first_missing(steps["Trainer"], made.get(os.getpid(), []))
    assert missing is None, (f"{title}: the trainer made no call {missing.name} (after the "
                             f"calls before it)")
    for pid in workers:
        missing = first_missing(steps["Worker"], made.get(pid, []))
        assert missing is None, (f"{title}: worker {pid} made no call {missing.name} "
                                 f"(after the calls before it)")


def test_one_fast_vector_env_step_makes_the_traced_calls(tmp_path):
    from alf_env.vector import FastVectorEnv
    path = tmp_path / "calls"
    with CallRecorder(path) as recorder:
        # The default arguments; workers forked while the recorder is set record too.
        env = FastVectorEnv([functools.partial(gym.make, "CartPole-v1")] * 2)
        try:
            env.reset(seed=0)
            env.step(np.zeros(2, np.int64))
            recorder.mark("begin")
            env.step(np.zeros(2, np.int64))
            recorder.mark("end")
            workers = env.worker_pids()
        finally:
            env.close()
    check_trace("One step of ``FastVectorEnv``", step_calls(read_records(path), "begin", "end"),
                workers)


def test_one_fast_parallel_environment_step_makes_the_traced_calls(tmp_path):
    import torch

    from alf_env.environments import suite_gym
    from alf_env.front_ends.alf.fast_parallel_environment import FastParallelEnvironment
    path = tmp_path / "calls"
    with CallRecorder(path) as recorder:
        # Two workers of two envs each: what the defaults give with more envs than CPUs.
        env = FastParallelEnvironment(
            [functools.partial(suite_gym.load, "CartPole-v1")] * 4, num_workers=2)
        try:
            env.reset()
            action = torch.zeros(4, dtype=torch.int64)
            env.step(action)
            recorder.mark("begin")
            env.step(action)
            recorder.mark("end")
            workers = env.worker_pids()
        finally:
            env.close()
    check_trace("One step of ``FastParallelEnvironment``",
                step_calls(read_records(path), "begin", "end"), workers)
