"""Fault injection into ProcessEnvironment (one env in one worker, pipe protocol).

The contract (tests.support.faults) at every phase. The ways the parent ends
(Ctrl-C, SIGTERM, SIGKILL, no close(), ...) are in tests/faults/test_endings.py;
more ProcessEnvironment faults (promises in any order, unpicklable results,
close right after start) in tests/control_plane/test_process_environment.py.
"""

from tests.support.faults import FaultContract, ProcessFrontEnd


class TestProcessEnvironmentFaults(FaultContract):
    frontend = ProcessFrontEnd()
