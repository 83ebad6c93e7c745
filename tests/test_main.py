"""Tests of the README's main job, ``python -m alf_env``."""

import re
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]


def test_main_job_prints_throughput():
    out = subprocess.run(
        [sys.executable, "-m", "alf_env", "--num-envs", "2", "--steps", "50",
         "--backend", "parallel"],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=120, check=True).stdout
    assert "CartPole-v1: 2 envs in worker processes (ParallelAlfEnvironment, fork)" in out
    match = re.search(r"100 env-steps in [\d.]+ s = ([\d,]+) env-steps/s", out)
    assert match, out
    assert int(match.group(1).replace(",", "")) > 0
