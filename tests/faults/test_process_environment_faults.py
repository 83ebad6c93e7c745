"""Fault injection into ProcessEnvironment (one env in one worker, pipe protocol).

The contract (tests.faults.core) at every phase, plus the parent dying or
getting Ctrl-C. More ProcessEnvironment faults (promises in any order,
unpicklable results, close right after start, atexit) are in
tests/environments/test_process_environment.py.
"""

import pytest

from tests.faults.core import FaultContract, ParentFaultContract, ProcessFrontEnd


@pytest.fixture(params=["fork", "spawn"])
def start_method(request):
    return request.param


class TestProcessEnvironmentFaults(FaultContract):
    frontend = ProcessFrontEnd()


class TestProcessEnvironmentParentFaults(ParentFaultContract):
    trainer = "process"
