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

Backends: ``fast_vector`` (``FastVectorEnv``'s defaults), ``fast_vector_spread``
(its workers pinned one per CPU, ``worker_cpus="spread"``), ``fast_parallel``
(``FastParallelEnvironment``'s defaults over the envs wrapped for ALF), ``gym_sync``,
``gym_async``. ``--load N`` runs N busy processes beside every launch (``--apart``: in
a session of their own, like another user's job); ``--policy none``
drops the forward pass (the bare step loop). ``--tree LABEL=PATH`` (repeatable)
runs every backend once from each source tree (``PATH`` first on the child's
``PYTHONPATH``, with its own built ``_penv``), named ``backend@LABEL``, and
prints each tree's paired ratio to the first: what a change to alf_env costs.

Run:  python benchmarks/launch_spread.py --workload HalfCheetah-v5 --launches 20
      python benchmarks/launch_spread.py --workload HalfCheetah-v5 --long 60 --runs 5
          [--backends fast_vector,gym_sync] [--num-envs 8] [--torch-threads N]
      python benchmarks/launch_spread.py --workload CartPole-v1 --policy none
          --launches 5 --backends fast_vector --tree base=/tmp/base --tree new=.
"""

import argparse
import functools
import json
import os
import statistics
import subprocess
import sys
import time
from typing import Any, Dict, List, Optional, Sequence, Tuple

BACKENDS = ("fast_vector", "fast_vector_spread", "fast_parallel", "gym_sync", "gym_async")
POLICIES = ("mlp", "none")


def child(workload: str, backend: str, num_envs: int, warmup: float, seconds: float,
          torch_threads: Optional[int], policy_name: str = "mlp") -> List[float]:
    """Env-steps/s of each whole second of ``seconds`` after ``warmup`` s (in this process)."""
    import gymnasium as gym

    from alf_env.bench.core import Actions
    from alf_env.bench.loads import make_policy
    from alf_env.bench.workloads import make_env
    from alf_env.vector import FastVectorEnv

    policy = make_policy(policy_name, torch_threads)
    actions = Actions.make(workload, num_envs).numpy
    if backend == "fast_parallel":  # the ALF front end: TimeSteps of torch tensors
        from alf_env import FastParallelEnvironment
        from alf_env.environments.alf_gym_wrapper import AlfGymWrapper

        alf_env = FastParallelEnvironment(
            [functools.partial(lambda i: AlfGymWrapper(make_env(workload, i), env_id=i), i)
             for i in range(num_envs)])
        actions = Actions.make(workload, num_envs).torch
        env: Any = alf_env
        reset, step = (lambda: alf_env.reset().observation,
                       lambda action: alf_env.step(action).observation)
    else:
        fns = [lambda i=i: make_env(workload, i) for i in range(num_envs)]
        make = {"fast_vector": FastVectorEnv,
                "fast_vector_spread": functools.partial(FastVectorEnv, worker_cpus="spread"),
                "gym_sync": gym.vector.SyncVectorEnv,
                "gym_async": gym.vector.AsyncVectorEnv}[backend]
        env = gym_env = make(fns)
        reset, step = (lambda: gym_env.reset(seed=0)[0],
                       lambda action: gym_env.step(action)[0])
    try:
        obs = reset()
        count = 0
        end = time.perf_counter() + warmup
        while time.perf_counter() < end:
            if policy is not None:
                policy(obs)
            obs = step(actions[count % len(actions)])
            count += 1
        rates: List[float] = []
        start = time.perf_counter()
        second_start, steps = start, 0
        while len(rates) < seconds:
            if policy is not None:
                policy(obs)
            obs = step(actions[count % len(actions)])
            count += 1
            steps += 1
            now = time.perf_counter()
            if now - second_start >= 1.0:
                rates.append(steps * num_envs / (now - second_start))
                second_start, steps = now, 0
        return rates
    finally:
        env.close()


def split_name(name: str, trees: Dict[str, str]) -> Tuple[str, Optional[str]]:
    """``(backend, tree path)`` of a run name ``backend`` or ``backend@label``."""
    backend, _, label = name.partition("@")
    return backend, (trees[label] if label else None)


def launch(workload: str, name: str, num_envs: int, warmup: float, seconds: float,
           torch_threads: Optional[int], policy: str = "mlp",
           trees: Optional[Dict[str, str]] = None) -> List[float]:
    """:func:`child` in a fresh process (``name``: a backend, or ``backend@tree``)."""
    backend, tree = split_name(name, trees or {})
    args = [sys.executable, __file__, "--child", backend, "--workload", workload,
            "--num-envs", str(num_envs), "--warmup", str(warmup), "--seconds", str(seconds),
            "--policy", policy]
    if torch_threads:
        args += ["--torch-threads", str(torch_threads)]
    env = dict(os.environ)
    if tree is not None:
        env["PYTHONPATH"] = os.pathsep.join(
            [os.path.abspath(tree)] + [p for p in [env.get("PYTHONPATH")] if p])
    done = subprocess.run(args, capture_output=True, text=True, timeout=120 + 2 * seconds,
                          check=False, env=env)
    if done.returncode != 0:
        raise RuntimeError(f"{name} launch failed:\n{done.stderr[-2000:]}")
    return [float(x) for x in json.loads(done.stdout.strip().splitlines()[-1])]


def spread(values: Sequence[float]) -> str:
    """``median (min-max)``."""
    return f"{statistics.median(values):.2f} ({min(values):.2f}-{max(values):.2f})"


def launches(workload: str, backends: Sequence[str], count: int, num_envs: int,
             warmup: float, seconds: float, torch_threads: Optional[int],
             progress: bool = True, policy: str = "mlp",
             trees: Optional[Dict[str, str]] = None) -> Dict[str, List[float]]:
    """Env-steps/s of ``count`` interleaved launches of each backend."""
    rates: Dict[str, List[float]] = {b: [] for b in backends}
    for r in range(count):
        for backend in backends:
            per_second = launch(workload, backend, num_envs, warmup, seconds, torch_threads,
                                policy, trees)
            rates[backend].append(sum(per_second) / len(per_second))
            if progress:
                print(f"# launch {r + 1}/{count} {backend}: {rates[backend][-1]:,.0f}",
                      file=sys.stderr, flush=True)
    return rates


def long_runs(workload: str, backends: Sequence[str], runs: int, seconds: float,
              num_envs: int, torch_threads: Optional[int], policy: str = "mlp",
              trees: Optional[Dict[str, str]] = None) -> Dict[str, List[List[float]]]:
    """Per-second env-steps/s of ``runs`` interleaved runs of each backend."""
    out: Dict[str, List[List[float]]] = {b: [] for b in backends}
    for _ in range(runs):
        for backend in backends:
            out[backend].append(launch(workload, backend, num_envs, 0.0, seconds,
                                       torch_threads, policy, trees))
    return out


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--child", choices=BACKENDS, help=argparse.SUPPRESS)
    parser.add_argument("--workload", default="HalfCheetah-v5")
    parser.add_argument("--backends", default="fast_vector,gym_sync")
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
        print(json.dumps(child(args.workload, args.child, args.num_envs, args.warmup,
                               args.seconds, args.torch_threads, args.policy)))
        return 0
    from alf_env.bench.loads import BusyLoad

    trees: Dict[str, str] = {}
    for item in args.tree:
        label, sep, path = item.partition("=")
        if not sep or not label or not os.path.isdir(os.path.join(path, "alf_env")):
            parser.error(f"--tree {item!r}: expected LABEL=PATH of a source tree "
                         f"holding alf_env/")
        trees[label] = path
    backends = args.backends.split(",")
    if trees:
        backends = [f"{b}@{label}" for b in backends for label in trees]
    result: Dict[str, object] = {"workload": args.workload, "num_envs": args.num_envs,
                                 "load": args.load, "apart": args.apart,
                                 "torch_threads": args.torch_threads,
                                 "policy": args.policy, "trees": trees}
    with BusyLoad(args.load, apart=args.apart).start():
        if args.launches:
            rates = launches(args.workload, backends, args.launches, args.num_envs,
                             args.warmup, args.seconds, args.torch_threads, policy=args.policy,
                             trees=trees)
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
            runs = long_runs(args.workload, backends, args.runs, args.long, args.num_envs,
                             args.torch_threads, args.policy, trees)
            result["long"] = runs
            print(f"{args.workload}: {args.runs} runs of {args.long:g} s, env-steps/s per second")
            for backend, per_run in runs.items():
                for seconds in per_run:
                    median = statistics.median(seconds)
                    print(f"  {backend}: slowest second / median "
                          f"{min(seconds) / median:.2f}, median {median:,.0f}: "
                          f"{[round(s / 1000, 1) for s in seconds]}")
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
