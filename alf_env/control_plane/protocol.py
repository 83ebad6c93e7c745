"""The parent <-> worker pipe protocol: its messages and the wire's constants.

Parent and worker exchange pickled ``(MessageType, payload)`` tuples; every
request is answered by exactly one ``RESULT`` or ``EXCEPTION``, in order. See
docs/protocol.rst, "The message protocol".
"""

import enum
import os
import select
import struct
from multiprocessing.connection import Connection
from multiprocessing.reduction import ForkingPickler
from typing import Any, Callable, Optional, Tuple, Union

START_METHODS = ("fork", "spawn", "forkserver")

# After the worker's sentinel fires, how long to wait for data it may have
# written just before exiting (an exception report) to become readable.
DEATH_GRACE = 0.05


class MessageType(enum.Enum):
    """The messages of the pipe protocol (see docs/protocol.rst)."""
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
    """Sends one pickled message whole, without ever blocking on a full pipe.

    While ``owed()``, the other side may be blocked writing to us: each time
    ``conn`` turns readable, ``receive()`` reads one message, freeing it to read ours.

    Returns:
        ``False`` if the other process (``sentinel``) ended first.
    Raises:
        BrokenPipeError, ConnectionResetError: the other end is closed.
    """
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
    """Writes what fits of ``data`` on ``fd`` now (0 if nothing does)."""
    os.set_blocking(fd, False)
    try:
        return os.write(fd, data)
    except BlockingIOError:
        return 0
    finally:
        os.set_blocking(fd, True)


def read_message(conn: Connection) -> Tuple[Optional[MessageType], Any]:
    """One message as ``(MessageType, payload)``, or ``(None, error)`` for one read
    whole that did not unpickle: the pipe stays in step, and the reader decides whom it fails.

    Raises:
        EOFError, OSError: the other end is gone.
    """
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
    # An exception (a signal handler's: Ctrl-C) cut a message short on the
    # pipe: what is in it no longer lines up with the requests; only close().
    OUT_OF_STEP = "out of step"
    DEAD = "dead"
    CLOSED = "closed"


# The CALL name of ProcessEnvironment.sync_progress: the worker forwards the
# progress to the env only if the env defines ``sync_progress`` (no env
# method can have this name).
SYNC_PROGRESS_CALL = "<sync_progress>"


def read_last_words(conn: Connection, exitcode: Optional[int]) -> str:
    """The traceback a worker that ended by itself sent before it exited, or ``""``.

    An env raising ``SystemExit``/``KeyboardInterrupt`` makes the worker send a fatal
    ``EXCEPTION`` and exit, unread in a job loop. Only an exit (``exitcode >= 0``)
    guarantees whole messages; a killed worker may have been cut short.
    """
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
