"""A pytest plugin that runs stable-baselines3's own tests on ``FastSubprocVecEnv`` too.

Loaded by ``tests/front_ends/sb3/test_sb3_suite.py`` into a pytest run of the
tests of SB3's sdist (``-p tests.support.sb3_suite_plugin``); it changes no
file of SB3's. Every SB3 test that uses ``SubprocVecEnv`` runs twice, once as
written and once with :class:`alf_env.sb3.FastSubprocVecEnv` in its place:

* a ``parametrize`` mark whose values hold ``SubprocVecEnv`` (alone or in a
  tuple, e.g. ``itertools.product(VEC_ENV_CLASSES, ...)``) gets, after each
  such value, the same value with ``FastSubprocVecEnv`` (the marks are read
  from the function object, so this happens before the items are made);
* a test whose code (nested functions included) names the module global
  ``SubprocVecEnv`` without such a mark is parametrized over the fixture
  :func:`sb3_vec_env_class` (ids ``SubprocVecEnv`` / ``FastSubprocVecEnv``);
* in every ``FastSubprocVecEnv`` case the test module's global
  ``SubprocVecEnv`` is ``FastSubprocVecEnv`` (monkeypatched for the test),
  so ``functools.partial(SubprocVecEnv, start_method=...)``,
  ``make_vec_env(..., vec_env_cls=SubprocVecEnv)`` and ``isinstance(env,
  SubprocVecEnv)`` in the test's body mean the class under test.

Tests with neither variant (they never use ``SubprocVecEnv``) are
deselected. Test ids name the class (pytest ids classes by their name), so
the two variants of a test differ by ``SubprocVecEnv`` / ``FastSubprocVecEnv``
in their ids.

It works on the objects pytest collects (marks, code objects, module
globals), not on SB3's source text, so it does not depend on how a test
spells its classes (a module list such as ``VEC_ENV_CLASSES``, a literal
list, ``itertools.product``, a ``functools.partial``). For speed only, the
fork server (SB3's default start method) imports torch and SB3 once
(:func:`pytest_configure`).
"""

import types
from typing import Any, Iterator, List, Optional, Set

import pytest
from stable_baselines3.common.vec_env import SubprocVecEnv

from alf_env.sb3 import FastSubprocVecEnv

#: The classes the two variants of a test run on, and their ids.
CLASSES = (SubprocVecEnv, FastSubprocVecEnv)
IDS = tuple(cls.__name__ for cls in CLASSES)
_MARKED = "_alf_env_sb3_fast_variant"  # set on functions whose marks were extended


def _with_fast(value: Any) -> Optional[Any]:
    """``value`` with ``FastSubprocVecEnv`` for ``SubprocVecEnv`` (``None``: none in it)."""
    if value is SubprocVecEnv:
        return FastSubprocVecEnv
    if isinstance(value, tuple) and any(v is SubprocVecEnv for v in value):
        return tuple(FastSubprocVecEnv if v is SubprocVecEnv else v for v in value)
    return None


def _names(code: types.CodeType) -> Set[str]:
    """The global (and attribute) names a code object and its nested ones use."""
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _names(const)
    return names


def _uses_subproc_global(function: Any) -> bool:
    return ("SubprocVecEnv" in _names(function.__code__)
            and function.__globals__.get("SubprocVecEnv") is SubprocVecEnv)


def _extended(mark: Any) -> Optional[Any]:
    """A ``parametrize`` mark with a ``FastSubprocVecEnv`` twin after each value
    holding ``SubprocVecEnv`` (``None``: no such value)."""
    argnames, argvalues = mark.args[:2]
    values: List[Any] = []
    ids = mark.kwargs.get("ids")
    new_ids: Optional[List[Any]] = [] if isinstance(ids, (list, tuple)) else None
    added = False
    for k, value in enumerate(argvalues):
        values.append(value)
        if new_ids is not None:
            new_ids.append(ids[k])
        twin = _with_fast(value)
        if twin is not None:
            values.append(twin)
            if new_ids is not None:
                new_ids.append(f"{ids[k]}-{IDS[1]}")
            added = True
    if not added:
        return None
    kwargs = dict(mark.kwargs)
    if new_ids is not None:
        kwargs["ids"] = new_ids
    return pytest.mark.parametrize(argnames, values, **kwargs).mark


@pytest.hookimpl(tryfirst=True)
def pytest_pycollect_makeitem(collector: Any, name: str, obj: Any) -> None:
    """Extends the ``parametrize`` marks of a test function before its items are made."""
    marks = getattr(obj, "pytestmark", None)
    if not isinstance(obj, types.FunctionType) or not marks or getattr(obj, _MARKED, False):
        return
    changed = False
    new_marks = []
    for mark in marks:
        extended = _extended(mark) if mark.name == "parametrize" else None
        new_marks.append(extended or mark)
        changed |= extended is not None
    if changed:
        obj.pytestmark = new_marks
        setattr(obj, _MARKED, True)


def pytest_generate_tests(metafunc: Any) -> None:
    """Parametrizes tests that use the global ``SubprocVecEnv`` with no such mark."""
    function = metafunc.function
    if getattr(function, _MARKED, False) or not _uses_subproc_global(function):
        return
    metafunc.parametrize("sb3_vec_env_class", CLASSES, ids=IDS, indirect=True)


def _params(item: Any) -> Iterator[Any]:
    callspec = getattr(item, "callspec", None)
    for value in (callspec.params.values() if callspec is not None else ()):
        yield from (value if isinstance(value, tuple) else (value,))


@pytest.fixture(autouse=True)
def sb3_vec_env_class(request: Any, monkeypatch: Any) -> Optional[type]:
    """The class this case runs on; in a ``FastSubprocVecEnv`` case the test
    module's global ``SubprocVecEnv`` is ``FastSubprocVecEnv``."""
    cls = getattr(request, "param", None)
    fast = cls is FastSubprocVecEnv or any(v is FastSubprocVecEnv
                                           for v in _params(request.node))
    if fast and getattr(request.module, "SubprocVecEnv", None) is SubprocVecEnv:
        monkeypatch.setattr(request.module, "SubprocVecEnv", FastSubprocVecEnv)
    return cls


def pytest_collection_modifyitems(config: Any, items: List[Any]) -> None:
    """Keeps the cases of either variant only."""
    kept, dropped = [], []
    for item in items:
        ours = any(v is cls for v in _params(item) for cls in CLASSES)
        (kept if ours else dropped).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept


def pytest_configure(config: Any) -> None:
    """Has multiprocessing's fork server import torch and SB3 once, for speed only.

    SB3's vec envs start their workers with ``forkserver`` by default; each
    worker then imports what its env constructor needs (torch and SB3 through
    the test module) unless the server did so before forking it. Both
    variants get the same server.
    """
    import multiprocessing
    multiprocessing.set_forkserver_preload(["torch", "stable_baselines3", "gymnasium",
                                            "alf_env.front_ends.sb3.worker"])
