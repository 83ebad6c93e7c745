"""A training loop over a GymProxy with restarts, whose env ends its own process.

Run by ``tests/front_ends/gym/test_proxy.py``::

    python -m tests.front_ends.gym.proxy_restart_script FAULT AT_STEP MARKER MAX_RESTARTS STEPS

``FAULT`` ("sigkill", "segv", "exit") and ``AT_STEP`` are
``tests.front_ends.gym.proxy_envs.DyingEnv``'s (``MARKER`` "-": it dies every
time). The loop resets with seed 0, then steps ``STEPS`` times, resetting
after an episode's end. It prints one JSON line: ``reset_restarted`` (the first reset's
restart flag), ``steps`` (each step's
observation, reward, its type, terminated, truncated and the restart flag),
``pids`` (every worker pid seen) and ``error`` (the type and message of what
the loop raised, or null).
"""

import json
import sys

from alf_env import GymProxy
from alf_env.control_plane.restart import RESTARTED_INFO_KEY, RestartPolicy
from tests.front_ends.gym.proxy_envs import DyingEnv


def main(fault: str, at_step: int, marker: str, max_restarts: int, num_steps: int) -> None:
    marker = "" if marker == "-" else marker
    policy = RestartPolicy(max_restarts=max_restarts, start_timeout=60.0)
    proxy = GymProxy(lambda: DyingEnv(fault, at_step, marker), restart_policy=policy)
    steps, pids, error, reset_restarted = [], [proxy.worker_pid], None, None
    try:
        _, first_info = proxy.reset(seed=0)
        reset_restarted = first_info.get(RESTARTED_INFO_KEY, False)
        for _ in range(num_steps):
            obs, reward, terminated, truncated, info = proxy.step(1)
            if proxy.worker_pid not in pids:
                pids.append(proxy.worker_pid)
            steps.append({"obs": obs.tolist(), "reward": reward,
                          "reward_type": type(reward).__name__, "terminated": terminated,
                          "truncated": truncated,
                          "restarted": info.get(RESTARTED_INFO_KEY, False)})
            if terminated or truncated:
                proxy.reset()
    except Exception as exc:  # noqa: BLE001 -- reported
        error = {"type": type(exc).__name__, "message": str(exc)}
    proxy.close()
    print(json.dumps({"reset_restarted": reset_restarted, "steps": steps, "pids": pids,
                      "error": error}))


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4]), int(sys.argv[5]))
