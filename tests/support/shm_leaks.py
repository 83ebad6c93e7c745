"""Which new ``/dev/shm`` entries a test left behind, told apart from other programs'.

alf_env itself names nothing in ``/dev/shm`` (its shared memory is a memfd), but
a test, or a process it starts, may: multiprocessing's named semaphores
(``sem.mp-*``, with the spawn and forkserver start methods),
``multiprocessing.shared_memory`` segments (``psm_*``), ... Other programs on
the machine create and remove entries of the same names at the same time, so
counting every new entry fails unrelated tests on a busy machine.

An entry that appeared during a test is the test's leak when:

* it stays (still there a moment later, and to the end of a linger period):
  the entries of a program that churns them come and go;
* it belongs to this user (the test's processes create entries as this user);
* no process outside the test's process tree (the test process and its
  descendants) maps it or holds it open: an entry another program uses is
  that program's. A segment that a process of the test still maps, or that
  nobody maps (closed but never unlinked), counts.

What this cannot tell apart: an entry that another program of the same user
creates during the test and leaves behind unused (it crashed, or closed it
without unlinking) counts as the test's.
"""

import os
import time
from typing import Iterable, List, Optional, Set

import psutil

SHM_DIR = "/dev/shm"
# A churning program's entries live for milliseconds: this long a look later
# they are gone, so the /proc scan below is rarely needed.
SETTLE_SECONDS = 0.05
# A leak must stay this long: a program that closes a segment before it
# unlinks it leaves it unused by anyone for a moment.
LINGER_SECONDS = 1.0
_POLL_SECONDS = 0.05


def shm_entries() -> Set[str]:
    """The names in ``/dev/shm`` now (empty when there is no ``/dev/shm``)."""
    try:
        return set(os.listdir(SHM_DIR))
    except FileNotFoundError:
        return set()


def process_tree(root: Optional[int] = None) -> Set[int]:
    """The pids of ``root`` (default: this process) and of all its descendants."""
    process = psutil.Process(root)
    tree = {process.pid}
    for child in process.children(recursive=True):
        tree.add(child.pid)
    return tree


def _own_entries(names: Iterable[str]) -> Set[str]:
    """The entries of ``names`` that still exist and belong to this user."""
    uid = os.geteuid()
    own = set()
    for name in names:
        try:
            if os.lstat(os.path.join(SHM_DIR, name)).st_uid == uid:
                own.add(name)
        except FileNotFoundError:
            continue
    return own


def _shm_paths_used_by(pid: str) -> Set[str]:
    """The ``/dev/shm`` paths that process ``pid`` maps or has open."""
    prefix = SHM_DIR + "/"
    used = set()
    try:
        with open(f"/proc/{pid}/maps") as maps:
            for line in maps:
                if prefix in line:
                    fields = line.rstrip("\n").split(None, 5)
                    if len(fields) == 6:
                        used.add(fields[5])
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if target.startswith(prefix):
                used.add(target)
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        pass  # gone, or another user's (whose entries are not this user's)
    return used


def used_outside(names: Iterable[str], tree: Set[int]) -> Set[str]:
    """The entries of ``names`` that a process not in ``tree`` maps or holds open."""
    paths = {os.path.join(SHM_DIR, name): name for name in names}
    used: Set[str] = set()
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit() or int(entry.name) in tree:
            continue
        used.update(paths[p] for p in _shm_paths_used_by(entry.name) if p in paths)
        if len(used) == len(paths):
            break
    return used


def leaked_shm_entries(before: Set[str], tree: Optional[Set[int]] = None,
                       linger: float = LINGER_SECONDS) -> List[str]:
    """The entries not in ``before`` that the test of ``tree`` left (module docstring).

    Args:
        before: :func:`shm_entries` when the test began.
        tree: the test's processes (default: this process and its descendants,
            found after the settle time).
        linger: how long a candidate must stay.

    Returns:
        The leaked names, sorted (empty: no leak).
    """
    candidates = _own_entries(shm_entries() - before)
    if not candidates:
        return []
    time.sleep(SETTLE_SECONDS)
    candidates &= shm_entries()
    if not candidates:
        return []
    candidates -= used_outside(candidates, process_tree() if tree is None else tree)
    deadline = time.monotonic() + linger
    while candidates and time.monotonic() < deadline:
        time.sleep(_POLL_SECONDS)
        candidates &= shm_entries()
    return sorted(candidates)
