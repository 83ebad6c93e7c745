"""``alf-env-bench --env ... --tune`` (:mod:`alf_env.bench.tune`): the layouts it tries,
the one it picks, and what it prints, on a user's own env module."""

import json
import os
import subprocess
import sys
import textwrap

import pytest

from alf_env.bench import cli, tune
from alf_env.bench.tune import Layout, candidates, choose
from tests.support.paths import REPO_ROOT


def test_cheap_envs_get_up_to_one_worker_per_cpu_with_each_placement_and_mode():
    names = [layout.kwargs() for layout in candidates(8, cpus=2, step_us=20.0)]
    assert names == [{"num_workers": 1},
                     {"num_workers": 2}, {"num_workers": 2, "worker_cpus": "spread"},
                     {"num_workers": 2, "batch_size": 4}]


def test_slow_envs_also_get_one_worker_per_env():
    layouts = candidates(8, cpus=2, step_us=5000.0)
    assert Layout(8, "auto") in layouts and Layout(8, "spread") in layouts
    assert Layout(8, "auto", 4) in layouts
    assert all(layout.num_workers in (1, 2, 8) for layout in layouts)


def test_one_cpu_tries_no_placement_and_the_async_mode_needs_whole_workers():
    assert candidates(4, cpus=1, step_us=20.0) == [Layout(1, "auto")]
    assert candidates(3, cpus=4, step_us=20.0) == [Layout(1, "auto"), Layout(3, "auto"),
                                                   Layout(3, "auto", 1)]
    assert Layout(3, "auto", 3) not in candidates(6, cpus=3, step_us=20.0)  # 3 of 3 x 2


def test_constructor_lines_are_what_a_user_pastes():
    assert Layout(2, None).constructor() == (
        "FastVectorEnv(env_fns, num_workers=2, worker_cpus=None)")
    assert Layout(2, "auto", 4).constructor() == (
        "FastVectorEnv(env_fns, num_workers=2, batch_size=4)  # EnvPool-style: drive it "
        "with send() / recv()")


def test_choose_takes_the_best_geometric_mean_over_conditions_among_layouts_only():
    scores = {"a": [100.0, 10.0], "b": [60.0, 30.0], "c": [None, 50.0],
              "gym_sync": [200.0, 20.0], "ceiling": [400.0, 40.0]}
    choice = choose(scores, ["a", "b", "c"])
    assert choice.best == "b" and choice.runner_up == "a"  # sqrt(1800) > sqrt(1000)
    assert choice.margin == pytest.approx((1800 / 1000) ** 0.5)
    assert choice.over_sync == pytest.approx((1800 / 4000) ** 0.5)
    with pytest.raises(RuntimeError, match="no layout could be measured"):
        choose({"a": [None]}, ["a"])


MODULE = textwrap.dedent('''
    import gymnasium as gym

    def make_env():
        return gym.make("CartPole-v1")
''')


def test_tune_on_a_module_of_the_users_prints_the_fastest_layout_as_a_constructor(tmp_path):
    package = tmp_path / "userpkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "envs.py").write_text(MODULE)
    out = tmp_path / "out"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), str(REPO_ROOT)]))
    proc = subprocess.run(
        [sys.executable, "-m", "alf_env.bench", "--env", "userpkg.envs:make_env", "--tune",
         "--num-envs", "4", "--budget-s", "4", "--out", str(out)],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    tuned = json.loads((out / cli.TUNE_JSON).read_text())
    layouts = tuned["layouts"]
    assert set(layouts) == {layout.name for layout in candidates(4, tuned["cpus"],
                                                                 tuned["step_us"])}
    best = tuned["choice"]["best"]
    # The choice is the layout with the best measured median (one condition here).
    measured = {name: tuned["scores"][name][0] for name in layouts
                if tuned["scores"][name][0] is not None}
    assert best == max(measured, key=measured.get)
    assert f"    {layouts[best]['constructor']}\n" in proc.stdout
    assert "x gymnasium's SyncVectorEnv" in proc.stdout
    assert "[" in proc.stderr  # the progress bar


def test_env_alone_compares_the_env_with_the_usual_alternatives():
    args = cli.parse_args(["--env", "CartPole-v1"])
    assert args.workloads == ["CartPole-v1"] and args.backends == list(cli.ENV_BACKENDS)
    assert cli.cases_of(args) == [("CartPole-v1", cli.ENV_NUM_ENVS)]
    assert tune.DEFAULT_BUDGET_S == args.budget_s
