"""How much faster does a camera-frame env step through GymProxy with its frame in shared memory?

The question: a robot simulator's env returns a 480x640x3 uint8 camera frame
(0.9 MB) every step. ``GymProxy`` copies a frame that fits its ``Box`` space
into a shared row (one memcpy in the worker, one in the trainer) and sends
only a marker on the pipe; ``GymProxy(..., shared_memory=False)`` pickles
the frame through the pipe instead, as a plain pipe proxy does. This script
steps the same cheap frame env (its step is one copy of the frame, so the
transport is most of what is measured) through both, and reports each one's steps/s and their
paired ratio.

How: both proxies are built once (``fork``) and stepped in turns: each
repeat times ``--seconds`` of steps of one, then of the other, the order
alternating from repeat to repeat, so a change in the machine's load hits
both alike; the ratio of a repeat is shared/pipe of that repeat's two runs.
Reported: the median (min–max) over ``--repeats``.

Run (from the repository root)::

    python benchmarks/proxy_frame.py --seconds 3 --repeats 5 [--json FILE]
"""

import argparse
import json
import statistics
import sys
import time
from typing import Any, Dict, List, Optional, Sequence

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from alf_env import GymProxy

SHAPE = (480, 640, 3)
WARMUP_STEPS = 20
TRANSPORTS = ("shared", "pipe")


class FrameEnv(gym.Env):
    """A camera-frame env whose step is cheap: one pixel row of a fixed frame changes."""

    def __init__(self) -> None:
        self.observation_space = spaces.Box(0, 255, SHAPE, np.uint8)
        self.action_space = spaces.Discrete(2)
        self._frame = np.zeros(SHAPE, np.uint8)
        self._t = 0

    def reset(self, *, seed: Optional[int] = None, options: Optional[dict] = None):
        super().reset(seed=seed)
        self._t = 0
        return self._frame.copy(), {}

    def step(self, action: Any):
        self._t += 1
        self._frame[self._t % SHAPE[0]] = self._t % 256
        return self._frame.copy(), 1.0, False, False, {}


def steps_per_second(proxy: GymProxy, seconds: float) -> float:
    """Steps/s of ``proxy`` over ``seconds`` (after a short warm-up)."""
    for _ in range(WARMUP_STEPS):
        proxy.step(0)
    steps = 0
    begin = time.perf_counter()
    deadline = begin + seconds
    now = begin
    while now < deadline:
        proxy.step(0)
        steps += 1
        now = time.perf_counter()
    return steps / (now - begin)


def spread(values: Sequence[float]) -> str:
    """``median (min–max)`` of ``values``."""
    return f"{statistics.median(values):.2f} ({min(values):.2f}–{max(values):.2f})"


def measure(seconds: float, repeats: int) -> Dict[str, Any]:
    """Steps/s of each transport per repeat, interleaved, and the paired ratios."""
    proxies = {"shared": GymProxy(FrameEnv, context="fork"),
               "pipe": GymProxy(FrameEnv, context="fork", shared_memory=False)}
    rates: Dict[str, List[float]] = {t: [] for t in TRANSPORTS}
    try:
        for proxy in proxies.values():
            proxy.reset(seed=0)
        for r in range(repeats):
            order = TRANSPORTS if r % 2 == 0 else TRANSPORTS[::-1]
            for transport in order:
                rates[transport].append(steps_per_second(proxies[transport], seconds))
    finally:
        for proxy in proxies.values():
            proxy.close()
    ratios = [s / p for s, p in zip(rates["shared"], rates["pipe"])]
    return {"shape": list(SHAPE), "seconds": seconds, "repeats": repeats,
            "steps_per_second": rates, "ratios": ratios,
            "median_ratio": statistics.median(ratios)}


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=3.0,
                        help="seconds of steps per transport per repeat")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--json", default=None, help="also write the figures to this file")
    args = parser.parse_args(argv)
    result = measure(args.seconds, args.repeats)
    rates = result["steps_per_second"]
    print(f"GymProxy, 480x640x3 uint8 frames: {args.repeats} paired repeats of "
          f"{args.seconds:g} s per transport")
    for transport in TRANSPORTS:
        print(f"  {transport:>6}: steps/s {sorted(round(v) for v in rates[transport])}")
    print(f"  shared / pipe, paired: {spread(result['ratios'])}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
