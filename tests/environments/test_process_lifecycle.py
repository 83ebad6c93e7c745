"""Faults that involve the parent process: it is SIGKILLed, or gets Ctrl-C.

Each test runs a small trainer script in its own process group, so the test
can kill it or send SIGINT to the whole group, as a terminal does. These are
the batched ALF front ends, for every start method; ProcessEnvironment and
FastVectorEnv have the same tests in tests/faults/ (helpers shared from
tests/faults/core.py).
"""

import os
import signal
import textwrap
import time

import psutil
import pytest

from tests.faults.core import gone, kill_leftovers, wait_all_gone
from tests.faults.core import start_trainer as run_trainer

TRAINER = textwrap.dedent("""
    import sys
    import torch
    from alf_env.environments.{module} import {cls}
    from tests.alf_test_envs import CountingEnv

    ctors = [lambda env_id: CountingEnv(env_id=env_id)] * 3
    with {cls}(ctors, start_method=sys.argv[1]) as env:
        env.reset()
        sys.stdout.write(" ".join(map(str, env.worker_pids())) + "\\n")
        sys.stdout.flush()
        action = torch.zeros(env.batch_size, dtype=torch.int64)
        while True:
            env.step(action)
""")

BACKENDS = [("parallel_environment", "ParallelAlfEnvironment"),
            ("fast_parallel_environment", "FastParallelEnvironment")]
START_METHODS = ["fork", "spawn", "forkserver"]


def start_trainer(module, cls, start_method):
    return run_trainer(TRAINER.format(module=module, cls=cls), start_method)


@pytest.mark.parametrize("module,cls", BACKENDS)
@pytest.mark.parametrize("start_method", START_METHODS)
def test_workers_exit_when_parent_is_killed(module, cls, start_method):
    proc, worker_pids = start_trainer(module, cls, start_method)
    descendants = [c.pid for c in psutil.Process(proc.pid).children(recursive=True)]
    try:
        time.sleep(0.2)  # let it step for a while
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
        killed_at = time.monotonic()
        # Every worker (and multiprocessing helper) exits within 2 s.
        assert wait_all_gone(descendants, timeout=2.0), \
            [p for p in descendants if not gone(p)]
        assert time.monotonic() - killed_at < 2.5
        assert set(worker_pids) <= set(descendants)
    finally:
        kill_leftovers(descendants)
        proc.stdout.close()
        proc.stderr.close()


@pytest.mark.parametrize("module,cls", BACKENDS)
@pytest.mark.parametrize("start_method", START_METHODS)
def test_ctrl_c_gives_one_keyboard_interrupt_and_quiet_workers(module, cls, start_method):
    proc, worker_pids = start_trainer(module, cls, start_method)
    try:
        time.sleep(0.3)
        os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C in a terminal does
        _, stderr = proc.communicate(timeout=30)
        assert proc.returncode != 0
        assert stderr.count("KeyboardInterrupt") == 1, stderr
        assert stderr.count("Traceback") == 1, stderr
        assert wait_all_gone(worker_pids, timeout=2.0)
    finally:
        kill_leftovers(worker_pids)
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
