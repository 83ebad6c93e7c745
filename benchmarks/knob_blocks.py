"""One tuner knob's two values, alternated in blocks of cycles inside one FastVectorEnv.

``FastVectorEnv``'s tuner (``alf_env/control_plane/step_tuner.py``) chooses
each knob's value from four windows of cycles. This script measures the same
choice far more finely, for a knob and a condition given: it builds a
``FastVectorEnv`` with default arguments, lets the tuner finish its first
round, then stops the tuner's timing (the OpenMP pause it chose still runs
before every step) and alternates the knob between its preferred and its
alternative value every ``--block`` cycles for ``--seconds``. A cycle is the
training loop's: the policy's forward pass (``--policy mlp``) and the step.

Adjacent blocks form a pair, in the order preferred-alternative or the reverse,
alternating, so that the machine's drift cancels; the script prints each
pair's ratio of mean cycles, alternative / preferred, as median and quartiles
(below 1: the alternative is faster here). Process-level A/B runs spread
±40% on a noisy 2-CPU machine; pairs of blocks resolve a few percent.

Run:  python benchmarks/knob_blocks.py --workload HalfCheetah-v5 --knob placement
      [--policy mlp] [--load 1] [--seconds 20] [--block 100] [--num-envs 8]
"""

import argparse
import functools
import statistics
import sys
import time
from typing import Any, Dict, List, Optional

from alf_env.bench.core import Actions
from alf_env.bench.loads import POLICIES, BusyLoad, make_policy
from alf_env.bench.workloads import make_env

#: The knobs of FastVectorEnv's tuner (alf_env/data_plane/board_tuning.py).
KNOBS = ("placement", "job_wait_spin_us", "openmp_pause")
#: Longest wait for the tuner's first round, in seconds of stepping.
FIRST_ROUND_S = 60.0


def measure(workload: str, knob: str, num_envs: int = 8, policy_name: str = "none",
            seconds: float = 20.0, block: int = 100) -> Dict[str, Any]:
    """Alternates ``knob`` in blocks inside one env; returns what was measured.

    Returns:
        ``knob``; ``values``: (preferred, alternative) as strings; ``settled``:
        every knob's value once the tuner's first round ended; ``pairs``: the
        ratio alternative / preferred of each pair of blocks; ``median``,
        ``q1``, ``q3`` of those; ``cycle_us``: the median block's mean cycle
        at each value.

    Raises:
        ValueError: the env's tuner has no such knob (e.g. ``placement`` when
            the workers were placed by hand), or it cannot act here.
    """
    from alf_env.vector import FastVectorEnv

    policy = make_policy(policy_name, None)
    batches = Actions.make(workload, num_envs).numpy
    env = FastVectorEnv([functools.partial(make_env, workload, i) for i in range(num_envs)])
    try:
        obs, _ = env.reset(seed=0)
        board = env._board
        tuner = board.step_hook.__self__  # the StepTuner that tune_board installed
        count = 0

        def cycle() -> None:
            nonlocal obs, count
            if policy is not None:
                policy(obs)
            obs = env.step(batches[count % len(batches)])[0]
            count += 1

        deadline = time.monotonic() + FIRST_ROUND_S
        cycle()  # the first step starts the tuner's round (torch is loaded by now)
        timed = sum(1 for k in tuner.knobs if k.available())
        while len(tuner.decisions) < timed and time.monotonic() < deadline:
            cycle()
        settled = {name: str(value) for name, value in tuner.values.items()}
        chosen = next((k for k in tuner.knobs if k.name == knob), None)
        if chosen is None or not chosen.available():
            raise ValueError(f"--knob: this env's tuner cannot set {knob!r} here; it "
                             f"times {sorted(k.name for k in tuner.knobs if k.available())}")
        # From here the tuner only runs what it runs before every step.
        board.step_hook = tuner.run_before_step
        values = (chosen.preferred, chosen.alternative)
        means: Dict[Any, List[float]] = {v: [] for v in values}
        pairs: List[float] = []
        end = time.monotonic() + seconds
        while time.monotonic() < end or not pairs:
            order = values if len(pairs) % 2 == 0 else values[::-1]
            pair: Dict[Any, float] = {}
            for value in order:
                chosen.set(value)
                start = time.perf_counter()
                for _ in range(block):
                    cycle()
                pair[value] = (time.perf_counter() - start) / block
                means[value].append(pair[value])
            pairs.append(pair[values[1]] / pair[values[0]])
    finally:
        env.close()
    quartiles = statistics.quantiles(pairs, n=4) if len(pairs) > 1 else [pairs[0]] * 3
    return {"knob": knob, "values": tuple(str(v) for v in values), "settled": settled,
            "pairs": pairs, "median": statistics.median(pairs), "q1": quartiles[0],
            "q3": quartiles[2],
            "cycle_us": {str(v): statistics.median(m) * 1e6 for v, m in means.items()}}


def report(result: Dict[str, Any]) -> str:
    """The measurement in two lines."""
    preferred, alternative = result["values"]
    cycles = result["cycle_us"]
    return (f"{result['knob']}: {alternative} / {preferred} cycle {result['median']:.3f} "
            f"(quartiles {result['q1']:.3f}-{result['q3']:.3f}), {len(result['pairs'])} "
            f"pairs of blocks; median cycle {cycles[preferred]:.0f} us at {preferred}, "
            f"{cycles[alternative]:.0f} us at {alternative}\n"
            f"settled by the tuner's first round: {result['settled']}")


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workload", default="HalfCheetah-v5")
    parser.add_argument("--knob", choices=KNOBS, required=True)
    parser.add_argument("--num-envs", type=int, default=8)
    parser.add_argument("--load", type=int, default=0, help="busy processes beside the env")
    parser.add_argument("--policy", choices=POLICIES, default="none")
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--block", type=int, default=100, help="cycles per block")
    args = parser.parse_args(argv)
    if args.block < 1 or args.seconds < 0:
        parser.error("--block: expected >= 1 cycles; --seconds: expected >= 0")
    with BusyLoad(args.load):
        try:
            result = measure(args.workload, args.knob, args.num_envs, args.policy,
                             args.seconds, args.block)
        except ValueError as exc:
            print(f"knob_blocks: {exc}", file=sys.stderr)
            return 2
    print(report(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
