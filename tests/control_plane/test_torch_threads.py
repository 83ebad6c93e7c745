"""Tests of alf_env/control_plane/torch_threads.py: the trainer is told once when
torch's threads crowd the workers' cores."""

import sys
import types

import pytest
from absl import logging

from alf_env.control_plane import torch_threads


def _fake_torch(monkeypatch, threads):
    monkeypatch.setitem(sys.modules, "torch",
                        types.SimpleNamespace(get_num_threads=lambda: threads))


@pytest.mark.parametrize("threads, cpus, workers, better", [
    (2, 2, 2, 1),    # the project's machine: torch's threads and the workers share 2 cores
    (8, 8, 4, 4),    # torch at every core, half of them for workers
    (16, 8, 12, 1),  # more workers than cores
])
def test_advice_names_the_thread_count_that_leaves_the_workers_their_cores(
        monkeypatch, threads, cpus, workers, better):
    _fake_torch(monkeypatch, threads)
    monkeypatch.setattr(torch_threads, "usable_cpu_count", lambda: cpus)
    advice = torch_threads.torch_threads_advice(workers)
    assert advice is not None
    assert f"torch runs {threads} threads on {cpus} CPUs beside {workers} env workers" in advice
    assert f"torch.set_num_threads({better})" in advice


@pytest.mark.parametrize("threads, cpus, workers", [
    (1, 2, 2),   # one torch thread: nothing spins beside the trainer's own thread
    (2, 8, 4),   # enough cores for both
    (4, 8, 4),
])
def test_no_advice_when_the_cores_suffice(monkeypatch, threads, cpus, workers):
    _fake_torch(monkeypatch, threads)
    monkeypatch.setattr(torch_threads, "usable_cpu_count", lambda: cpus)
    assert torch_threads.torch_threads_advice(workers) is None


def test_no_advice_and_no_import_without_torch(monkeypatch):
    monkeypatch.delitem(sys.modules, "torch", raising=False)
    assert torch_threads.torch_threads_advice(2) is None
    assert "torch" not in sys.modules


def test_the_advice_is_logged_once_per_process(monkeypatch):
    _fake_torch(monkeypatch, 2)
    monkeypatch.setattr(torch_threads, "usable_cpu_count", lambda: 2)
    monkeypatch.setattr(torch_threads, "_advised", False)
    logged = []
    monkeypatch.setattr(logging, "info", lambda message, *args: logged.append(message))
    torch_threads.advise_torch_threads(2)
    torch_threads.advise_torch_threads(4)
    assert len(logged) == 1 and "torch.set_num_threads(1)" in logged[0]


@pytest.mark.parametrize("threads, share, better", [(2, 0.5, 1), (2, 0.3, 1), (8, 0.5, 4)])
def test_the_waiting_warning_names_the_share_and_a_thread_count_that_fits(threads, share,
                                                                           better):
    warning = torch_threads.pool_waiting_warning(threads, share)
    assert f"waited for a CPU {share:.0%} of the last second" in warning
    assert f"fewer CPUs than torch's {threads} threads" in warning
    assert f"torch.set_num_threads({better})" in warning


def test_the_waiting_warning_is_logged_once_per_process(monkeypatch):
    monkeypatch.setattr(torch_threads, "_warned", False)
    logged = []
    monkeypatch.setattr(logging, "warning", lambda message, *args: logged.append(message))
    torch_threads.warn_pool_waiting(2, 0.5)
    torch_threads.warn_pool_waiting(2, 0.6)
    assert len(logged) == 1 and "torch.set_num_threads(1)" in logged[0]
