"""Where a lockstep step of ``FastVectorEnv`` spends its time, quiet, beside a busy
process and with a policy in the loop.

For each condition, in a fresh process, this builds a ``FastVectorEnv`` of the
workload (8 envs, default arguments), steps it ``--warmup`` times untimed and then
for ``--seconds``, and records the trainer's time in each ``step`` and the front
end's own ``timings()`` of the timed steps (docs/simulators.rst, "Where each step's
time goes"): the batch wait, the straggler spread, the hand-off and the slowest
env's step. It also times the front end's park of torch's OpenMP pool before a step
and its release after (``PoolPark.before_step`` and ``after_step``, wrapped: two
clock readings each), which only steps after a forward pass pay. The conditions:

* ``quiet``: nothing else runs;
* ``busy``: one busy-loop process beside it (``alf-env-bench --load 1``);
* ``policy``: the bench's MLP forward pass on the observations before each step,
  torch at its default threads (``--policy mlp``).

The conditions run in turn, ``--repeats`` times. Printed, per workload, condition
and repeat: p50 and p99 in µs; written (``--json``): every repeat's figures.

Run:  python benchmarks/step_timeline.py [--workload HalfCheetah-v5 ...] [--seconds 5]
      [--warmup 1500] [--repeats 3] [--json out.json]
      (``--workload`` repeats; the JSON has one entry per workload and the command)
"""

import argparse
import functools
import json
import subprocess
import sys
import time
from typing import Any, Dict, List, Optional

import numpy as np

CONDITIONS = ("quiet", "busy", "policy")
NUM_ENVS = 8
#: The figures of one condition, in the order they are printed.
FIGURES = ("step p50", "step p99", "wait p50", "wait p99", "hand-off p50", "hand-off p99",
           "spread p50", "slowest env step p50", "park p50", "release p50")


class _TimedPool:
    """Wraps a front end's ``PoolPark`` so that its park and release are timed (ns)."""

    def __init__(self, pool: Any) -> None:
        self.park_ns: List[int] = []
        self.release_ns: List[int] = []
        before, after = pool.before_step, pool.after_step

        def before_step() -> bool:
            begin = time.perf_counter_ns()
            parked = before()
            if parked:
                self.park_ns.append(time.perf_counter_ns() - begin)
            return parked

        def after_step(parked: bool) -> None:
            begin = time.perf_counter_ns()
            after(parked)
            if parked:
                self.release_ns.append(time.perf_counter_ns() - begin)
        pool.before_step, pool.after_step = before_step, after_step

    def figures(self) -> Dict[str, Optional[float]]:
        """p50 µs of the park and of the release (``None`` when no step parked)."""
        return {name: float(np.percentile(ns, 50)) / 1e3 if ns else None
                for name, ns in (("park p50", self.park_ns), ("release p50", self.release_ns))}


def measure(workload: str, condition: str, seconds: float,
            warmup: int) -> Dict[str, Optional[float]]:
    """The :data:`FIGURES` (µs; ``None``: not measured) of ``workload``'s steps in
    ``condition``, and the number of ``steps`` timed (in this process)."""
    from alf_env.bench.loads import BusyLoad, make_policy
    from alf_env.bench.workloads import make_env
    from alf_env.vector import FastVectorEnv

    if condition not in CONDITIONS:
        raise ValueError(f"condition: expected one of {', '.join(CONDITIONS)}, got {condition!r}")
    policy = make_policy("mlp" if condition == "policy" else "none", None)
    with BusyLoad(1 if condition == "busy" else 0):
        env = FastVectorEnv([functools.partial(make_env, workload, i) for i in range(NUM_ENVS)])
        try:
            env.action_space.seed(0)
            actions = [env.action_space.sample() for _ in range(64)]
            obs, _ = env.reset(seed=0)
            for k in range(warmup):
                if policy is not None:
                    policy(obs)
                obs = env.step(actions[k % 64])[0]
            env.timings()  # counts from here
            pool = _TimedPool(env._engine.board._pool)  # type: ignore[attr-defined]
            steps: List[int] = []
            end = time.monotonic() + seconds
            while time.monotonic() < end:
                if policy is not None:
                    policy(obs)
                begin = time.perf_counter_ns()
                obs = env.step(actions[len(steps) % 64])[0]
                steps.append(time.perf_counter_ns() - begin)
            timings = env.timings()
        finally:
            env.close()
    step_us = np.asarray(steps) / 1e3
    slowest = timings.slowest_env()
    assert slowest is not None  # the timed steps stepped every env
    return {"step p50": float(np.percentile(step_us, 50)),
            "step p99": float(np.percentile(step_us, 99)),
            "wait p50": timings.wait.p50_us, "wait p99": timings.wait.p99_us,
            "hand-off p50": timings.handoff.p50_us, "hand-off p99": timings.handoff.p99_us,
            "spread p50": timings.spread.p50_us,
            "slowest env step p50": timings.envs[slowest].p50_us,
            **pool.figures(), "steps": float(len(steps))}


def _in_fresh_process(workload: str, condition: str, args: argparse.Namespace
                      ) -> Dict[str, Any]:
    done = subprocess.run(
        [sys.executable, __file__, "--child", condition, "--workload", workload,
         "--seconds", str(args.seconds), "--warmup", str(args.warmup)],
        capture_output=True, text=True, check=False, timeout=600)
    if done.returncode != 0:
        raise RuntimeError(f"{workload}, {condition} failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _us(value: Optional[float]) -> str:
    return "-" if value is None else f"{value:.1f}"


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workload", action="append", default=None,
                        help="a workload (repeat for more; default HalfCheetah-v5 and CartPole-v1)")
    parser.add_argument("--seconds", type=float, default=5.0, help="timed seconds per condition")
    parser.add_argument("--warmup", type=int, default=1500, help="untimed steps first")
    parser.add_argument("--repeats", type=int, default=3, help="runs of each condition")
    parser.add_argument("--child", choices=CONDITIONS, help=argparse.SUPPRESS)
    parser.add_argument("--json", default=None, help="also write the figures to this file")
    args = parser.parse_args(argv)
    workloads = args.workload or ["HalfCheetah-v5", "CartPole-v1"]
    if args.child:
        print(json.dumps(measure(workloads[0], args.child, args.seconds, args.warmup)))
        return 0
    out: Dict[str, Any] = {}
    for workload in workloads:
        for repeat in range(args.repeats):
            for condition in CONDITIONS:  # in turn: the machine's drift hits each alike
                figures = _in_fresh_process(workload, condition, args)
                out.setdefault(f"{workload}, {condition}", []).append(figures)
                print(f"{workload}, {condition}, repeat {repeat + 1}, {int(figures['steps'])} "
                      "steps: " + ", ".join(f"{name} {_us(figures[name])}" for name in FIGURES)
                      + " (µs)", flush=True)
    if args.json:
        out["command"] = "python benchmarks/step_timeline.py " + " ".join(
            sys.argv[1:] if argv is None else argv)
        with open(args.json, "w") as file:
            json.dump(out, file, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
