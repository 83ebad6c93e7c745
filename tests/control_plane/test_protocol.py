"""alf_env.control_plane.protocol: the message enum and the two encodings on one pipe."""

import multiprocessing
import os
import pickle
import re

import numpy as np
import pytest

from alf_env.control_plane.protocol import RAW_REQUESTS, MessageType, read_message, send_raw
from tests.support.probe_envs import OnlyHere


@pytest.fixture
def pipe():
    a, b = multiprocessing.Pipe()
    yield a, b
    a.close()
    b.close()


def test_every_message_type_can_tag_a_raw_frame():
    # A raw frame's first byte is the type's value; a pickle's is 0x80.
    assert all(0 < t.value < pickle.PROTO[0] for t in MessageType)
    assert RAW_REQUESTS == {MessageType.STEP_PACKED, MessageType.RESET_PACKED}


@pytest.mark.parametrize("msg_type, record", [
    (MessageType.STEP_PACKED, np.arange(3, dtype=np.float32).tobytes()),
    (MessageType.RESET_PACKED, b""),
    (MessageType.RESULT, bytes(range(256)) * 200),  # larger than a pipe read, any bytes
    (MessageType.RESULT, b"\x80starts like a pickle"),  # only the first byte is the tag
])
def test_raw_frames_arrive_as_the_pair_sent(pipe, msg_type, record):
    a, b = pipe
    send_raw(a, msg_type, record)
    got_type, payload = read_message(b)
    assert got_type is msg_type and payload == record and type(payload) is bytes


def test_raw_frames_cost_one_tag_byte_and_no_pickle(pipe):
    a, b = pipe
    send_raw(a, MessageType.STEP_PACKED, b"abc")
    assert b.recv_bytes() == bytes((MessageType.STEP_PACKED.value,)) + b"abc"


def test_pickled_messages_still_arrive_whole_in_order_with_raw_ones(pipe):
    a, b = pipe
    a.send((MessageType.CALL, ("step", (np.ones(2),), {})))
    send_raw(a, MessageType.RESULT, b"\x01\x02")
    a.send((MessageType.RESULT, b"\x01\x02"))  # the same pair, pickled
    msg_type, (name, args, kwargs) = read_message(b)
    assert msg_type is MessageType.CALL and name == "step" and kwargs == {}
    np.testing.assert_array_equal(args[0], np.ones(2))
    assert read_message(b) == (MessageType.RESULT, b"\x01\x02")
    assert read_message(b) == (MessageType.RESULT, b"\x01\x02")


@pytest.mark.parametrize("data, first", [(b"\x7fjunk", "127"), (b"", "None")])
def test_an_unknown_first_byte_is_named(pipe, data, first):
    a, b = pipe
    a.send_bytes(data)
    msg_type, error = read_message(b)
    assert msg_type is None and isinstance(error, ValueError)
    assert re.search(rf"expected a pickle \(first byte 0x80\) or a raw frame .* got first "
                     rf"byte {first} of {len(data)} bytes", str(error))


def test_a_message_that_does_not_unpickle_is_read_whole(pipe):
    # Made elsewhere than where it is read: its error is returned, and the pipe
    # stays in step for the next message.
    a, b = pipe
    a.send((MessageType.RESULT, OnlyHere(made_in=os.getpid() + 1)))
    send_raw(a, MessageType.RESULT, b"next")
    msg_type, error = read_message(b)
    assert msg_type is None and isinstance(error, AttributeError)
    assert "OnlyHere: made in process" in str(error)
    assert read_message(b) == (MessageType.RESULT, b"next")


def test_a_closed_pipe_raises_what_connection_recv_raises(pipe):
    a, b = pipe
    a.close()
    with pytest.raises(EOFError):
        read_message(b)


def test_a_large_frame_goes_in_one_write_and_partial_writes_are_resumed(pipe, monkeypatch):
    from alf_env.control_plane import protocol

    a, b = pipe
    record = bytes(range(256)) * 100  # 25.6 KiB: Connection.send_bytes would write twice
    writes = []
    real_write = protocol.os.write
    monkeypatch.setattr(protocol.os, "write",
                        lambda fd, data: writes.append(len(data)) or real_write(fd, data))
    send_raw(a, MessageType.RESULT, record)
    assert writes == [4 + 1 + len(record)]
    assert read_message(b) == (MessageType.RESULT, record)
    # A write that takes only part of the frame (e.g. interrupted by a signal).
    writes.clear()
    monkeypatch.setattr(protocol.os, "write",
                        lambda fd, data: writes.append(len(data)) or real_write(fd, data[:1000]))
    send_raw(a, MessageType.RESULT, record)
    assert len(writes) == 26 and writes[0] == 4 + 1 + len(record)
    assert read_message(b) == (MessageType.RESULT, record)


def test_sending_on_a_closed_connection_raises_like_connection_send(pipe):
    a, b = pipe
    a.close()
    with pytest.raises(OSError):
        send_raw(a, MessageType.STEP_PACKED, b"x")
    b.close()
