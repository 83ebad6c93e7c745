"""What a training script adds around the env step: busy processes and a policy.

- :class:`BusyLoad` (``--load N``): N processes that spin on a CPU each for as long
  as the run lasts, like another training or a data loader sharing the machine.
- :class:`MlpPolicy` (``--policy mlp``): a torch MLP's forward pass on every batch
  of observations before the next step, with torch's threads at their default
  (``--torch-threads`` sets them). Its output is not used as the action, so that
  every backend steps the same precomputed actions; it costs what a policy costs.
"""

import signal
import subprocess
import sys
import time
from typing import Any, Dict, List, Optional

import numpy as np

#: The busy loop each load process runs.
BUSY_LOOP = "while True: pass"
#: Hidden layers of the policy (as in a typical PPO MLP policy).
HIDDEN = (256, 256)
#: Outputs of the policy: a fixed size, its cost barely depends on it.
OUTPUTS = 8
POLICIES = ("none", "mlp")


class BusyLoad:
    """N busy-loop processes, started by ``start()`` and ended by ``stop()``.

    A context manager; ``stop()`` is bounded and may be called more than once.

    Args:
        count: how many processes (0: none).
        apart: run them in a session of their own, as another user's job or
            another terminal's training runs. The kernel's autogroups then share
            the CPUs between sessions before threads: the measuring process gets
            about one core per busy session, whatever its thread count. Without
            it they share the measuring process's session, like a data loader
            it started, and its threads get the cores by count.
    """

    def __init__(self, count: int, apart: bool = False) -> None:
        if count < 0:
            raise ValueError(f"--load: expected a number of processes >= 0, got {count}")
        self.count = count
        self.apart = apart
        self._procs: List["subprocess.Popen[bytes]"] = []

    def start(self) -> "BusyLoad":
        """Starts the processes (their output discarded)."""
        for _ in range(self.count - len(self._procs)):
            self._procs.append(subprocess.Popen(
                [sys.executable, "-c", BUSY_LOOP], stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                start_new_session=self.apart))
        return self

    @property
    def pids(self) -> List[int]:
        """The pids of the running load processes."""
        return [p.pid for p in self._procs if p.poll() is None]

    def stop(self, timeout: float = 5.0) -> None:
        """SIGKILLs every process and reaps it (a busy loop has nothing to clean up)."""
        procs, self._procs = self._procs, []
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGKILL)
        deadline = time.monotonic() + timeout
        for proc in procs:
            try:
                proc.wait(max(deadline - time.monotonic(), 0.01))
            except subprocess.TimeoutExpired:  # unkillable (stopped in a debugger?)
                pass

    def __enter__(self) -> "BusyLoad":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()


def observation_of(result: Any) -> Any:
    """The batch of observations in what a runner's step returned, or ``None``.

    gymnasium, SB3, EnvPool and PufferLib steps return a tuple whose first item
    is the observations; ALF steps return a ``TimeStep``.
    """
    if isinstance(result, tuple) and not hasattr(result, "_fields"):
        return result[0]
    return getattr(result, "observation", None)


class MlpPolicy:
    """A torch MLP (``HIDDEN``, Tanh) run forward on every batch of observations.

    A network is built for each observation size it sees (its input is the
    flattened observation), so one policy serves every backend and workload.

    Args:
        torch_threads: ``torch.set_num_threads`` before the first forward pass;
            ``None`` leaves torch at its default, as a training script does.
    """

    def __init__(self, torch_threads: Optional[int] = None) -> None:
        import torch

        if torch_threads is not None:
            if torch_threads < 1:
                raise ValueError(f"--torch-threads: expected >= 1, got {torch_threads}")
            torch.set_num_threads(torch_threads)
        self._torch = torch
        self._nets: Dict[int, Any] = {}
        self.forwards = 0

    def _batch(self, obs: Any) -> Any:
        torch = self._torch
        if not isinstance(obs, torch.Tensor):
            obs = torch.from_numpy(np.ascontiguousarray(obs))
        return obs.reshape(obs.shape[0], -1).to(torch.float32)

    def __call__(self, obs: Any) -> None:
        """One forward pass on ``obs`` (``None``: a step that gave none; skipped)."""
        if obs is None:
            return
        torch = self._torch
        x = self._batch(obs)
        net = self._nets.get(x.shape[1])
        if net is None:
            torch.manual_seed(0)
            sizes = (x.shape[1],) + HIDDEN
            layers: List[Any] = []
            for fan_in, fan_out in zip(sizes, sizes[1:]):
                layers += [torch.nn.Linear(fan_in, fan_out), torch.nn.Tanh()]
            net = self._nets[x.shape[1]] = torch.nn.Sequential(
                *layers, torch.nn.Linear(sizes[-1], OUTPUTS))
        with torch.no_grad():
            net(x)
        self.forwards += 1


def make_policy(name: str, torch_threads: Optional[int]) -> Optional[MlpPolicy]:
    """The policy ``--policy name`` asks for (``None`` for ``"none"``)."""
    if name == "none":
        return None
    if name == "mlp":
        return MlpPolicy(torch_threads)
    raise ValueError(f"--policy: expected one of {', '.join(POLICIES)}, got {name!r}")
