"""``alf-env-bench --env ... --tune`` (:mod:`alf_env.bench.tune`): the layouts it tries,
the one it picks, and what it prints, on a user's own env module."""

import json
import os
import subprocess
import sys
import textwrap

import pytest

from alf_env.bench import cli, tune
from alf_env.bench.backends import display_name
from alf_env.bench.report import NOISE_NOTE
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
        "FastVectorEnv(env_fns, num_workers=2, batch_size=4)  # EnvPool-style: send() / recv()")
    assert Layout(2, "spread").name == "FastVectorEnv (2 workers, spread)"
    assert Layout(1).name == "FastVectorEnv (1 worker)"


def test_choose_ranks_layouts_and_alternatives_by_the_geometric_mean_over_conditions():
    rates = {"a": [[100.0], [10.0]], "b": [[60.0], [30.0]], "c": [[], [50.0]],
             "gym_sync": [[20.0], [20.0]], "ceiling": [[400.0], [40.0]]}
    choice = choose(rates, ["a", "b", "c"], ["gym_sync"])
    assert choice.best == "b" and choice.runner_up == "a"  # sqrt(1800) > sqrt(1000)
    assert choice.margin == pytest.approx((1800 / 1000) ** 0.5)
    assert not choice.clear  # "a" beat it on the quiet machine
    assert choice.best_layout == "b" and choice.layout_ratio == 1.0
    assert choice.over_sync == pytest.approx((1800 / 400) ** 0.5)
    with pytest.raises(RuntimeError, match="no layout could be measured"):
        choose({"a": [[]]}, ["a"])


    rates["b"] = [[160.0, 170.0], [30.0, 31.0]]
    rates["a"] = [[100.0, 150.0], [10.0, 29.0]]
    assert choose(rates, ["a", "b", "c"], ["gym_sync"]).clear  # ahead in every condition


LAYOUTS = [Layout(1), Layout(2), Layout(2, "spread"), Layout(2, "auto", 4)]
ONE, TWO, SPREAD, HALF = (layout.name for layout in LAYOUTS)


def tuned(rates, conditions=(0,), workload="CartPole-v1"):
    """A tuning run's report from synthetic measurements (3 repeats each)."""
    full = {name: [[]] * len(conditions) for name in [*(lay.name for lay in LAYOUTS),
                                                     *tune.REFERENCES]}
    full.update(rates)
    return tune.summary(workload, 8, 2, 4.4, list(conditions), 0.6, LAYOUTS, tune.REFERENCES,
                        full)


def printed(result) -> str:
    out = tune.report(result)
    assert [line for line in out.splitlines() if len(line) > 100] == []
    return out


def one_line(text: str) -> str:
    return " ".join(text.split())


def long_name(name: str) -> str:
    """How the recommendation names a layout or an alternative."""
    return "gymnasium's SyncVectorEnv" if name == "gym_sync" else display_name(name)


def test_sync_vector_env_is_recommended_when_it_is_fastest_and_no_slower_line_is_fastest():
    out = printed(tuned({ONE: [[30_000, 31_000, 29_000]], TWO: [[48_000, 49_000, 47_000]],
                         "gym_sync": [[59_000, 61_000, 57_000]],
                         "ceiling": [[178_000, 170_000, 180_000]]}))
    text = one_line(out)
    assert ("Fastest: gymnasium's SyncVectorEnv, 1.23x the runner-up FastVectorEnv (2 workers). "
            "Repeats: 57.0k - 61.0k against 47.0k - 49.0k env-steps/s. Use it:") in text
    assert "\n    gymnasium.vector.SyncVectorEnv(env_fns)\n" in out
    assert text.count("Fastest") == 1
    # alf_env's best layout, for those who need a worker process per env, and how much slower.
    assert "if you need that, its best layout here, at 0.81x SyncVectorEnv:" in text
    assert out.index("SyncVectorEnv(env_fns)") < out.index("    FastVectorEnv(env_fns, "
                                                          "num_workers=2)\n")
    # The table: fastest first, each figure with the spread of its repeats.
    table = [line for line in out.splitlines() if line.startswith("| ")]
    assert [c.strip() for c in table[1].strip("|").split("|")] == ["ceiling",
                                                                  "178k (170k - 180k)"]
    assert [c.strip() for c in table[2].strip("|").split("|")] == ["SyncVectorEnv",
                                                                  "59.0k (57.0k - 61.0k)"]
    assert "Reference row: ceiling = one env per CPU" in text


def test_overlapping_repeats_give_no_clear_winner_and_both_lines():
    out = printed(tuned({TWO: [[48_000, 49_000, 47_000]], SPREAD: [[45_000, 46_000, 44_000]],
                         "gym_sync": [[47_500, 48_500, 46_000]]}))
    text = one_line(out)
    assert ("No clear winner: the repeats of FastVectorEnv (2 workers) and SyncVectorEnv overlap "
            "(47.0k - 49.0k against 46.0k - 48.5k env-steps/s); either will do:") in text
    assert "Fastest" not in text
    assert ("\n    FastVectorEnv(env_fns, num_workers=2)\n"
            "    gymnasium.vector.SyncVectorEnv(env_fns)\n") in out


def test_a_layout_that_wins_clearly_is_the_line_to_paste_with_its_margins():
    out = printed(tuned({TWO: [[48_000, 49_000, 47_000]], SPREAD: [[45_000, 46_000, 44_000]],
                         "gym_sync": [[30_000, 31_000, 29_000]],
                         "ceiling": [[47_500, 47_000, 48_000]]}))
    text = one_line(out)
    assert ("Fastest: FastVectorEnv (2 workers), 1.07x the runner-up FastVectorEnv (2 workers, "
            "spread). Repeats: 47.0k - 49.0k against 44.0k - 46.0k env-steps/s. It is 1.60x "
            "gymnasium's SyncVectorEnv. Use it:") in text
    assert out.endswith("\n    FastVectorEnv(env_fns, num_workers=2)\n")
    # Its median is above the ceiling's: marked, with the footnote.
    row = next(line for line in out.splitlines() if line.startswith("| FastVectorEnv (2 "
                                                                     "workers) "))
    assert "48.0k * (47.0k - 49.0k)" in row
    assert NOISE_NOTE in out


def test_envpool_winning_gives_its_line_and_alf_envs_best_layout():
    out = printed(tuned({TWO: [[48_000, 49_000, 47_000]], "gym_sync": [[30_000, 31_000, 29_000]],
                         "envpool": [[83_000, 84_000, 82_000]]}))
    text = one_line(out)
    assert "Fastest: EnvPool, 1.73x the runner-up FastVectorEnv (2 workers)." in text
    assert "\n    envpool.make_gymnasium('CartPole-v1', num_envs=8)\n" in out
    assert "alf_env's best layout here, at 0.58x EnvPool:" in text


def test_with_a_load_a_clear_winner_must_lead_in_both_conditions():
    rates = {TWO: [[48_000, 49_000, 47_000], [20_000, 21_000, 19_000]],
             SPREAD: [[45_000, 46_000, 44_000], [20_500, 21_500, 18_000]]}
    out = printed(tuned(rates, conditions=(0, 2)))
    text = one_line(out)
    assert ("No clear winner: the repeats of FastVectorEnv (2 workers) and FastVectorEnv "
            "(2 workers, spread) overlap (47.0k - 49.0k against 44.0k - 46.0k env-steps/s; "
            "19.0k - 21.0k against 18.0k - 21.5k beside 2 busy process(es))") in text
    assert "geometric mean of the medians with and without the load" in text
    header = next(line for line in out.splitlines() if line.startswith("| layout"))
    assert "--load 2 (min - max)" in header


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
    result = json.loads((out / cli.TUNE_JSON).read_text())
    layouts = result["layouts"]
    assert set(layouts) == {layout.name for layout in candidates(4, result["cpus"],
                                                                 result["step_us"])}
    choice = result["choice"]
    # The choice is the best measured median among the layouts and the alternatives one
    # could use instead (one condition here); the ceiling only measures the machine.
    choices = [*layouts, *(r for r in tune.REFERENCES if r not in ("ceiling",))]
    measured = {name: result["scores"][name][0] for name in choices
                if result["scores"][name][0] is not None}
    assert choice["best"] == max(measured, key=measured.get)
    assert "gym_sync" in measured  # SyncVectorEnv always runs
    text = " ".join(proc.stdout.split())
    lines = {**{name: layout["constructor"] for name, layout in layouts.items()},
             **result["reference_lines"]}
    assert f"\n    {lines[choice['best']]}\n" in proc.stdout
    if choice["clear"]:
        assert f"Fastest: {long_name(choice['best'])}, " in text and "Repeats: " in text
    else:
        assert "No clear winner: the repeats of " in text and "Fastest" not in text
        assert f"\n    {lines[choice['runner_up']]}\n" in proc.stdout
    assert f"\n    {layouts[choice['best_layout']]['constructor']}\n" in proc.stdout
    assert [line for line in proc.stdout.splitlines() if len(line) > 100] == []
    assert "[" in proc.stderr  # the progress bar


def test_env_alone_compares_the_env_with_the_usual_alternatives():
    args = cli.parse_args(["--env", "CartPole-v1"])
    assert args.workloads == ["CartPole-v1"] and args.backends == list(cli.ENV_BACKENDS)
    assert cli.cases_of(args) == [("CartPole-v1", cli.ENV_NUM_ENVS)]
    assert tune.DEFAULT_BUDGET_S == args.budget_s
