"""What does each front end's trainer side cost per lockstep step, over the hand-off itself?

A lockstep step's wall time is the workers' jobs, the hand-off to them and back, and
the trainer's Python around it. In one process, this builds a ``FastVectorEnv`` and a
``FastParallelEnvironment`` of the workload (8 envs, default arguments; the ALF one
over ``suite_gym``'s wrapping), each in processes of its own (two front ends in one
process would each see the other's workers as load and stop pinning its own), and
times, in alternating blocks so that the machine's drift (30% within minutes) hits
them alike, three loops of it:

* ``handoff``: the native round trip alone (``Controller.run``: post the STEP jobs,
  wait for them): the workers' jobs and the hand-off;
* ``minimal``: that, plus what a step does in Python however it is built: the
  batch of actions written by one exact copy, and the results copied out (fresh
  numpy arrays for ``FastVectorEnv``; for ``FastParallelEnvironment`` its torch
  ``TimeStep``, as ``SlotRows.time_step`` builds it);
* ``step``: the public ``step``.

``minimal - handoff`` bounds what one native call that also copied the actions in
and the results out could save; ``step - minimal`` is the bookkeeping around the
step (the one-thread guards, the job ledger, the torch pool's park, the info
decoder, ...). Printed, for each of ``--repeats`` rounds of a fresh process per
front end: the median µs of a step of each loop (medians of the blocks' medians).

Run:  python benchmarks/trainer_cost.py [--workload CartPole-v1 ...] [--blocks 40]
      [--block 200] [--repeats 3] [--json out.json]
      (``--workload`` repeats; the JSON has one entry per workload and the command)
"""

import argparse
import functools
import json
import statistics
import subprocess
import sys
import time
from typing import Any, Callable, Dict, List, Optional

import numpy as np

#: The loops timed for each front end, in the order they run in each block.
LOOPS = ("handoff", "minimal", "step")
FRONT_ENDS = ("fast_vector", "fast_parallel")


def _fast_vector_loops(workload: str, envs: int) -> Dict[str, Callable[[], Any]]:
    """The three loops of a ``FastVectorEnv`` (the instrument reads its engine's parts)."""
    from alf_env.bench.backends import env_fns
    from alf_env.data_plane.job_board import JobBoard
    from alf_env.data_plane.shared_block import JobType
    from alf_env.vector import FastVectorEnv

    env = FastVectorEnv(env_fns(workload, envs))
    env.reset(seed=0)
    actions = np.stack([env.single_action_space.sample() for _ in range(envs)])
    engine, results = env._engine, env._results
    assert isinstance(engine.board, JobBoard)  # shared memory, not the pipe path
    controller, workers = engine.board.controller, engine._all_workers
    write = engine._write_exact
    read_obs = results._read_all_obs
    assert write is not None and read_obs is not None  # one array each
    reward, terminated, truncated = results._reward, results._terminated, results._truncated

    def handoff() -> None:
        controller.run(workers, JobType.STEP, 0, None)

    def minimal() -> Any:
        write(actions)
        controller.run(workers, JobType.STEP, 0, None)
        return read_obs(), reward.copy(), terminated.copy(), truncated.copy(), {}

    return {"handoff": handoff, "minimal": minimal, "step": lambda: env.step(actions),
            "close": env.close}


def _fast_parallel_loops(workload: str, envs: int) -> Dict[str, Callable[[], Any]]:
    """The three loops of a ``FastParallelEnvironment`` (reading its rows and board)."""
    import torch

    from alf_env.bench.backends import _alf_env
    from alf_env.data_plane.shared_block import JobType
    from alf_env.front_ends.alf.fast_parallel_environment import FastParallelEnvironment

    env = FastParallelEnvironment([functools.partial(_alf_env, workload, i)
                                   for i in range(envs)])
    env.reset()
    spec = env.action_spec()
    actions = torch.as_tensor(np.stack([spec.numpy_zeros() for _ in range(envs)]))
    rows, check = env._rows, env._check_action
    controller, workers = env._board.controller, env._slots.slot_env

    def handoff() -> None:
        controller.run(workers, JobType.STEP, 0, None)

    def minimal() -> Any:
        rows.write_action(actions, check)
        controller.run(workers, JobType.STEP, 0, None)
        return rows.time_step()

    return {"handoff": handoff, "minimal": minimal, "step": lambda: env.step(actions),
            "close": env.close}


def measure(workload: str, envs: int, blocks: int, block: int, front_end: str,
            warmup: int = 500) -> Dict[str, float]:
    """Median µs of a step of each loop of ``front_end`` (one of :data:`FRONT_ENDS`),
    keyed ``front_end/loop``."""
    makers = {"fast_vector": _fast_vector_loops, "fast_parallel": _fast_parallel_loops}
    built = makers[front_end](workload, envs)
    try:
        loops = {f"{front_end}/{loop}": built[loop] for loop in LOOPS}
        for run in loops.values():
            for _ in range(warmup):
                run()
        per_block: Dict[str, List[float]] = {key: [] for key in loops}
        clock = time.perf_counter_ns
        for _ in range(blocks):
            for key, run in loops.items():
                times = []
                for _ in range(block):
                    begin = clock()
                    run()
                    times.append(clock() - begin)
                per_block[key].append(statistics.median(times) / 1e3)
        return {key: statistics.median(values) for key, values in per_block.items()}
    finally:
        built["close"]()


def _repeats(workload: str, args: argparse.Namespace) -> List[Dict[str, float]]:
    """``--repeats`` fresh processes' :func:`measure` of ``workload``, each printed."""
    runs: List[Dict[str, float]] = []
    for r in range(args.repeats):
        f: Dict[str, float] = {}
        for name in FRONT_ENDS:
            done = subprocess.run(
                [sys.executable, __file__, "--child", name, "--workload", workload,
                 "--envs", str(args.envs), "--blocks", str(args.blocks),
                 "--block", str(args.block)],
                capture_output=True, text=True, check=False, timeout=900)
            if done.returncode != 0:
                raise RuntimeError(f"repeat {r + 1} of {name} failed:\n{done.stderr[-2000:]}")
            f.update(json.loads(done.stdout.strip().splitlines()[-1]))
            h, m, s = (f[f"{name}/{loop}"] for loop in LOOPS)
            print(f"{workload}, {args.envs} envs, repeat {r + 1}, {name}: hand-off {h:.1f} us, "
                  f"minimal {m:.1f} us (+{m - h:.1f}), step {s:.1f} us (+{s - m:.1f})", flush=True)
        runs.append(f)
    for name in FRONT_ENDS:
        over = {loop: [run[f"{name}/{loop}"] - run[f"{name}/handoff"] for run in runs]
                for loop in LOOPS[1:]}
        print(f"{workload}, {name}: over the hand-off, minimal "
              f"+{statistics.median(over['minimal']):.1f} us, step "
              f"+{statistics.median(over['step']):.1f} us (medians of {len(runs)})")
    return runs


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workload", action="append", default=None,
                        help="repeatable (default: CartPole-v1)")
    parser.add_argument("--envs", type=int, default=8)
    parser.add_argument("--blocks", type=int, default=40)
    parser.add_argument("--block", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--child", choices=FRONT_ENDS, help=argparse.SUPPRESS)
    parser.add_argument("--json", default=None, help="also write the figures to this file")
    args = parser.parse_args(argv)
    workloads = args.workload or ["CartPole-v1"]
    if args.child:
        print(json.dumps(measure(workloads[0], args.envs, args.blocks, args.block, args.child)))
        return 0
    saved: Dict[str, Any] = {}
    for workload in workloads:
        saved[f"{workload}, {args.envs} envs"] = {"blocks": args.blocks, "block": args.block,
                                                  "runs": _repeats(workload, args)}
    if args.json:
        saved["command"] = "python benchmarks/trainer_cost.py " + " ".join(
            argv if argv is not None else sys.argv[1:])
        with open(args.json, "w") as out:
            json.dump(saved, out, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
