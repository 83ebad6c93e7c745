"""The parent <-> worker pipe protocol: its messages and the wire's constants
(docs/protocol.rst, "The message protocol")."""

import enum
import os
import select
import struct
from multiprocessing.connection import Connection
from multiprocessing.reduction import ForkingPickler
from typing import Any, Callable, Optional, Tuple, Union

START_METHODS = ("fork", "spawn", "forkserver")

# How long, after a worker's sentinel fires, data it wrote just before may take to arrive.
DEATH_GRACE = 0.05


class MessageType(enum.Enum):
    """The messages of the pipe protocol."""
    READY = 1
    ACCESS = 2
    CALL = 3
    RESULT = 4
    EXCEPTION = 5
    CLOSE = 6
    JOB_LOOP = 7


#: Bytes of a message (ForkingPickler gives a memoryview).
Bytes = Union[bytes, memoryview]
_MAX_FRAME = 0x7fffffff  # longer messages get Connection's 12-byte header


def send_message(conn: Connection, data: Bytes, sentinel: int, owed: Callable[[], bool],
                 receive: Callable[[], None]) -> bool:
    """Sends one pickled message whole, never blocked by a full pipe: while ``owed()`` the
    other side may be blocked writing to us, so each time ``conn`` turns readable,
    ``receive()`` reads one message. Returns ``False`` if process ``sentinel`` ended first;
    raises ``BrokenPipeError`` or ``ConnectionResetError`` if the other end is closed."""
    if not owed():
        conn.send_bytes(data)
        return True
    # Connection's framing: a 4-byte big-endian length (or -1 and 8 bytes), then the data.
    size = len(data)
    header = struct.pack("!i", size) if size <= _MAX_FRAME else struct.pack("!iQ", -1, size)
    fd = conn.fileno()
    poller = select.poll()
    poller.register(sentinel, select.POLLIN)
    poller.register(fd, select.POLLOUT)
    for part in (header, data):
        view = memoryview(part)
        while view:
            written = _write_some(fd, view)
            if written:
                view = view[written:]
                continue
            reading = owed()
            poller.modify(fd, select.POLLOUT | (select.POLLIN if reading else 0))
            events = dict(poller.poll())
            if reading and events.get(fd, 0) & (select.POLLIN | select.POLLHUP):
                receive()
            elif sentinel in events and fd not in events:
                return False
    return True


def _write_some(fd: int, data: memoryview) -> int:
    """Writes what fits of ``data`` on ``fd`` now."""
    os.set_blocking(fd, False)
    try:
        return os.write(fd, data)
    except BlockingIOError:
        return 0
    finally:
        os.set_blocking(fd, True)


def read_message(conn: Connection) -> Tuple[Optional[MessageType], Any]:
    """One message as ``(MessageType, payload)``, or ``(None, error)`` for one read whole that
    did not unpickle (the pipe stays in step); ``EOFError``/``OSError``: the other end is gone."""
    data = conn.recv_bytes()
    try:
        message: Tuple[MessageType, Any] = ForkingPickler.loads(data)
    except Exception as exc:  # noqa: BLE001 -- handed to the reader
        return None, exc
    return message


class EnvState(enum.Enum):
    """Life cycle of a :class:`ProcessEnvironment`."""
    NEW = "new"
    STARTING = "starting"
    RUNNING = "running"
    # A Ctrl-C cut a message short: the pipe no longer lines up with the requests.
    OUT_OF_STEP = "out of step"
    DEAD = "dead"
    CLOSED = "closed"


# The CALL name of ProcessEnvironment.sync_progress (no env method can have it).
SYNC_PROGRESS_CALL = "<sync_progress>"


def read_last_words(conn: Connection, exitcode: Optional[int]) -> str:
    """The traceback of the fatal ``EXCEPTION`` an exited worker sent, or ``""``."""
    words = ""
    if exitcode is None or exitcode < 0:
        return words
    try:
        while conn.poll(0):
            msg_type, payload = read_message(conn)
            if msg_type is MessageType.EXCEPTION and getattr(payload, "fatal", False):
                words = payload.traceback_text
    except (EOFError, OSError):
        pass
    return words
