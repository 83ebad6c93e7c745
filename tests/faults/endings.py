"""Runs ``tests/faults/ending_script.py`` in the ways a training script ends and
reports what its user sees (shared by ``tests/faults/test_endings.py`` and
``benchmarks/exit_times.py``).

A *cell* is (front end, start method, number of envs, ending). :func:`run_cell`
starts the script in its own session, signals it when the ending is a signal
(after the line of the script that marks the phase), and returns the
:class:`Outcome`: exit time (from the moment the script ends by itself, or the
signal is sent; for SIGKILL until every worker is gone), exit status, stderr,
the children the script still had when its last exit hook ran, the processes
of its session still running afterwards, and new ``/dev/shm`` entries.
"""

import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from typing import List, NamedTuple, Optional

from tests.faults.ending_script import ENDINGS, FRONT_ENDS
from tests.support.child_runs import lasting_new_shm_entries, leftover_problems, reap_session
from tests.support.faults import REPO_ROOT, SLACK, wait_all_gone
from tests.support.shm_leaks import shm_entries

__all__ = ["Cell", "Outcome", "run_cell", "problems", "ENDINGS", "FRONT_ENDS", "EXIT_BOUND"]

EXIT_BOUND = 2.0     # the contract: exit within 2 s of the ending
CHILD_TIMEOUT = 60.0  # a child that takes longer hangs: killed, and the cell fails

# When the caller signals, after the line the script printed.
SIGNAL_AFTER = {"pids": 0.3, "starting": 0.6, "t": 0.3}

SIGNALS = {"sigint": signal.SIGINT, "sigterm": signal.SIGTERM, "sigkill": signal.SIGKILL}


class Cell(NamedTuple):
    front_end: str
    start_method: str
    num_envs: int
    ending: str

    @property
    def id(self) -> str:
        return f"{self.front_end}-{self.start_method}-{self.num_envs}-{self.ending}"

    @property
    def signal(self) -> Optional[int]:
        return SIGNALS.get(self.ending.split("_")[0])

    @property
    def to_group(self) -> bool:
        return "_group" in self.ending

    @property
    def signal_after(self) -> str:
        """The line of the script after which the signal is sent."""
        if self.ending.endswith("_start"):
            return "starting"
        if self.ending.endswith("_close"):
            return "t"
        return "pids"

    @property
    def expected_status(self) -> int:
        if self.ending.startswith("sigint"):
            return -signal.SIGINT  # an uncaught KeyboardInterrupt re-raises SIGINT
        return {"end": 0, "del": 0, "raise": 1, "exit": 3, "sigterm": 143,
                "sigterm_own_handler": 7, "sigkill": -signal.SIGKILL}[self.ending]

    @property
    def expected_error(self) -> Optional[str]:
        """The last line of the one traceback expected on stderr (None: silence)."""
        if self.ending.startswith("sigint"):
            return "KeyboardInterrupt"
        if self.ending == "raise":
            return "RuntimeError: the trainer failed"
        return None


class Outcome(NamedTuple):
    exit_time: float            # seconds from the ending to the exit (SIGKILL: workers gone)
    status: Optional[int]       # None: it hung and was killed
    stdout: List[str]
    stderr: str
    worker_pids: List[int]
    left_at_exit: Optional[List[str]]  # children at the script's last exit hook
    session_left: List[int]     # processes of its session still running afterwards
    new_shm: List[str]


def run_cell(cell: Cell) -> Outcome:
    """Runs the script of ``cell`` to its end and reports what happened."""
    shm_before = shm_entries()
    args = [sys.executable, "-m", "tests.faults.ending_script", cell.front_end,
            cell.start_method, str(cell.num_envs), cell.ending]
    with tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(args, cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=err,
                                text=True, start_new_session=True)
        lines: List[str] = []
        worker_pids: List[int] = []
        ended_at = None
        hung: List[bool] = []

        def kill_hung() -> None:
            hung.append(True)
            os.killpg(proc.pid, signal.SIGKILL)

        watchdog = threading.Timer(CHILD_TIMEOUT, kill_hung)
        watchdog.start()
        try:
            for line in proc.stdout:
                words = line.split()
                lines.append(line.rstrip())
                if not words:
                    continue
                if words[0] == "pids":
                    worker_pids = [int(p) for p in words[1:]]
                if words[0] == "t" and cell.signal is None:
                    ended_at = float(words[1])
                if cell.signal is not None and words[0] == cell.signal_after:
                    time.sleep(SIGNAL_AFTER[words[0]])
                    ended_at = time.monotonic()
                    if cell.to_group:
                        os.killpg(proc.pid, cell.signal)
                    else:
                        os.kill(proc.pid, cell.signal)
            status = proc.wait()
            exited_at = time.monotonic()
            watchdog.cancel()
            if hung:
                status = None
            if cell.signal == signal.SIGKILL:
                wait_all_gone(worker_pids, timeout=EXIT_BOUND + SLACK)
                exited_at = time.monotonic()
        finally:
            watchdog.cancel()
            # Let the session's processes end (SIGKILL: the workers notice
            # their parent is gone), then note and remove what is left.
            left = reap_session(proc.pid)
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            proc.stdout.close()
        err.seek(0)
        stderr = err.read()
    left_at_exit = next((line.split()[1:] for line in lines if line.startswith("left")), None)
    return Outcome(exit_time=exited_at - (ended_at or exited_at), status=status,
                   stdout=lines, stderr=stderr, worker_pids=worker_pids,
                   left_at_exit=left_at_exit, session_left=left,
                   new_shm=lasting_new_shm_entries(shm_before))


def problems(cell: Cell, outcome: Outcome) -> List[str]:
    """What the user of ``cell``'s script would see go wrong, but the exit time.

    Empty when: the script did not hang and exited with the usual status; it
    printed one traceback (ending with what it raised) for an exception or a
    Ctrl-C and nothing at all otherwise; it started every worker (unless
    interrupted while starting them); it had no child left at its last exit
    hook (not run after SIGKILL); no process of its session ran on; and no
    ``/dev/shm`` entry appeared.
    """
    found = []
    if outcome.status is None:
        return [f"hung (killed after {CHILD_TIMEOUT:.0f} s)"]
    if outcome.status != cell.expected_status:
        found.append(f"exit status {outcome.status}, expected {cell.expected_status}")
    if cell.signal_after != "starting" and len(outcome.worker_pids) != cell.num_envs:
        found.append(f"{len(outcome.worker_pids)} workers, expected {cell.num_envs}")
    stderr = outcome.stderr
    if cell.expected_error is None:
        if stderr:
            found.append("printed on stderr")
    elif (stderr.count("Traceback") != 1
          or not stderr.startswith("Traceback (most recent call last):")
          or stderr.rstrip().splitlines()[-1] != cell.expected_error):
        found.append(f"expected one traceback ending with {cell.expected_error!r}")
    if cell.ending == "sigterm_own_handler" and "own handler" not in outcome.stdout:
        found.append("the script's own SIGTERM handler did not run")
    if cell.signal != signal.SIGKILL and outcome.left_at_exit != []:
        found.append(f"children at exit: {outcome.left_at_exit}")
    return found + leftover_problems(outcome.session_left, outcome.new_shm)
