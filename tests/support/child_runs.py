"""Running a user's script as a child process, and what it leaves behind.

The fault tests run the scripts users write as real children, each in a
session of its own, and check what its user sees: the exit status, the time
it took, stdout and stderr, and that nothing is left (no process of its
session still running, no new ``/dev/shm`` entry).
"""

import concurrent.futures
import os
import signal
import subprocess
import sys
import time
from typing import Any, Callable, Dict, Hashable, List, NamedTuple, Optional, Sequence

from tests.faults.ending_script import processes
from tests.support.faults import kill_leftovers
from tests.support.paths import REPO_ROOT
from tests.support.shm_leaks import leaked_shm_entries, shm_entries


def session_processes(sid: int) -> List[int]:
    """Pids of the processes of session ``sid`` that still run (zombies excluded)."""
    return [pid for pid, fields in processes() if int(fields[3]) == sid and fields[0] != "Z"]


def reap_session(sid: int, grace: float = 1.0) -> List[int]:
    """Gives the processes of session ``sid`` ``grace`` s to end, then kills
    those still running; returns them (what the child left behind)."""
    deadline = time.monotonic() + grace
    left = session_processes(sid)
    while left and time.monotonic() < deadline:
        time.sleep(0.05)
        left = session_processes(sid)
    kill_leftovers(left)
    return left


def lasting_new_shm_entries(before: set) -> List[str]:
    """``/dev/shm`` entries that are new and stay, and that no program outside
    this test's processes uses (``tests.support.shm_leaks``): other programs on
    the machine create entries of the same names (``sem.mp-*``, ``psm_*``)."""
    return leaked_shm_entries(before)


def leftover_problems(session_left: Sequence[int], new_shm: Sequence[str]) -> List[str]:
    """What a child left behind, in words (empty: nothing).

    Args:
        session_left: processes of its session still running after it.
        new_shm: ``/dev/shm`` entries it created and did not remove.
    """
    found = []
    if session_left:
        found.append(f"processes left behind: {list(session_left)}")
    if new_shm:
        found.append(f"/dev/shm entries left behind: {list(new_shm)}")
    return found


class ChildRun(NamedTuple):
    status: Optional[int]       # None: it hung, and its session was killed
    seconds: float              # from its start to its exit
    stdout: str
    stderr: str
    session_left: List[int]     # processes of its session still running after it
    new_shm: List[str]

    def problems(self) -> List[str]:
        """What went wrong besides the script's own assertions (empty: nothing)."""
        hung = [] if self.status is not None else [
            f"hung for {self.seconds:.0f} s and was killed"]
        return hung + leftover_problems(self.session_left, self.new_shm)


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


class RunTable:
    """Runs the child scripts of a test module ``concurrency`` at a time, as its tests ask.

    A child script is mostly its interpreter's start-up and imports, a process
    the test only waits for: run side by side, they use both cores (and, on a
    busy machine, get a larger share of them). A test that asks for a key not
    run yet runs it together with the next pending keys of the module's
    selected tests, so each test waits for one batch at most and no child
    outlives the test that started it (the suite's leak check sees none).

    Args:
        keys: the keys of the selected tests, in the order the tests run.
        run: runs the child script of one key and returns what the tests check.
        concurrency: children run at the same time.
    """

    def __init__(self, keys: Sequence[Hashable], run: Callable[[Any], Any],
                 concurrency: int) -> None:
        self.pending = list(dict.fromkeys(keys))
        self.run = run
        self.concurrency = concurrency
        self.done: Dict[Hashable, Any] = {}

    def outcome(self, key: Hashable) -> Any:
        """What ``run(key)`` returned (run now, with the next pending keys, if not yet)."""
        if key not in self.done:
            batch = [key] + [k for k in self.pending if k != key][:self.concurrency - 1]
            self.pending = [k for k in self.pending if k not in batch]
            with concurrent.futures.ThreadPoolExecutor(len(batch)) as pool:
                self.done.update(zip(batch, pool.map(self.run, batch)))
        return self.done[key]


def selected_params(request: Any, name: str) -> List[Any]:
    """The values of parameter ``name`` of the selected tests of ``request``'s
    module, in the order they run (for a module-scoped :class:`RunTable`)."""
    return [item.callspec.params[name] for item in request.session.items
            if item.module is request.module and hasattr(item, "callspec")
            and name in item.callspec.params]
