"""stable-baselines3's own tests, run on ``FastSubprocVecEnv`` beside ``SubprocVecEnv``.

SB3's sdist on PyPI ships its test suite. This test downloads the sdist of
the *installed* SB3 version (once per session; no SB3 code lives in this
repository), takes its test files that use ``SubprocVecEnv``, and runs them
with pytest in a child process, with the plugin
:mod:`tests.support.sb3_suite_plugin`: each test that uses ``SubprocVecEnv``
runs twice, once as SB3 wrote it and once with ``FastSubprocVecEnv`` in its
place (see the plugin for how). Both variants must pass, or be skipped
alike (``test_render`` needs an X server). It is skipped only when the
package index cannot be reached.

SB3's VecEnv wrapper tests (``test_vec_normalize.py``, ``test_vec_monitor.py``,
...) build their envs with ``DummyVecEnv`` only: having no ``SubprocVecEnv``
case, they are not run.
"""

import importlib.metadata
import os
import subprocess
import sys
import tarfile
import urllib.error
import urllib.request
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path
from typing import Dict, Optional

import pytest

from tests.support.paths import REPO_ROOT
from tests.support.sb3_suite_plugin import IDS

PACKAGE = "stable-baselines3"
PLUGIN = "tests.support.sb3_suite_plugin"
DOWNLOAD_TIMEOUT = 600.0
# SB3's tests start many worker processes (the plugin has the fork server
# import torch and SB3 once): about 2 min on 2 cores, more on a busy machine.
SUITE_TIMEOUT = 1500.0


def _index_unreachable(package: str) -> Optional[str]:
    """Why the package index cannot be reached (``None``: it can)."""
    index = os.environ.get("PIP_INDEX_URL")
    if not index:
        configured = subprocess.run([sys.executable, "-m", "pip", "config", "get",
                                     "global.index-url"], capture_output=True, text=True,
                                    timeout=60)
        index = configured.stdout.strip() or "https://pypi.org/simple"
    url = f"{index.rstrip('/')}/{package}/"
    try:
        with urllib.request.urlopen(url, timeout=30):
            return None
    except (urllib.error.URLError, OSError) as exc:
        return f"{url}: {exc}"


@pytest.fixture(scope="session")
def sb3_sdist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The extracted sdist of the installed stable-baselines3 (downloaded once)."""
    version = importlib.metadata.version(PACKAGE)
    dest = tmp_path_factory.mktemp("sb3_sdist")
    download = subprocess.run(
        [sys.executable, "-m", "pip", "download", "--no-binary", ":all:", "--no-deps",
         f"{PACKAGE}=={version}", "-d", str(dest)],
        capture_output=True, text=True, timeout=DOWNLOAD_TIMEOUT)
    if download.returncode != 0:
        unreachable = _index_unreachable(PACKAGE)
        if unreachable is not None:
            pytest.skip(f"the package index is unreachable ({unreachable}), so "
                        f"{PACKAGE}=={version}'s sdist (its tests) cannot be downloaded")
        pytest.fail(f"pip download of {PACKAGE}=={version} failed although the package "
                    f"index is reachable:\n{download.stdout[-2000:]}\n{download.stderr[-4000:]}")
    archive, = dest.glob("stable_baselines3-*.tar.gz")
    with tarfile.open(archive) as tar:
        tar.extractall(dest, filter="data")
    root, = (p for p in dest.iterdir() if p.is_dir())
    return root


def _outcomes(junit_xml: Path) -> Dict[str, Counter]:
    """Per variant (the class in the test id), the count of each outcome."""
    counts: Dict[str, Counter] = {name: Counter() for name in IDS}
    for case in ET.parse(junit_xml).iter("testcase"):
        name = case.get("name", "")
        variant = IDS[1] if IDS[1] in name else IDS[0] if IDS[0] in name else None
        assert variant is not None, f"{name}: a case of neither variant ran"
        tags = {child.tag for child in case}
        outcome = ("failed" if tags & {"failure", "error"} else
                   "skipped" if "skipped" in tags else "passed")
        counts[variant][outcome] += 1
    return counts


@pytest.mark.timeout(SUITE_TIMEOUT + DOWNLOAD_TIMEOUT + 60)
def test_sb3_own_tests_pass_on_fast_subproc_vec_env(sb3_sdist, tmp_path):
    files = sorted(str(p.relative_to(sb3_sdist)) for p in (sb3_sdist / "tests").glob("test_*.py")
                   if "SubprocVecEnv" in p.read_text())
    assert "tests/test_vec_envs.py" in files, files
    junit = tmp_path / "sb3_suite.xml"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(REPO_ROOT)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    run = subprocess.run(
        [sys.executable, "-m", "pytest", *files, "-p", PLUGIN, "-p", "no:cacheprovider",
         "-q", "-rfEs", f"--junitxml={junit}"],
        cwd=sb3_sdist, env=env, capture_output=True, text=True, timeout=SUITE_TIMEOUT)
    log = f"{run.stdout[-6000:]}\n{run.stderr[-3000:]}"
    assert junit.exists(), log
    counts = _outcomes(junit)
    summary = ", ".join(f"{name}: {dict(counts[name])}" for name in IDS)
    subproc, fast = (counts[name] for name in IDS)
    # Every SB3 test that uses SubprocVecEnv ran on FastSubprocVecEnv too.
    assert sum(fast.values()) == sum(subproc.values()) > 0, summary
    assert fast["failed"] == subproc["failed"] == 0, f"{summary}\n{log}"
    assert fast["skipped"] == subproc["skipped"], summary  # skipped alike (no X server)
    assert run.returncode == 0, f"{summary}\n{log}"
    print(f"SB3's tests of {len(files)} files: {summary}")
