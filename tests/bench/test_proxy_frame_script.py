"""benchmarks/proxy_frame.py: GymProxy's frame steps through shared memory against the pipe."""

import json

import numpy as np
import psutil
import pytest

from tests.support.scripts import load_benchmark_script


@pytest.fixture(scope="module")
def proxy_frame():
    return load_benchmark_script("proxy_frame")


def test_both_transports_give_the_frame_env_the_same_frames(proxy_frame):
    from alf_env import GymProxy

    shared = GymProxy(proxy_frame.FrameEnv, context="fork")
    pipe = GymProxy(proxy_frame.FrameEnv, context="fork", shared_memory=False)
    try:
        for a, b in zip(shared.reset(seed=0), pipe.reset(seed=0)):
            np.testing.assert_equal(a, b)
        for _ in range(3):
            frame, other = shared.step(0)[0], pipe.step(0)[0]
            assert frame.shape == (480, 640, 3) and frame.dtype == np.uint8
            assert np.array_equal(frame, other) and frame.any()
    finally:
        shared.close()
        pipe.close()


def test_main_prints_paired_ratios_of_interleaved_repeats_and_writes_json(
        proxy_frame, capsys, tmp_path):
    before = psutil.Process().children()
    out = tmp_path / "frame.json"
    assert proxy_frame.main(["--seconds", "0.2", "--repeats", "2", "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "shared / pipe, paired: " in text
    saved = json.loads(out.read_text())
    assert saved["shape"] == [480, 640, 3] and saved["repeats"] == 2
    rates = saved["steps_per_second"]
    assert all(len(rates[t]) == 2 and all(r > 0 for r in rates[t]) for t in ("shared", "pipe"))
    assert saved["ratios"] == [s / p for s, p in zip(rates["shared"], rates["pipe"])]
    assert psutil.Process().children() == before
