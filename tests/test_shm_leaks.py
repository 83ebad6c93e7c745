"""The /dev/shm leak check of tests/conftest.py (tests/support/shm_leaks.py): it flags
the segments a test and its processes leave, and not other programs' entries, even
ones that churn semaphores and segments while the test runs."""

import multiprocessing
import subprocess
import sys
import time
from multiprocessing import resource_tracker, shared_memory

import pytest

from tests.support.faults import kill_leftovers, wait_all_gone
from tests.support.shm_leaks import leaked_shm_entries, process_tree, shm_entries

SHORT_LINGER = 0.1  # the checks below need no full linger: nothing they flag goes away

# Another program of this user, outside the test's process tree (the launcher
# forks it and exits): it holds one segment for its whole life and churns
# shared-memory segments and spawn-context semaphores (named ones) beside it,
# until its stdin closes.
FOREIGN_PROGRAM = r"""
import multiprocessing, os, sys, threading, time
from multiprocessing import shared_memory
if os.fork():
    os._exit(0)
held = shared_memory.SharedMemory(create=True, size=4096)
stop = threading.Event()

def churn():
    spawn = multiprocessing.get_context("spawn")
    while not stop.is_set():
        segment = shared_memory.SharedMemory(create=True, size=4096)
        time.sleep(0.01)
        segment.close()
        segment.unlink()
        semaphore = spawn.Semaphore()
        time.sleep(0.01)
        del semaphore

churner = threading.Thread(target=churn)
churner.start()
print(os.getpid(), held.name, flush=True)
sys.stdin.read()
stop.set()
churner.join()
held.close()
held.unlink()
"""


def _leave_a_segment(conn) -> None:
    """In a child: creates a segment, sends its name, exits without unlinking it."""
    segment = shared_memory.SharedMemory(create=True, size=4096)
    conn.send(segment.name)
    segment.close()


def _unlink(name: str) -> None:
    shared_memory.SharedMemory(name=name).unlink()


def test_a_segment_the_test_process_leaves_is_flagged_until_unlinked():
    before = shm_entries()
    segment = shared_memory.SharedMemory(create=True, size=4096)
    try:
        assert leaked_shm_entries(before, linger=SHORT_LINGER) == [segment.name]  # mapped
        segment.close()
        assert leaked_shm_entries(before, linger=SHORT_LINGER) == [segment.name]  # unused
    finally:
        segment.close()
        segment.unlink()
    assert leaked_shm_entries(before) == []


def test_a_segment_a_child_of_the_test_leaves_is_flagged():
    # The child shares this process's resource tracker: one of its own would
    # unlink the segment when the child exits.
    resource_tracker.ensure_running()
    before = shm_entries()
    receive, send = multiprocessing.get_context("fork").Pipe(duplex=False)
    child = multiprocessing.get_context("fork").Process(target=_leave_a_segment,
                                                         args=(send, ))
    child.start()
    try:
        name = receive.recv()
        child.join(20)
        assert child.exitcode == 0
        assert leaked_shm_entries(before, linger=SHORT_LINGER) == [name]
        _unlink(name)
        assert leaked_shm_entries(before) == []
    finally:
        if child.is_alive():
            child.kill()
            child.join()
        receive.close()
        send.close()


def test_entries_of_a_program_outside_the_test_are_not_flagged():
    before = shm_entries()
    launcher = subprocess.Popen([sys.executable, "-c", FOREIGN_PROGRAM],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    foreign_pid = held = None
    try:
        assert launcher.wait(timeout=20) == 0  # the launcher exits at once
        line = launcher.stdout.readline()
        assert line, "the foreign program did not start"
        pid_text, held = line.split()
        foreign_pid = int(pid_text)
        assert foreign_pid not in process_tree()
        assert held in shm_entries() - before
        # The churn is under way: entries that are neither the held one nor ours.
        deadline = time.monotonic() + 10.0
        while not shm_entries() - before - {held} and time.monotonic() < deadline:
            time.sleep(0.001)
        assert shm_entries() - before - {held}, "the foreign program churned nothing"
        own = shared_memory.SharedMemory(create=True, size=4096)
        try:
            for _ in range(10):
                assert leaked_shm_entries(before, linger=SHORT_LINGER) == [own.name]
        finally:
            own.close()
            own.unlink()
        for _ in range(10):
            assert leaked_shm_entries(before, linger=SHORT_LINGER) == []
    finally:
        launcher.stdin.close()
        launcher.stdout.close()
        if foreign_pid is not None and not wait_all_gone([foreign_pid], timeout=20):
            kill_leftovers([foreign_pid])
            _unlink(held)
            pytest.fail("the foreign program did not exit when its stdin closed")
    assert held not in shm_entries()
