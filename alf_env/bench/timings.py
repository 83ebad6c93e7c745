"""``alf-env-bench --env ENV``'s timings breakdown: where a FastVectorEnv's steps spend
their time on this env (``FastVectorEnv.timings()``, docs/simulators.rst, "Where
each step's time goes").

It builds a ``FastVectorEnv`` of the env with the default arguments, steps it
with random actions for a few seconds and prints the figures, with one line
saying how to read them.
"""

import functools
import time

from alf_env.bench import workloads
from alf_env.control_plane.step_timings import StepTimings
from alf_env.front_ends.gym.vector_env import FastVectorEnv

#: Seconds the breakdown steps the env for by default.
DEFAULT_SECONDS = 3.0
#: Untimed steps after reset (the envs' first steps warm caches and allocators).
WARMUP_STEPS = 20

HOW_TO_READ = (
    "How to read it: an env whose step p50 stands far above the others' is the slow "
    "one; a straggler spread close to the wait means the workers wait on the slowest "
    "env (balance the envs, or use batch_size < num_envs to step the first ones "
    "done); a large hand-off means the time goes to waking the workers and reporting "
    "back (fewer workers than CPUs, worker_cpus, or more envs per worker).")


def measure(env: str, num_envs: int, seconds: float = DEFAULT_SECONDS) -> "tuple[StepTimings, int]":
    """Steps a default ``FastVectorEnv`` of ``num_envs`` envs of ``env`` for ``seconds``.

    Args:
        env: a registered gymnasium id or ``module:function`` (as ``--env``).

    Returns:
        ``(timings, steps)``: the figures of the timed steps, and their number.
    """
    vector = FastVectorEnv([functools.partial(workloads.make_env, env, i)
                            for i in range(num_envs)])
    try:
        vector.action_space.seed(0)
        vector.reset(seed=0)
        for _ in range(WARMUP_STEPS):
            vector.step(vector.action_space.sample())
        vector.timings()  # counts from here
        steps = 0
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            vector.step(vector.action_space.sample())
            steps += 1
        return vector.timings(), steps
    finally:
        vector.close()


def report(env: str, num_envs: int, timings: StepTimings, steps: int) -> str:
    """The breakdown as printed: a title, the table and how to read it."""
    return (f"\nWhere each step's time goes: FastVectorEnv of {num_envs} x {env}, "
            f"{steps} random steps (FastVectorEnv.timings())\n\n"
            f"{timings.table()}\n\n{HOW_TO_READ}\n")
