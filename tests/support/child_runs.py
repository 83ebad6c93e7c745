"""Running a user's script as a child process, and what it leaves behind.

The fault tests run the scripts users write as real children, each in a
session of its own, and check what its user sees: the exit status, the time
it took, stdout and stderr, and that nothing is left (no process of its
session still running, no new ``/dev/shm`` entry).
"""

import os
import signal
import subprocess
import sys
import time
from typing import List, NamedTuple, Sequence

from tests.faults.endings import lasting_new_shm_entries, reap_session, shm_entries
from tests.support.paths import REPO_ROOT


class ChildRun(NamedTuple):
    status: int                 # None: it hung, and its session was killed
    seconds: float              # from its start to its exit
    stdout: str
    stderr: str
    session_left: List[int]     # processes of its session still running after it
    new_shm: List[str]

    def problems(self) -> List[str]:
        """What went wrong besides the script's own assertions (empty: nothing)."""
        found = []
        if self.status is None:
            found.append(f"hung for {self.seconds:.0f} s and was killed")
        if self.session_left:
            found.append(f"processes left behind: {self.session_left}")
        if self.new_shm:
            found.append(f"/dev/shm entries left behind: {self.new_shm}")
        return found


def run_module(module: str, args: Sequence[str], timeout: float) -> ChildRun:
    """Runs ``python -m module *args`` from the repository in a session of its own.

    A child still running after ``timeout`` s is killed with its whole session.
    """
    shm_before = shm_entries()
    begin = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", module, *args], cwd=REPO_ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
        status = proc.returncode
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        stdout, stderr = proc.communicate()
        status = None
    seconds = time.monotonic() - begin
    left = reap_session(proc.pid)  # the session's processes get a moment to end
    return ChildRun(status, seconds, stdout, stderr, left,
                    lasting_new_shm_entries(shm_before))
