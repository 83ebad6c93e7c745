"""How close can a lockstep vector env get to the machine's ceiling? A floor, measured.

A synchronous ``FastVectorEnv.step`` of ``n`` envs spread over ``W`` workers
cannot take less than

    E[max over workers of the sum of its envs' step times]   (the slowest worker)
  + the step's fixed cost                                     (everything else)

The first term is measured from the env's own step times in a plain loop in
this process (resampled into ``W`` workers' sums). The fixed cost is measured
as ``FastVectorEnv.step`` over *replay envs*: envs with the workload's spaces
that return one recorded step (copies of its observation and info), less the
replay envs' own steps (timed in a plain loop: any env makes its observation
and info), for the busiest worker. It holds the trainer's Python, the two
hand-offs and the workers' Python per env, with the workload's own
observation and info. For reference, the bare
native hand-off (post a job to each worker, wait for all, no Python work in
the workers) is measured too.

The ceiling (``alf-env-bench``'s ``ceiling`` row) steps one env per usable CPU
in a plain loop, so the best fraction of it a lockstep step can reach is

    bound = (n / cpus) * mean step time / (E[max] + fixed cost)

and a target fraction ``t`` needs a fixed cost of at most
``(n / cpus) * mean / t - E[max]``.

``FastParallelEnvironment`` has to return a ``TimeStep`` of torch tensors and
take torch actions; ``FastVectorEnv`` returns numpy arrays. The conversions
that contract needs and ``FastVectorEnv`` does not (``torch.from_numpy`` of
every time-step leaf, ``Tensor.numpy()`` of every action leaf, packing the
``TimeStep``) are timed on the workload's own specs; with ``T`` the measured
``FastVectorEnv.step`` on the real env, no ``FastParallelEnvironment`` can do
better than ``T / (T + conversions)`` of it, however lean its workers are.

Run:  python benchmarks/lockstep_floor.py [--workload HalfCheetah-v5,CartPole-v1]
      [--num-envs 8] [--steps N] [--repeats R] [--drop-info] [--json FILE]
"""

import argparse
import json
import multiprocessing
import statistics
import sys
import time
from typing import Any, Callable, Dict, List, Optional, Tuple

import gymnasium as gym
import numpy as np

from alf_env import _penv
from alf_env.bench.backends import env_fns
from alf_env.bench.core import Actions
from alf_env.bench.references import plain_loop
from alf_env.bench.report import markdown_table
from alf_env.bench.workloads import make_env
from alf_env.control_plane.affinity import usable_cpu_count
from alf_env.data_plane.shared_block import SPIN_ADAPTIVE, SharedBlock
from alf_env.front_ends.gym.startup import plan_workers

#: The project's targets for the two ratios this script bounds.
CEILING_TARGET = 0.85
FAST_PARALLEL_TARGET = 0.9
#: Resampled worker sums for E[max] (the estimate's error is far below 0.1 µs).
STRAGGLE_SAMPLES = 200_000
WARMUP = 300


class ReplayEnv(gym.Env):
    """An env with a workload's spaces that answers every step with one recorded
    step (copies of its observation and info), at almost no cost.

    Args:
        observation_space, action_space: the workload's spaces.
        observation, reward, info: the recorded step.
    """

    def __init__(self, observation_space: gym.Space, action_space: gym.Space,
                 observation: Any, reward: float, info: Dict[str, Any]) -> None:
        self.observation_space = observation_space
        self.action_space = action_space
        self._observation = observation
        self._reward = float(reward)
        self._info = info

    def reset(self, *, seed: Optional[int] = None,
              options: Optional[Dict[str, Any]] = None) -> Tuple[Any, Dict[str, Any]]:
        super().reset(seed=seed)
        return self._observation.copy(), dict(self._info)

    def step(self, action: Any) -> Tuple[Any, float, bool, bool, Dict[str, Any]]:
        return self._observation.copy(), self._reward, False, False, dict(self._info)


class ReplayFactory:
    """A picklable constructor of :class:`ReplayEnv` for one recorded step
    (``drop_info``: replay an empty info instead of the recorded one)."""

    def __init__(self, workload: str, action: Any, drop_info: bool = False) -> None:
        env = make_env(workload, 0)
        try:
            env.reset(seed=0)
            observation, reward, _, _, info = env.step(action)
            self.args = (env.observation_space, env.action_space, observation, reward,
                         {} if drop_info else info)
        finally:
            env.close()

    def __call__(self) -> ReplayEnv:
        return ReplayEnv(*self.args)


def env_step_times(make: Callable[[], gym.Env], actions: List[np.ndarray],
                   steps: int) -> np.ndarray:
    """Seconds of each of ``steps`` steps of one env in the ceiling's plain
    loop (a reset after an episode's end counts as a step), timed one by one."""
    env = make()
    clock = time.perf_counter
    times = np.empty(steps)
    try:
        env.reset(seed=0)
        done = False
        for i in range(-WARMUP, steps):
            begin = clock()
            done = plain_loop(env, actions, i, 1, done)
            if i >= 0:
                times[i] = clock() - begin
    finally:
        env.close()
    return times


def expected_slowest(times: np.ndarray, group_sizes: List[int], seed: int = 0) -> float:
    """E[max over workers of the sum of its envs' step times], resampling ``times``
    (``group_sizes[w]``: envs of worker ``w``)."""
    rng = np.random.default_rng(seed)
    sums = np.stack([rng.choice(times, size=(STRAGGLE_SAMPLES, size)).sum(axis=1)
                     for size in group_sizes])
    return float(sums.max(axis=0).mean())


def vector_step_seconds(env_fns: List[Any], batches: List[np.ndarray], steps: int) -> float:
    """Mean seconds of a synchronous ``FastVectorEnv.step`` (default arguments),
    cycling through ``batches`` of actions."""
    from alf_env.vector import FastVectorEnv

    env = FastVectorEnv(env_fns)
    n = len(batches)
    try:
        env.reset(seed=0)
        for i in range(WARMUP):
            env.step(batches[i % n])
        begin = time.perf_counter()
        for i in range(steps):
            env.step(batches[i % n])
        return (time.perf_counter() - begin) / steps
    finally:
        env.close()


def _bare_worker(block: SharedBlock, index: int) -> None:
    port = block.worker_port(index, SPIN_ADAPTIVE, False)
    while True:
        job, _ = port.wait_job(1.0)
        if job == _penv.JobType.STEP:
            port.finish(_penv.JobStatus.OK)
        elif job == _penv.JobType.CLOSE:
            port.finish(_penv.JobStatus.OK)
            return


def native_hand_off_seconds(num_workers: int, steps: int) -> float:
    """Mean seconds of posting a STEP job to ``num_workers`` workers that do
    nothing but report it finished, and waiting for all of them."""
    block = SharedBlock([("x", (1,), np.float32)], num_rows=num_workers,
                        num_workers=num_workers)
    # The control block is initialised by the controller, before workers attach.
    controller = block.controller(SPIN_ADAPTIVE, workers_spread=False)
    context = multiprocessing.get_context("fork")
    procs = [context.Process(target=_bare_worker, args=(block, i), daemon=True)
             for i in range(num_workers)]
    workers = list(range(num_workers))

    def round_trip(job: Any = _penv.JobType.STEP) -> None:
        controller.post(workers, job, 0)
        status, _ = controller.wait(num_workers, 10.0)
        if status != _penv.WaitStatus.OK:
            raise RuntimeError(f"bare hand-off: the wait ended with {status}")

    try:
        for i, proc in enumerate(procs):
            proc.start()
            controller.set_worker_pid(i, proc.pid)
        for _ in range(WARMUP):
            round_trip()
        begin = time.perf_counter()
        for _ in range(steps):
            round_trip()
        seconds = (time.perf_counter() - begin) / steps
        round_trip(_penv.JobType.CLOSE)
        return seconds
    finally:
        for proc in procs:
            if proc.pid is not None:
                proc.join(10)
                if proc.is_alive():
                    proc.kill()
                    proc.join()
        block.close()


def torch_conversion_seconds(workload: str, num_envs: int, steps: int) -> float:
    """Mean seconds, per step of ``num_envs`` envs, of what a ``TimeStep`` of
    torch tensors costs beyond numpy arrays: ``Tensor.numpy()`` of each action
    leaf, ``torch.from_numpy`` of each time-step leaf, and packing the nest."""
    import torch

    from alf_env import nest
    from alf_env.environments.alf_gym_wrapper import AlfGymWrapper
    from alf_env.nest_compiled import compile_nest

    env = AlfGymWrapper(make_env(workload, 0), env_id=0)
    try:
        time_step_spec, action_spec = env.time_step_spec(), env.action_spec()
    finally:
        env.close()
    leaves = [np.zeros((num_envs,) + tuple(s.shape), s.numpy_dtype)
              for s in nest.flatten(time_step_spec)]
    action_leaves = [torch.zeros((num_envs,) + tuple(s.shape), dtype=s.dtype)
                     for s in nest.flatten(action_spec)]
    pack = compile_nest(time_step_spec)[1]
    from_numpy = torch.from_numpy

    def convert() -> None:
        for action in action_leaves:
            action.numpy()
        pack([from_numpy(x) for x in leaves])

    for _ in range(WARMUP):
        convert()
    begin = time.perf_counter()
    for _ in range(steps):
        convert()
    return (time.perf_counter() - begin) / steps


def floor_of(workload: str, num_envs: int, steps: int,
             drop_info: bool = False) -> Dict[str, float]:
    """One measurement of every term (µs) and the two bounds, for ``workload``
    (``drop_info``: the replay envs return empty infos, i.e. the fixed cost
    if infos cost nothing)."""
    cpus = usable_cpu_count()
    actions = Actions.make(workload, num_envs)
    groups = [end - begin for begin, end in plan_workers(num_envs, num_envs, None, None)]
    times = env_step_times(env_fns(workload, 1)[0], actions.per_env(), steps * 4)
    mean_step = float(times.mean())
    slowest = expected_slowest(times, groups)
    replay = ReplayFactory(workload, actions.numpy[0][0], drop_info)
    # The replay envs' own steps (copying the observation and the info) are
    # part of any env's step: the fixed cost leaves them out.
    replay_step = float(env_step_times(replay, actions.per_env(), steps * 4).mean())
    fixed = (vector_step_seconds([replay] * num_envs, actions.numpy, steps)
             - max(groups) * replay_step)
    hand_off = native_hand_off_seconds(len(groups), steps)
    real = vector_step_seconds(env_fns(workload, num_envs), actions.numpy, steps)
    torch_cost = torch_conversion_seconds(workload, num_envs, steps)
    per_ceiling = num_envs / cpus * mean_step  # the ceiling's time for num_envs env-steps
    us = 1e6
    return {
        "cpus": cpus, "workers": len(groups), "env_step_us": mean_step * us,
        "env_step_std_us": float(times.std()) * us,
        "slowest_worker_us": slowest * us,
        "straggle_us": (slowest - max(groups) * mean_step) * us,
        "replay_step_us": replay_step * us, "fixed_us": fixed * us,
        "native_hand_off_us": hand_off * us,
        "ceiling_bound": per_ceiling / (slowest + fixed),
        "fixed_needed_us": (per_ceiling / CEILING_TARGET - slowest) * us,
        "fast_vector_step_us": real * us,
        "fast_vector_ceiling": per_ceiling / real,
        "torch_conversions_us": torch_cost * us,
        "fast_parallel_bound": real / (real + torch_cost),
    }


def _spread(runs: List[float], fmt: str) -> str:
    return f"{statistics.median(runs):{fmt}} ({min(runs):{fmt}}–{max(runs):{fmt}})"


def report(results: Dict[str, List[Dict[str, float]]], num_envs: int, out: Any,
           drop_info: bool = False) -> None:
    """Writes the Markdown tables (median (min–max) over repeats)."""
    floors, torch_rows = [], []
    for workload, runs in results.items():
        col = {k: [r[k] for r in runs] for k in runs[0]}
        floors.append([workload, f"{runs[0]['workers']:g}"] + [
            _spread(col[k], fmt) for k, fmt in (
                ("env_step_us", ".1f"), ("slowest_worker_us", ".1f"), ("straggle_us", ".1f"),
                ("fixed_us", ".1f"), ("native_hand_off_us", ".1f"), ("ceiling_bound", ".2f"),
                ("fixed_needed_us", ".1f"), ("fast_vector_ceiling", ".2f"))])
        torch_rows.append([workload] + [_spread(col[k], fmt) for k, fmt in (
            ("fast_vector_step_us", ".1f"), ("torch_conversions_us", ".2f"),
            ("fast_parallel_bound", ".3f"))])
    out.write(f"Lockstep floor, {num_envs} envs, FastVectorEnv default arguments"
              f"{', replay envs with empty infos' if drop_info else ''} "
              "(µs per step; median (min–max) over repeats)\n\n")
    out.write(markdown_table(
        ["workload", "workers", "env step", "slowest worker E[max]", "straggle",
         "fixed cost (replay envs)", "of it, bare hand-off",
         f"bound on fast_vector/ceiling (target {CEILING_TARGET:g})",
         f"fixed cost for {CEILING_TARGET:g}", "measured fast_vector/ceiling"], floors))
    out.write("\n\nWhat a TimeStep of torch tensors costs beyond FastVectorEnv's numpy "
              "(µs per step)\n\n")
    out.write(markdown_table(
        ["workload", "FastVectorEnv.step", "torch conversions",
         f"bound on fast/fast_vector (target {FAST_PARALLEL_TARGET:g})"], torch_rows))
    out.write("\n")


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workload", default="HalfCheetah-v5,CartPole-v1",
                        help="comma-separated workloads (alf-env-bench names)")
    parser.add_argument("--num-envs", type=int, default=8)
    parser.add_argument("--steps", type=int, default=5000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--drop-info", action="store_true",
                        help="replay empty infos: the fixed cost if infos cost nothing")
    parser.add_argument("--json", default=None, help="also write the results here")
    args = parser.parse_args(argv)
    results = {w: [floor_of(w, args.num_envs, args.steps, args.drop_info)
                   for _ in range(args.repeats)]
               for w in args.workload.split(",")}
    if args.json:  # every measurement, before the summary
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)
    report(results, args.num_envs, sys.stdout, args.drop_info)
    return 0


if __name__ == "__main__":
    sys.exit(main())
