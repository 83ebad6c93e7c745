"""benchmarks/control_plane.py: the CartPole round trip against its pipe floor."""

import pytest

from tests.support.scripts import load_benchmark_script


@pytest.fixture(scope="module")
def control_plane():
    return load_benchmark_script("control_plane")


def test_round_trip_ratio_divides_by_pipe_plus_in_process_step(control_plane):
    out = control_plane.round_trip_ratio(steps=50, repeats=2)
    assert set(out) == {"process_environment_us", "pipe_us", "in_process_us", "ratio"}
    assert all(len(values) == 2 for values in out.values())
    for process, pipe, local, ratio in zip(*(out[k] for k in (
            "process_environment_us", "pipe_us", "in_process_us", "ratio"))):
        assert pipe > 0 and local > 0
        assert ratio == pytest.approx(process / (pipe + local))


def test_the_bare_pipe_child_answers_with_a_real_time_step_and_exits(control_plane):
    import multiprocessing

    import numpy as np

    parent, child = multiprocessing.get_context("fork").Pipe()
    proc = multiprocessing.get_context("fork").Process(
        target=control_plane._echo, args=(child, control_plane.cartpole_env))
    proc.start()
    child.close()
    try:
        parent.send(np.int64(1))
        reply = parent.recv()
        assert reply.observation.shape == (4,) and int(reply.env_id) == 0
    finally:
        parent.send(None)
        proc.join(10)
    assert proc.exitcode == 0
