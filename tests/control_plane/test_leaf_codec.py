"""alf_env.control_plane.leaf_codec: the packed records of the pipe path's steps."""

import numpy as np
import pytest
import torch

from alf_env.control_plane.leaf_codec import LeafCodec, leaf_layouts
from alf_env.tensor_specs import BoundedTensorSpec, TensorSpec

LAYOUTS = [((), np.dtype(np.int32)), ((3,), np.dtype(np.float32)), ((2, 2), np.dtype(np.uint8))]


def leaves(k=0):
    return [np.array(k, np.int32), np.arange(3, dtype=np.float32) + k, np.full((2, 2), k, np.uint8)]


def test_round_trip_gives_writable_arrays_of_the_layouts():
    codec = LeafCodec(LAYOUTS)
    record = codec.encode(leaves(5))
    assert isinstance(record, bytes) and len(record) == codec.nbytes == 4 + 12 + 4
    out = codec.decode(record)
    for got, want, (shape, dtype) in zip(out, leaves(5), LAYOUTS):
        assert got.shape == shape and got.dtype == dtype
        np.testing.assert_array_equal(got, want)
    out[1][0] = 99.0  # writable, and not shared with the next decode
    assert codec.decode(record)[1][0] == 5.0


def test_encode_casts_what_was_checked_and_encode_exact_refuses_it():
    codec = LeafCodec(LAYOUTS)
    cast = [np.int64(7), [1.0, 2.0, 3.0], np.ones((2, 2), np.int64)]
    assert codec.encode_exact(cast) is None
    assert codec.encode_exact(leaves(1)[:2]) is None
    assert codec.encode_exact(leaves(1)) == codec.encode(leaves(1))
    np.testing.assert_array_equal(codec.decode(codec.encode(cast))[2], np.ones((2, 2)))
    with pytest.raises(ValueError, match="expected 3 leaves, got 2"):
        codec.encode(leaves()[:2])


def test_rows_stack_unbatched_records_and_concatenate_batched_ones():
    codec = LeafCodec(LAYOUTS)
    batch = [np.stack(x) for x in zip(*(leaves(k) for k in range(4)))]
    records = codec.encode_rows(batch, 4)
    assert records == [codec.encode(leaves(k)) for k in range(4)]
    for got, want in zip(codec.decode_rows(records), batch):
        assert got.flags.c_contiguous
        np.testing.assert_array_equal(got, want)
    batched = LeafCodec([((2,) + shape, dtype) for shape, dtype in LAYOUTS], batched=True)
    records = batched.encode_rows(batch, 2)  # 2 envs of 2 rows each
    for got, want in zip(batched.decode_rows(records), batch):
        assert got.shape == want.shape
        np.testing.assert_array_equal(got, want)


def test_leaf_layouts_of_a_spec_nest():
    spec = {"a": TensorSpec((2,), torch.float64), "b": BoundedTensorSpec((), torch.int64, 0, 3)}
    assert leaf_layouts(spec) == [((2,), np.dtype(np.float64)), ((), np.dtype(np.int64))]
    assert leaf_layouts(spec, rows=5)[0] == ((5, 2), np.dtype(np.float64))


def test_process_environment_steps_exact_actions_as_packed_records():
    # Packed or not, ProcessEnvironment.step returns what the env returned.
    from alf_env.control_plane.protocol import MessageType
    from alf_env.environments import suite_gym
    from alf_env.environments.process_environment import ProcessEnvironment
    from alf_env.environments.random_alf_environment import RandomAlfEnvironment

    reference = suite_gym.load("CartPole-v1")  # action spec: int64, shape ()
    reference.seed(3)
    env = ProcessEnvironment(lambda: suite_gym.load("CartPole-v1"))
    env.start()
    sent = []
    request = env._request
    env._request = lambda msg_type, *args, **kwargs: (sent.append(msg_type),
                                                      request(msg_type, *args, **kwargs))[1]
    try:
        env.seed(3)
        env._step_codecs()  # reads the specs (ACCESS / CALL) once
        sent.clear()
        packed, call = MessageType.STEP_PACKED, MessageType.CALL
        for got, want, how in ((env.reset(), reference.reset(), MessageType.RESET_PACKED),
                               (env.step(np.array(1)), reference.step(np.array(1)), packed),
                               (env.step(np.int64(0)), reference.step(0), packed),
                               (env.step(1), reference.step(1), packed),  # np.asarray: int64
                               (env.step(np.int32(1)), reference.step(1), call),  # cast: CALL
                               (env.step(True), reference.step(1), call),
                               (env.step(torch.tensor(0)), reference.step(0), call)):
            assert sent.pop(0) is how
            assert type(got) is type(want)
            for a, b in zip(got[:6], want[:6]):
                assert isinstance(a, np.ndarray) and a.dtype == b.dtype and a.shape == b.shape
                np.testing.assert_array_equal(a, b)
        # An int beyond int64 is not packed: it goes to the worker's checks.
        assert env._step_codecs().pack_action(2 ** 70) is None
    finally:
        env.close()
    spec = TensorSpec((2,), torch.float32)
    tensors = ProcessEnvironment(lambda: RandomAlfEnvironment(
        spec, BoundedTensorSpec((), torch.int64, 0, 2), use_tensor_time_step=True))
    tensors.start()
    try:
        assert isinstance(tensors.reset().observation, torch.Tensor)  # not packed
    finally:
        tensors.close()
