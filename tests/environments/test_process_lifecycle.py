"""Faults that involve the parent process: it is SIGKILLed, or gets Ctrl-C.

The batched ALF front ends, for every start method, bound to the shared
contract of tests/faults/core.py (ParentFaultContract), which runs a small
trainer script in its own process group so the test can kill it or send SIGINT
to the whole group, as a terminal does. ProcessEnvironment and FastVectorEnv
bind the same contract in tests/faults/.
"""

import pytest

from tests.faults.core import ParentFaultContract


@pytest.fixture(params=["fork", "spawn", "forkserver"])
def start_method(request):
    return request.param


class TestParallelAlfEnvironmentParentFaults(ParentFaultContract):
    trainer = "parallel"


class TestFastParallelEnvironmentParentFaults(ParentFaultContract):
    trainer = "fast"
