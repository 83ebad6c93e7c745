"""The benchmark's data types: plans, runners, actions and results."""

import statistics
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Dict, List, NamedTuple, Optional, Tuple

import numpy as np

from alf_env.bench.workloads import make_env

NUM_ACTIONS = 64  # distinct precomputed batched actions, cycled through
ACTION_SEED = 0


class Skip(Exception):
    """A backend that cannot run here (reported as skipped, not as an error)."""


@dataclass(frozen=True)
class Plan:
    """How long each measurement runs.

    Attributes:
        warmup: untimed rounds after reset.
        steps: timed rounds, or ``None`` to run for ``seconds``.
        seconds: the time budget when ``steps`` is ``None``.
    """
    warmup: int
    steps: Optional[int]
    seconds: float


class Runner(NamedTuple):
    """A started, reset env ready to be stepped.

    Attributes:
        step: ``step(k)`` does one round with precomputed action ``k``: one
            batched step for the batched backends, ``num_envs`` env-steps of
            the one env for ``single``; returns what the env's step returned
            (``--policy`` reads the observations from it).
        close: releases everything the runner started; idempotent.
        env_steps_per_round: env-steps in one round (``None``: ``num_envs``).
        timed: for runners that time themselves (``ceiling``):
            ``timed(plan)`` warms up, runs and returns (env-steps, seconds);
            ``step`` is then unused.
    """
    step: Callable[[int], Any]
    close: Callable[[], None]
    env_steps_per_round: Optional[int] = None
    timed: Optional[Callable[[Plan], Tuple[int, float]]] = None


class Actions:
    """The fixed actions of one case, in the forms the backends take.

    Args:
        numpy: ``NUM_ACTIONS`` batched actions, each of shape ``(num_envs, ...)``.
    """

    def __init__(self, numpy: List[np.ndarray]) -> None:
        self.numpy = numpy
        self._torch: Optional[List[Any]] = None

    @property
    def torch(self) -> List[Any]:
        """The same as torch tensors (for the ALF-style envs; torch is imported
        only when a backend needs them)."""
        if self._torch is None:
            import torch

            self._torch = [torch.as_tensor(b) for b in self.numpy]
        return self._torch

    @staticmethod
    def make(workload: str, num_envs: int) -> "Actions":
        """Samples the actions from the workload's action space with a fixed seed."""
        probe = make_env(workload)
        try:
            space = probe.action_space
            space.seed(ACTION_SEED)
            batches = [np.stack([np.asarray(space.sample()) for _ in range(num_envs)])
                       for _ in range(NUM_ACTIONS)]
        finally:
            probe.close()
        return Actions(batches)

    def per_env(self) -> List[np.ndarray]:
        """Every env's action of every batch, in order (for the unbatched loops)."""
        return [a for batch in self.numpy for a in batch]


@dataclass
class Measurement:
    """One timed run of one backend.

    Attributes:
        env_steps: env-steps done while the clock ran.
        seconds: how long they took.
        startup_seconds: start-up, reset and warm-up (not part of the rate).
    """
    env_steps: int
    seconds: float
    startup_seconds: float

    @property
    def rate(self) -> float:
        """Env-steps per second."""
        return self.env_steps / self.seconds


@dataclass
class CaseResult:
    """All repeats of one backend on one (workload, num_envs) case.

    Attributes:
        workload: the workload name.
        num_envs: envs in the batch.
        backend: the backend name (a key of ``BACKENDS``).
        status: ``"ok"``, ``"skipped"`` or ``"error"``.
        note: why it was skipped, or the error.
        runs: the measurements, one per repeat.
    """
    workload: str
    num_envs: int
    backend: str
    status: str = "ok"
    note: str = ""
    runs: List[Measurement] = field(default_factory=list)

    @property
    def rates(self) -> List[float]:
        """Env-steps/s of each run."""
        return [m.rate for m in self.runs]

    @property
    def median(self) -> Optional[float]:
        """Median env-steps/s, ``None`` without runs."""
        return statistics.median(self.rates) if self.runs else None

    def to_json(self) -> Dict[str, Any]:
        """A JSON-ready dict of the result and its runs."""
        out = asdict(self)
        out["runs"] = [dict(asdict(m), rate=m.rate) for m in self.runs]
        if self.runs:
            out.update(median=self.median, min=min(self.rates), max=max(self.rates))
        return out
