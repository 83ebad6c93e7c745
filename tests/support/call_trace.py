"""Recording the calls into alf_env that a process and the workers it forks make, in order.

:class:`CallRecorder` sets a ``sys.setprofile`` hook in the calling thread; a
worker forked while it is set inherits it (fork copies the thread's state),
so the workers record their calls to the same file. Each record is one line,
written with one ``write`` to a file opened with ``O_APPEND``, so lines of
several processes never mix. Python functions of the package are recorded
as ``"<path under alf_env/>:<qualified name>"``, native functions of
``alf_env._penv`` by their name, when called and when they return (a worker
blocked in ``wait_job`` returns from it inside the recorded window).
"""

import os
import sys
from pathlib import Path
from types import FrameType
from typing import Any, Dict, List, NamedTuple, Optional

import alf_env

PACKAGE_ROOT = str(Path(alf_env.__file__).resolve().parent) + os.sep
NATIVE_MODULE = "alf_env._penv"


class Record(NamedTuple):
    pid: int
    event: str   # "call", "native" (a native call or return) or "mark"
    name: str


class CallRecorder:
    """Records calls into alf_env to ``path`` while the ``with`` block runs.

    Args:
        path: the file to write (created or truncated).
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd = -1

    def __enter__(self) -> "CallRecorder":
        self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND)
        sys.setprofile(self._profile)
        return self

    def __exit__(self, *exc_info: Any) -> None:
        sys.setprofile(None)
        os.close(self._fd)

    def mark(self, label: str) -> None:
        """Writes a mark (e.g. where the recorded step begins) from this process."""
        self._write("mark", label)

    def _write(self, event: str, name: str) -> None:
        os.write(self._fd, f"{os.getpid()} {event} {name}\n".encode())

    def _profile(self, frame: FrameType, event: str, arg: Any) -> None:
        if event == "call":
            filename = frame.f_code.co_filename
            if filename.startswith(PACKAGE_ROOT):
                self._write("call", f"{filename[len(PACKAGE_ROOT):]}:"
                                    f"{frame.f_code.co_qualname}")
        elif event in ("c_call", "c_return"):
            if getattr(arg, "__module__", None) == NATIVE_MODULE:
                self._write("native", arg.__name__)


def read_records(path: Path) -> List[Record]:
    records = []
    for line in path.read_text().splitlines():
        pid, event, name = line.split(" ", 2)
        records.append(Record(int(pid), event, name))
    return records


def step_calls(records: List[Record], begin: str, end: str) -> Dict[int, List[Record]]:
    """The calls of one step, by pid: this process's between its marks ``begin``
    and ``end``; each other process's from ``begin`` until it returns to
    ``wait_job`` after its ``finish`` (what a worker does after it finished
    may be written after ``end``)."""
    pid = os.getpid()
    first = records.index(Record(pid, "mark", begin))
    last = records.index(Record(pid, "mark", end))
    by_pid: Dict[int, List[Record]] = {pid: [r for r in records[first + 1:last]
                                             if r.pid == pid and r.event != "mark"]}
    finished, done = set(), set()
    for record in records[first + 1:]:
        if record.pid == pid or record.pid in done:
            continue
        if record.pid in finished and record == Record(record.pid, "native", "wait_job"):
            done.add(record.pid)
            continue
        by_pid.setdefault(record.pid, []).append(record)
        if record == Record(record.pid, "native", "finish"):
            finished.add(record.pid)
    return by_pid


def first_missing(expected: List[Record], made: List[Record]) -> Optional[Record]:
    """The first of ``expected`` not found in ``made`` after those before it
    (``None``: ``expected`` is a subsequence of ``made``)."""
    position = 0
    for wanted in expected:
        while position < len(made) and made[position][1:] != wanted[1:]:
            position += 1
        if position == len(made):
            return wanted
        position += 1
    return None
