"""Is every launch of a training loop fast, and every second of it?

A user launches the same training script many times, and a default that is
fast on average but sometimes many times slower is broken. This script runs
the loop of a training script (``alf-env-bench``'s MLP policy's forward pass
on each batch of observations, at torch's default threads unless
``--torch-threads``, then the batched step with the workload's fixed actions)
in fresh processes, each backend in turn, and prints:

* ``--launches N``: N launches of each backend, interleaved (``--warmup`` s,
  then ``--seconds`` s timed). Per backend: the rates sorted, the slowest
  over the median, and the paired ratio to ``SyncVectorEnv`` of the same
  round (median, min-max).
* ``--long S``: ``--runs`` launches of each backend that print their rate in
  every second of S seconds (no warm-up: the first seconds count). Per run:
  the slowest second over the run's median.

Backends: any backend id of ``alf-env-bench`` (its ``--help`` lists them), built
and stepped as the bench does, e.g. ``fast_vector`` (``FastVectorEnv``'s defaults),
``fast_vector_spread`` (its workers pinned one per CPU), ``fast_parallel`` (the bench's
``fast``: ``FastParallelEnvironment``'s defaults over the envs wrapped for ALF),
``gym_sync``, ``gym_async``, ``sb3_subproc`` (stable-baselines3's ``SubprocVecEnv``),
``pufferlib``, ``envpool``; not ``ceiling``, which times a loop of its own. One that
cannot run here (not installed, no version of the workload) is printed as skipped,
with the reason. ``--load N`` runs N busy processes beside every launch (``--apart``:
in a session of their own, like another user's job); ``--policy none`` drops the
forward pass (the bare step loop). ``--tree LABEL=PATH`` (repeatable) runs every
backend once from each source tree (``PATH`` first on the child's ``PYTHONPATH``,
with its own built ``_penv``), named ``backend@LABEL``, and prints each tree's paired
ratio to the first: what a change to alf_env costs.

Run:  python benchmarks/launch_spread.py --workload HalfCheetah-v5 --launches 20
      python benchmarks/launch_spread.py --workload HalfCheetah-v5 --long 60 --runs 5
          [--backends fast_vector,gym_sync] [--num-envs 8] [--torch-threads N]
      python benchmarks/launch_spread.py --workload CartPole-v1 --policy none
          --launches 5 --backends fast_vector --tree base=/tmp/base --tree new=.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from typing import Any, Dict, List, Optional, Sequence

from alf_env.bench.backends import ALIASES, BACKENDS
from alf_env.bench.core import Actions, Skip
from alf_env.bench.loads import BusyLoad, make_policy
from alf_env.bench.measure import with_policy

#: Backends that time a loop of their own (``Runner.timed``): no training loop to run.
SELF_TIMED = ("ceiling",)
CHOICES = [*ALIASES, *(b for b in BACKENDS if b not in SELF_TIMED)]
POLICIES = ("mlp", "none")


def child(workload: str, backend: str, num_envs: int, warmup: float, seconds: float,
          torch_threads: Optional[int], policy_name: str = "mlp") -> List[float]:
    """Env-steps/s of each whole second of ``seconds`` after ``warmup`` s (in this process),
    in alf-env-bench's loop (its build, step and ``--policy``); raises Skip as its build does."""
    policy = make_policy(policy_name, torch_threads)
    entry = BACKENDS[ALIASES.get(backend, backend)]
    runner = entry.build(workload, num_envs, Actions.make(workload, num_envs))
    try:
        step = with_policy(runner.step, policy)
        per_round = runner.env_steps_per_round or num_envs  # the half-batch backends
        k = 0
        end = time.perf_counter() + warmup
        while time.perf_counter() < end:
            step(k)
            k += 1
        rates: List[float] = []
        second_start, rounds = time.perf_counter(), 0
        while len(rates) < seconds:
            step(k)
            k += 1
            rounds += 1
            now = time.perf_counter()
            if now - second_start >= 1.0:
                rates.append(rounds * per_round / (now - second_start))
                second_start, rounds = now, 0
        return rates
    finally:
        runner.close()
        if entry.teardown is not None:
            entry.teardown()


def launch(workload: str, name: str, num_envs: int, warmup: float, seconds: float,
           torch_threads: Optional[int], policy: str = "mlp",
           trees: Optional[Dict[str, str]] = None) -> List[float]:
    """:func:`child` in a fresh process (``name``: a backend, or ``backend@tree``);
    raises Skip with the child's reason."""
    backend, _, label = name.partition("@")
    args = [sys.executable, __file__, "--child", backend, "--workload", workload,
            "--num-envs", str(num_envs), "--warmup", str(warmup), "--seconds", str(seconds),
            "--policy", policy]
    if torch_threads:
        args += ["--torch-threads", str(torch_threads)]
    env = dict(os.environ)
    if label:
        env["PYTHONPATH"] = os.pathsep.join(
            [os.path.abspath((trees or {})[label])] + [p for p in [env.get("PYTHONPATH")] if p])
    done = subprocess.run(args, capture_output=True, text=True, timeout=120 + 2 * seconds,
                          check=False, env=env)
    if done.returncode != 0:
        raise RuntimeError(f"{name} launch failed:\n{done.stderr[-2000:]}")
    out = json.loads(done.stdout.strip().splitlines()[-1])
    if isinstance(out, dict):
        raise Skip(out["skipped"])
    return [float(x) for x in out]


def spread(values: Sequence[float]) -> str:
    """``median (min-max)``."""
    return f"{statistics.median(values):.2f} ({min(values):.2f}-{max(values):.2f})"


def launches(workload: str, backends: Sequence[str], count: int, num_envs: int,
             warmup: float, seconds: float, torch_threads: Optional[int],
             progress: bool = True, policy: str = "mlp", trees: Optional[Dict[str, str]] = None,
             skipped: Optional[Dict[str, str]] = None, per_second: bool = False
             ) -> Dict[str, List[Any]]:
    """Env-steps/s of ``count`` interleaved launches of each backend (``per_second``:
    of each second of each). One that raises Skip is not launched again, and is left
    out, its reason in ``skipped``: it must not end the others' measurement."""
    skipped = {} if skipped is None else skipped
    rates: Dict[str, List[Any]] = {b: [] for b in backends}
    for r in range(count):
        for backend in (b for b in backends if b not in skipped):
            try:
                seconds_rates = launch(workload, backend, num_envs, warmup, seconds,
                                       torch_threads, policy, trees)
            except Skip as skip:
                skipped[backend] = str(skip)
                continue
            rate = sum(seconds_rates) / len(seconds_rates)
            rates[backend].append(seconds_rates if per_second else rate)
            if progress:
                print(f"# launch {r + 1}/{count} {backend}: {rate:,.0f}",
                      file=sys.stderr, flush=True)
    return {b: values for b, values in rates.items() if b not in skipped}


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--child", choices=CHOICES, help=argparse.SUPPRESS)
    parser.add_argument("--workload", default="HalfCheetah-v5")
    parser.add_argument("--backends", default="fast_vector,gym_sync",
                        help="comma-separated ids of alf-env-bench's backends")
    parser.add_argument("--num-envs", type=int, default=8)
    parser.add_argument("--launches", type=int, default=0)
    parser.add_argument("--warmup", type=float, default=3.0)
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--long", type=float, default=0.0)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--torch-threads", type=int, default=None)
    parser.add_argument("--policy", choices=POLICIES, default="mlp",
                        help="the forward pass before each step (none: the bare loop)")
    parser.add_argument("--tree", action="append", default=[], metavar="LABEL=PATH",
                        help="run each backend from this source tree too (repeatable)")
    parser.add_argument("--load", type=int, default=0)
    parser.add_argument("--apart", action="store_true",
                        help="run the --load processes in a session of their own")
    parser.add_argument("--json", default=None, help="also write the figures to this file")
    args = parser.parse_args(argv)
    if args.child:
        try:
            print(json.dumps(child(args.workload, args.child, args.num_envs, args.warmup,
                                   args.seconds, args.torch_threads, args.policy)))
        except Skip as skip:
            print(json.dumps({"skipped": str(skip)}))
        return 0
    trees: Dict[str, str] = {}
    for item in args.tree:
        label, sep, path = item.partition("=")
        if not sep or not label or not os.path.isdir(os.path.join(path, "alf_env")):
            parser.error(f"--tree {item!r}: expected LABEL=PATH of a source tree "
                         f"holding alf_env/")
        trees[label] = path
    backends = args.backends.split(",")
    for backend in backends:
        if backend not in CHOICES:
            why = ("times a loop of its own, no training loop" if backend in SELF_TIMED
                   else "unknown")
            parser.error(f"--backends: {backend!r}: {why}; choose from {','.join(CHOICES)}")
    skipped: Dict[str, str] = {}
    if trees:
        backends = [f"{b}@{label}" for b in backends for label in trees]
    result: Dict[str, object] = {"workload": args.workload, "num_envs": args.num_envs,
                                 "load": args.load, "apart": args.apart,
                                 "torch_threads": args.torch_threads,
                                 "policy": args.policy, "trees": trees, "skipped": skipped}
    with BusyLoad(args.load, apart=args.apart).start():
        if args.launches:
            rates = launches(args.workload, backends, args.launches, args.num_envs,
                             args.warmup, args.seconds, args.torch_threads, policy=args.policy,
                             trees=trees, skipped=skipped)
            result["launches"] = rates
            print(f"{args.workload}: {args.launches} launches, {args.warmup:g} s warm-up, "
                  f"{args.seconds:g} s timed (env-steps/s)")
            for backend, values in rates.items():
                print(f"  {backend}: {sorted(round(v) for v in values)}")
                print(f"    slowest / median {min(values) / statistics.median(values):.2f}")
                for other in paired_with(backend, list(rates), trees):
                    ratios = [a / b for a, b in zip(values, rates[other])]
                    print(f"    / {other}, paired: {spread(ratios)}")
        if args.long:
            runs = launches(args.workload, backends, args.runs, args.num_envs, 0.0, args.long,
                            args.torch_threads, progress=False, policy=args.policy,
                            trees=trees, skipped=skipped, per_second=True)
            result["long"] = runs
            print(f"{args.workload}: {args.runs} runs of {args.long:g} s, env-steps/s per second")
            for backend, per_run in runs.items():
                for seconds in per_run:
                    median = statistics.median(seconds)
                    print(f"  {backend}: slowest second / median "
                          f"{min(seconds) / median:.2f}, median {median:,.0f}: "
                          f"{[round(s / 1000, 1) for s in seconds]}")
    for backend, reason in skipped.items():
        print(f"  {backend}: skipped ({reason})")
    if args.json:
        with open(args.json, "w") as out:
            json.dump(result, out, indent=1)
    return 0


def paired_with(name: str, names: List[str], trees: Dict[str, str]) -> List[str]:
    """The runs ``name`` is compared with: ``gym_sync`` of its tree, and the same
    backend from the first tree."""
    backend, _, label = name.partition("@")
    suffix = f"@{label}" if label else ""
    others = []
    if backend != "gym_sync" and f"gym_sync{suffix}" in names:
        others.append(f"gym_sync{suffix}")
    first = next(iter(trees), None)
    if label and first is not None and label != first:
        others.append(f"{backend}@{first}")
    return others


if __name__ == "__main__":
    sys.exit(main())
