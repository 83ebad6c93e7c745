"""Fault injection into ProcessEnvironment (one env in one worker, pipe protocol).

The contract (tests.faults.core) at every phase. The ways the parent ends
(Ctrl-C, SIGTERM, SIGKILL, no close(), ...) are in tests/faults/test_endings.py;
more ProcessEnvironment faults (promises in any order, unpicklable results,
close right after start) in tests/environments/test_process_environment.py.
"""

from tests.faults.core import FaultContract, ProcessFrontEnd


class TestProcessEnvironmentFaults(FaultContract):
    frontend = ProcessFrontEnd()
