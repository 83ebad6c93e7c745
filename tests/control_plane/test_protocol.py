"""alf_env.control_plane.protocol: the message enum and its pickled messages on one pipe."""

import multiprocessing
import os
import pickle
import threading

import numpy as np
import pytest

from alf_env.control_plane.protocol import MessageType, read_message, send_message
from tests.support.probe_envs import OnlyHere


@pytest.fixture
def pipe():
    a, b = multiprocessing.Pipe()
    yield a, b
    a.close()
    b.close()


def test_messages_arrive_whole_and_in_order(pipe):
    a, b = pipe
    a.send((MessageType.CALL, ("step", (np.ones(2),), {})))
    a.send((MessageType.RESULT, b"\x01\x02"))
    msg_type, (name, args, kwargs) = read_message(b)
    assert msg_type is MessageType.CALL and name == "step" and kwargs == {}
    np.testing.assert_array_equal(args[0], np.ones(2))
    assert read_message(b) == (MessageType.RESULT, b"\x01\x02")


@pytest.mark.parametrize("owed", [False, True])
def test_send_message_frames_as_connection_send_does(pipe, owed):
    # Owed an answer, it writes the frame itself (never blocking on a full pipe).
    a, b = pipe
    message = (MessageType.RESULT, bytes(range(256)) * 400)  # more than a pipe holds
    received = []
    reader = threading.Thread(target=lambda: received.append(read_message(b)))
    reader.start()
    alive, quiet = os.pipe()  # a sentinel that does not fire
    try:
        assert send_message(a, pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL),
                            alive, lambda: owed, lambda: None)
        reader.join(10)
    finally:
        os.close(alive)
        os.close(quiet)
    assert received == [message]


def test_a_message_that_does_not_unpickle_is_read_whole(pipe):
    # Made elsewhere than where it is read: its error is returned, and the pipe
    # stays in step for the next message.
    a, b = pipe
    a.send((MessageType.RESULT, OnlyHere(made_in=os.getpid() + 1)))
    a.send((MessageType.RESULT, b"next"))
    msg_type, error = read_message(b)
    assert msg_type is None and isinstance(error, AttributeError)
    assert "OnlyHere: made in process" in str(error)
    assert read_message(b) == (MessageType.RESULT, b"next")


@pytest.mark.parametrize("data", [b"\x7fjunk", b""])
def test_bytes_that_are_no_pickle_fail_only_their_message(pipe, data):
    a, b = pipe
    a.send_bytes(data)
    a.send((MessageType.RESULT, 1))
    msg_type, error = read_message(b)
    assert msg_type is None and isinstance(error, Exception)
    assert read_message(b) == (MessageType.RESULT, 1)


def test_a_closed_pipe_raises_what_connection_recv_raises(pipe):
    a, b = pipe
    a.close()
    with pytest.raises(EOFError):
        read_message(b)
