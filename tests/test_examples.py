"""The scripts in examples/ run as their docstrings say, on small settings."""

import json
import re
import subprocess
import sys
from typing import Dict

import pytest
import torch

from tests.support.paths import REPO_ROOT


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


def test_ppo_training_smoke(tmp_path):
    out = run_example("ppo_training.py", "--vector-env", "sync", "alf", "alf-epw",
                      "--num-envs", "2", "--envs-per-worker", "2", "--total-steps", "512",
                      "--rollout-steps", "64", "--target-return", "15", "--torch-threads",
                      "default", "1", "--out", str(tmp_path))
    record = json.loads((tmp_path / "ppo_CartPole-v1.json").read_text())
    assert (tmp_path / "ppo_CartPole-v1.png").stat().st_size > 1000
    runs = record["runs"]
    kinds = ["sync", "alf", "alf-epw"]
    assert [run["vector_env"] for run in runs] == kinds * 2
    default_threads = torch.get_num_threads()
    assert [run["torch_threads"] for run in runs] == [default_threads] * 3 + [1] * 3
    for run in runs:
        assert run["env_steps"] == 512 and run["episodes"] > 0
        assert len(run["points"]) == 4  # one (seconds, steps, mean return) per update
        seconds, steps, returns = zip(*run["points"])
        assert list(steps) == [128, 256, 384, 512]
        assert list(seconds) == sorted(seconds) and 0 < seconds[-1] <= run["wall_seconds"]
        assert all(1 <= r <= 500 for r in returns)
    # Same seeds, same actions: every vector env gives the same learning curve.
    assert runs[0]["points"] and all(
        [p[1:] for p in run["points"]] == [p[1:] for p in runs[0]["points"]] for run in runs)
    assert out.count("| vector env | runs | time to return 15 (s) |") == 2
    assert f"torch threads: default ({default_threads} thread(s))" in out
    assert "torch threads: 1 (1 thread(s))" in out
    assert len(re.findall(r"^\| alf-epw \| 1 \| [\d.]+ \| [\d.]+ \| [\d,]+ \| [\d,]+ \|$",
                          out, re.M)) == 2, out
    assert [(row["vector_env"], row["torch_threads_setting"]) for row in record["summary"]] \
        == [(kind, setting) for setting in ("default", 1) for kind in kinds]
    # --summarize: the table for another target and the plot again, from the JSON alone.
    (tmp_path / "ppo_CartPole-v1.png").unlink()
    out = run_example("ppo_training.py", "--summarize", str(tmp_path / "ppo_CartPole-v1.json"),
                      "--target-return", "1000")
    assert "| vector env | runs | time to return 1000 (s) |" in out
    assert out.count("| not reached |") == 6  # CartPole-v1 returns stop at 500
    assert (tmp_path / "ppo_CartPole-v1.png").stat().st_size > 1000


def help_entries(help_text: str) -> Dict[str, str]:
    """``--option`` -> its help text, from argparse's ``--help`` output."""
    entries: Dict[str, str] = {}
    current = None
    for line in help_text.split("options:", 1)[1].splitlines():
        match = re.match(r"^  (-\w, )?(--[\w-]+)(.*)$", line)
        if match:
            # The help text follows the metavar after two spaces, or on the next lines.
            current = match.group(2)
            parts = re.split(r"\s{2,}", match.group(3).strip(), maxsplit=1)
            entries[current] = parts[1] if len(parts) == 2 else ""
        elif current and line.strip():
            entries[current] = (entries[current] + " " + line.strip()).strip()
    return entries


@pytest.mark.parametrize("example", ["alf_rollout.py", "gym_training_loop.py",
                                     "ppo_training.py"])
def test_help_describes_every_option(example):
    source = (REPO_ROOT / "examples" / example).read_text()
    options = re.findall(r"add_argument\(\s*\"(--[\w-]+)\"", source)
    assert len(options) >= 3
    entries = help_entries(run_example(example, "--help"))
    for option in options:
        assert len(entries.get(option, "").split()) >= 3, (
            f"{example} --help: {option} has no help text: {entries.get(option)!r}")
