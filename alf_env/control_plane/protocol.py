"""The parent <-> worker pipe protocol: its messages and the wire's constants.

Parent and worker exchange ``(MessageType, payload)`` tuples; every request is
answered by exactly one ``RESULT`` or ``EXCEPTION``, in order. The hot path's
packed records travel as raw frames (a type byte, then the record), not
pickles: every ``MessageType`` value is below the pickle ``PROTO`` opcode, so
the first byte tells the two apart. See docs/protocol.rst, "The message protocol".
"""

import enum
import os
import pickle
import select
import struct
from multiprocessing.connection import Connection
from multiprocessing.reduction import ForkingPickler
from typing import Any, Callable, Optional, Sequence, Tuple, Union

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
    FAST_LOOP = 7
    STEP_PACKED = 8   # payload: the action as one packed record (leaf_codec)
    RESET_PACKED = 9  # payload: empty; both answered by RESULT with a packed time step


# The requests that travel as raw frames (see the module docstring); their
# answers do too.
RAW_REQUESTS = frozenset([MessageType.STEP_PACKED, MessageType.RESET_PACKED])

# The first byte of every pickle multiprocessing writes (the PROTO opcode).
_PICKLE_FIRST_BYTE = pickle.PROTO[0]
assert all(0 < t.value < _PICKLE_FIRST_BYTE for t in MessageType), \
    "a MessageType value must fit below the pickle PROTO opcode to tag a raw frame"
_BY_FIRST_BYTE = {t.value: t for t in MessageType}
#: Bytes of a message: a raw frame's record, or a pickle (ForkingPickler gives a memoryview).
Bytes = Union[bytes, memoryview]
# Connection's framing: a 4-byte big-endian length, then the message.
_LENGTH_AND_TAG = struct.Struct("!iB")
_MAX_FRAME = 0x7fffffff  # longer messages get Connection's 12-byte header


def send_raw(conn: Connection, msg_type: MessageType, record: Bytes = b"") -> None:
    """Sends ``(msg_type, record)`` as a raw frame (no pickling), in one write.

    ``Connection.send_bytes`` splits a message over 16 KiB into two writes, the
    first waking the reader for only 4 bytes. Same framing: ``recv_bytes`` reads it.
    """
    size = len(record) + 1
    if size > _MAX_FRAME:
        conn.send_bytes(bytes((msg_type.value,)) + record)
        return
    frame = memoryview(_LENGTH_AND_TAG.pack(size, msg_type.value) + record)
    fd = conn.fileno()  # OSError if the connection was closed, as send_bytes
    while frame:
        frame = frame[os.write(fd, frame):]


def frame_parts(msg_type: Optional[MessageType], data: Bytes) -> Tuple[Bytes, ...]:
    """The bytes ``Connection.recv_bytes`` reads as one message, in parts to write in turn.

    Args:
        msg_type: a raw frame's type, or ``None`` if ``data`` is a whole pickle.
    """
    tag = b"" if msg_type is None else bytes((msg_type.value,))
    size = len(tag) + len(data)
    header = (struct.pack("!i", size) if size <= _MAX_FRAME
              else struct.pack("!iQ", -1, size))
    return header + tag, data


def send_message(conn: Connection, msg_type: Optional[MessageType], data: Bytes,
                 sentinel: int, owed: Callable[[], bool], receive: Callable[[], None]) -> bool:
    """Sends one message whole: a raw frame, or pickled ``data`` if ``msg_type`` is ``None``.

    While an answer is ``owed()``, as :func:`send_receiving`.
    """
    if owed():
        return send_receiving(conn, frame_parts(msg_type, data), sentinel, owed, receive)
    if msg_type is not None:
        send_raw(conn, msg_type, data)
    else:
        conn.send_bytes(data)
    return True


def send_receiving(conn: Connection, parts: Sequence[Bytes], sentinel: int,
                   owed: Callable[[], bool], receive: Callable[[], None]) -> bool:
    """Writes ``parts`` on ``conn`` without ever blocking on a full pipe.

    While ``owed()``, the other side may be blocked writing to us: each time
    ``conn`` turns readable, ``receive()`` reads one message, freeing it to read ours.

    Returns:
        ``False`` if the other process (``sentinel``) ended first.
    Raises:
        BrokenPipeError, ConnectionResetError: the other end is closed.
    """
    fd = conn.fileno()
    poller = select.poll()
    poller.register(sentinel, select.POLLIN)
    poller.register(fd, select.POLLOUT)
    for part in parts:
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
    whole that did not decode: the pipe stays in step, and the reader decides whom it fails.

    Raises:
        EOFError, OSError: the other end is gone.
    """
    data = conn.recv_bytes()
    try:
        return decode_message(data)
    except Exception as exc:  # noqa: BLE001 -- handed to the reader
        return None, exc


def decode_message(data: bytes) -> Tuple[MessageType, Any]:
    """The ``(MessageType, payload)`` of one message's bytes (a pickle or a raw frame).

    Raises:
        ValueError: the first byte is neither a pickle's nor a message type's.
        Exception: what unpickling raised.
    """
    first = data[0] if data else None
    if first == _PICKLE_FIRST_BYTE:
        message: Tuple[MessageType, Any] = ForkingPickler.loads(data)
        return message
    msg_type = None if first is None else _BY_FIRST_BYTE.get(first)
    if msg_type is None:
        raise ValueError(f"pipe message: expected a pickle (first byte 0x80) or a raw "
                         f"frame tagged with a MessageType value "
                         f"{sorted(_BY_FIRST_BYTE)}, got first byte {first!r} of "
                         f"{len(data)} bytes")
    return msg_type, data[1:]


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
    ``EXCEPTION`` and exit, unread in a native loop. Only an exit (``exitcode >= 0``)
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
