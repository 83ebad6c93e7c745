"""The scripts in examples/ run as their docstrings say, on small settings."""

import re
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import List

REPO_ROOT = Path(__file__).resolve().parents[1]


def run_example(name: str, *args: str) -> str:
    proc = subprocess.run([sys.executable, str(REPO_ROOT / "examples" / name), *args],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_alf_rollout_loop_trains_on_fast_parallel_environment():
    out = run_example("alf_rollout.py", "--num-envs", "2", "--unroll-length", "32",
                      "--iterations", "4")
    iterations = re.findall(r"^iteration +(\d+): +(\d+) episodes", out, re.M)
    assert [int(i) for i, _ in iterations] == [1, 2, 3, 4]
    episodes = [int(n) for _, n in iterations]
    assert episodes == sorted(episodes)
    # 256 env-steps of a random CartPole policy end several episodes.
    match = re.search(r"^done: (\d+) episodes finished$", out, re.M)
    assert match and int(match.group(1)) == episodes[-1] > 0


def test_gym_training_loop_runs_sync_and_async():
    out = run_example("gym_training_loop.py", "--mode", "both", "--num-envs", "4",
                      "--steps", "800", "--episodes-per-update", "4")
    for mode in ("sync", "async"):
        match = re.search(rf"^{mode}: 800 env-steps in [\d.]+ s, (\d+) episodes, "
                          rf"(\d+) updates, mean return of the last \d+: ([\d.]+)$",
                          out, re.M)
        assert match, out
        episodes, updates, mean_return = (int(match.group(1)), int(match.group(2)),
                                          float(match.group(3)))
        assert episodes >= 4 and updates >= 1
        assert 1 <= mean_return <= 500  # CartPole-v1: reward 1 per step, 500 at most


def rst_python_blocks(page: str) -> List[str]:
    """The ``.. code-block:: python`` blocks of a docs page, dedented."""
    text = (REPO_ROOT / "docs" / page).read_text()
    blocks = re.findall(r"^\.\. code-block:: python\n\n((?:(?: {4}.*)?\n)+)", text, re.M)
    return [textwrap.dedent(block) for block in blocks]


def test_quickstart_code_runs():
    blocks = rst_python_blocks("quickstart.rst")
    assert len(blocks) >= 5
    proc = subprocess.run([sys.executable, "-c", "\n".join(blocks)], cwd=REPO_ROOT,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "torch.Size([4, 4]) tensor([0, 1, 2, 3], dtype=torch.int32)" in out
    assert "FastParallelEnvironment 4" in out
    assert "(4, 4) float64" in out
    assert ("The worker process of env 1 died during step: killed by SIGKILL "
            "(signal 9).") in out


def test_migration_code_runs():
    # The "before" blocks need ALF or stable-baselines3; the others must run.
    blocks = [b for b in rst_python_blocks("migration.rst")
              if not re.search(r"^(from|import) (alf\b|stable_baselines3)", b, re.M)]
    assert len(blocks) == 4
    proc = subprocess.run([sys.executable, "-c", "\n".join(blocks)], cwd=REPO_ROOT,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
