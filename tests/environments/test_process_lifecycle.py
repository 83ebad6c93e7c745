"""Faults that involve the parent process: it is SIGKILLed, or gets Ctrl-C.

Each test runs a small trainer script in its own process group, so the test
can kill it or send SIGINT to the whole group, as a terminal does.
"""

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]

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
    proc = subprocess.Popen(
        [sys.executable, "-c", TRAINER.format(module=module, cls=cls), start_method],
        cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True)
    line = proc.stdout.readline()
    if not line:
        proc.kill()
        raise AssertionError(f"trainer failed to start: {proc.communicate()[1]}")
    worker_pids = [int(p) for p in line.split()]
    return proc, worker_pids


def gone(pid):
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def wait_all_gone(pids, timeout):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if all(gone(p) for p in pids):
            return True
        time.sleep(0.02)
    return all(gone(p) for p in pids)


def kill_leftovers(pids):
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


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
