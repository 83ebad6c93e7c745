"""Fault injection into ParallelAlfEnvironment (the pipe path).

The ways the parent ends (Ctrl-C, SIGTERM, SIGKILL, no close(), ...) are in
tests/faults/test_endings.py.
"""

import functools

import numpy as np
import pytest

from alf_env.control_plane import shutdown
from alf_env.environments.parallel_environment import ParallelAlfEnvironment
from alf_env.errors import EnvTimeoutError
from tests.support.faults import (
    NUM_ENVS,
    SHORT_POLITE,
    WAIT_TIMEOUT,
    AlfBatchedFrontEnd,
    BatchedFaultContract,
    Fault,
    FaultyAlfEnv,
)


class TestParallelAlfEnvironmentFaults(BatchedFaultContract):
    frontend = AlfBatchedFrontEnd(ParallelAlfEnvironment, "parallel")


@pytest.mark.parametrize("value", [0, -1.0, float("nan")])
def test_timeout_must_be_positive(value):
    with pytest.raises(ValueError, match="timeout: expected a positive number"):
        ParallelAlfEnvironment([FaultyAlfEnv], timeout=value)


def test_blocking_mode_times_out_too(monkeypatch):
    monkeypatch.setattr(shutdown, "CLOSE_POLITE_TIMEOUT", SHORT_POLITE)
    ctors = [functools.partial(FaultyAlfEnv, env_id=i, fault=Fault("hang", "step"))
             for i in range(NUM_ENVS)]
    with ParallelAlfEnvironment(ctors, blocking=True, timeout=WAIT_TIMEOUT) as env:
        env.reset()
        with pytest.raises(EnvTimeoutError, match="env 1"):
            env.step(np.zeros(NUM_ENVS, np.int64))
