"""benchmarks/fault_latency.py: the time from an injected fault to the front end's error."""

import psutil
import pytest

from tests.support.scripts import load_benchmark_script


@pytest.fixture(scope="module")
def fault_latency():
    return load_benchmark_script("fault_latency")


@pytest.fixture
def vector(fault_latency):
    return next(fe for fe in fault_latency.FRONT_ENDS if fe.name == "FastVectorEnv")


def test_an_exception_in_step_is_timed_until_it_is_raised(fault_latency, vector):
    before = psutil.Process().children()
    assert 0 < fault_latency.exception_in_step(vector) < 5
    assert psutil.Process().children() == before


def test_a_worker_death_is_timed_from_the_death_to_the_error(fault_latency, vector):
    before = psutil.Process().children()
    assert 0 < fault_latency.death(vector, "sigkill", "step") < 5
    assert psutil.Process().children() == before


def test_a_fault_that_does_not_raise_is_an_error_of_the_script(fault_latency):
    with pytest.raises(AssertionError, match="expected ValueError"):
        fault_latency._expect(ValueError, lambda: None)
