"""Shared-memory blocks: the Python face of the native engine ``alf_env._penv``.

A :class:`SharedBlock` is one anonymous shared-memory region that the main
process and its worker processes map. It holds a *control block* (job slots,
the finished-worker queue and the futex words through which processes hand
jobs to each other) and one numpy array per *field* (actions, observations,
rewards, ...), each with ``num_rows`` rows. ``FastParallelEnvironment`` writes
actions into the rows of a worker, posts a ``STEP`` job, and reads the
worker's observation rows once :meth:`Controller.wait` returns the worker.

Layout
------
``compute_layout(num_workers, num_rows, row_bytes)`` gives the same offsets in
every process::

    offset 0          control block (size depends on num_workers only):
                      header (magic, layout version, num_workers, sizes),
                      completion futex word + sleeping flag of the main
                      process, tail of the finished queue, one 64-byte
                      JobSlot per worker, the queue's cells
    (64-aligned)      field 0: num_rows rows, row_stride bytes apart
    (64-aligned)      field 1: ...

Each row is padded to a multiple of 64 bytes (``row_stride``) so that workers
writing neighbouring rows never share a cache line, and every array starts
64-byte aligned (enough for any numpy dtype). The numpy view of a field has
shape ``(num_rows, *shape)`` and strides ``(row_stride, <C-contiguous>)``:
each row is C-contiguous, the rows are not adjacent.

Job-slot state machine
----------------------
One job at a time per worker::

    idle --post()--> posted --worker wait_job()--> running
         --worker finish()--> finished --main wait() returns it--> idle

* ``Controller.post(ids, job, arg)`` writes the job type and its 64-bit
  argument into each slot, bumps the slot's ``seq`` futex word and wakes the
  worker if (and only if) its "sleeping" flag is set. It refuses (ValueError,
  nothing posted) if any id is out of range, repeated, or still busy.
* ``WorkerPort.wait_job()`` returns ``(JobType, arg)`` for each new ``seq``,
  or ``(JobType.NONE, 0)`` on timeout so a Python worker can check its pipe
  and its parent in between.
* ``WorkerPort.finish(status)`` stores the status, pushes the worker id on
  a lock-free multi-producer queue, bumps the main process's completion
  futex word and wakes it if it sleeps.
* ``Controller.wait(k, timeout_s)`` returns the first ``k`` finished workers in
  completion order (EnvPool's "receive the first K"); ``post(all)`` +
  ``wait(n)`` is the synchronous step. Completions beyond ``k`` stay queued
  for the next ``wait``. It returns ``(WaitStatus.TIMEOUT, [])`` when the
  timeout passes (nothing is lost: finished workers come out of the next
  wait), and ``(WaitStatus.WORKER_DIED, [ids])`` when a worker with an
  unfinished job has died (pidfd polled at least every 50 ms, so a crash is
  reported within ~50 ms, never a hang). ``abandon(id)`` then forgets the
  dead worker's job so ``close()`` can proceed.
* ``JobType.CALL`` means "a message waits on your pipe"; ``CLOSE`` means
  "leave the native loop" (finish it, then exit). ``JobStatus.ERROR`` means
  the worker's Python code raised; the details travel on the pipe.

Memory orders
-------------
* main writes action rows, job type and arg, then stores ``seq`` (release,
  seq_cst); the worker acquire-loads ``seq`` and then reads the job and rows.
* the worker writes its observation rows and status, then pushes its id with
  a release CAS; the main process acquire-loads the queue cell before it
  reads the status and the rows.
* sleeping flags: a waiter stores "sleeping" and re-checks the futex word,
  the waker changes the word and loads the flag - all four seq_cst
  (Dekker), so either the waiter sees the change or the waker sees the flag
  and calls FUTEX_WAKE; the kernel's own value check closes the rest.
* the queue is Vyukov-style (cells tagged with sequence numbers), but a
  cell is claimed and published by one 64-bit CAS, so a worker killed while
  finishing can never block the queue.

Waiting and CPU use
-------------------
Waiters spin briefly (``pause``, then ``sched_yield``) before they sleep on a
futex. ``spin_us=-1`` (default) is adaptive: a budget that halves whenever
spinning did not pay off (and grows back when it does), up to 100 us; when
``num_workers + 1`` exceeds the CPUs this process may use, every spin round
yields the core to any runnable process instead of pausing on it, and the
budget goes up to 2 ms, 5 ms with pinned workers (16 workers on 2 cores
take no CPU from each other). ``spin_us=0`` never spins; ``spin_us>0`` spins that
many microseconds. Blocking calls release the GIL and raise pending Python
signals (e.g. ``KeyboardInterrupt``) within ~50 ms.

Lifetime
--------
The region is a ``memfd``: it has no name, so nothing ever appears in
``/dev/shm`` and nothing needs unlinking. Its memory is freed by the kernel
when the last process closes its descriptor and unmaps it - whatever way the
processes end, including the main process being SIGKILLed. The mapping of a
process lives as long as any numpy view of it does (views keep the region
object alive); :meth:`SharedBlock.close` only drops the block's own
references. Workers receive the region through pickling: ``__reduce__``
passes a duplicate of the descriptor with ``multiprocessing.reduction.DupFd``
(as ``multiprocessing.heap.Arena`` does), which works with the ``spawn`` and
``forkserver`` start methods and, via the resource sharer, over pipes; under
``fork`` the block is simply inherited.

Example::

    block = SharedBlock([("action", (2,), np.float32),
                         ("obs", (4,), np.float32)], num_rows=n, num_workers=n)
    controller = block.controller()
    # start workers with `block` as an argument; in worker i:
    #     port = block.worker_port(i)
    #     job, arg = port.wait_job(timeout_s=1.0) ... port.finish(JobStatus.OK)
    controller.set_worker_pid(i, process.pid)
    block["action"][:] = actions
    controller.post(range(n), JobType.STEP)
    status, ids = controller.wait(n)
    observations = block["obs"][ids]
"""

from __future__ import annotations

import os
from multiprocessing import reduction
from types import MappingProxyType
from typing import Any, Iterable, Mapping, Optional, Sequence, Tuple

import numpy as np

from alf_env import _penv
from alf_env._penv import (Controller, JobStatus, JobType, Layout, SharedRegion,
                           WaitStatus, WorkerPort)

__all__ = [
    "SharedBlock",
    "FieldSpec",
    "Controller",
    "WorkerPort",
    "JobType",
    "JobStatus",
    "WaitStatus",
    "SPIN_ADAPTIVE",
]

#: ``spin_us`` value selecting the adaptive spin policy (the default).
SPIN_ADAPTIVE: int = _penv.SPIN_ADAPTIVE

#: A field: ``(name, shape of one row, numpy dtype)``.
FieldSpec = Tuple[str, Tuple[int, ...], np.dtype]


def _normalize_fields(fields: Iterable[Sequence[Any]]) -> Tuple[FieldSpec, ...]:
    """Validates fields and returns them as ``(str, tuple of int, np.dtype)``.

    Raises:
        ValueError: a malformed field, a repeated name, a negative dimension
            or a dtype that cannot live in shared memory (object references).
    """
    result = []
    seen = set()
    for index, field in enumerate(fields):
        try:
            name, shape, dtype = field
        except (TypeError, ValueError):
            raise ValueError(
                f"field {index}: expected a (name, shape, dtype) triple, got "
                f"{field!r}") from None
        if not isinstance(name, str) or not name:
            raise ValueError(f"field {index}: expected a non-empty str name, got {name!r}")
        if name in seen:
            raise ValueError(f"field {name!r} is listed twice; field names must be unique")
        seen.add(name)
        if isinstance(shape, (int, np.integer)):
            shape = (shape,)
        try:
            shape = tuple(int(dim) for dim in shape)
        except TypeError:
            raise ValueError(
                f"field {name!r}: expected a shape (tuple of ints), got {shape!r}") from None
        if any(dim < 0 for dim in shape):
            raise ValueError(f"field {name!r}: expected non-negative dimensions, got {shape}")
        dtype = np.dtype(dtype)
        if dtype.hasobject:
            raise ValueError(
                f"field {name!r}: dtype {dtype} holds Python object references, which "
                f"cannot be shared between processes; use a numeric dtype")
        result.append((name, shape, dtype))
    return tuple(result)


def _row_bytes(shape: Tuple[int, ...], dtype: np.dtype) -> int:
    return int(np.prod(shape, dtype=np.int64)) * dtype.itemsize


def _c_strides(shape: Tuple[int, ...], itemsize: int) -> Tuple[int, ...]:
    strides = []
    step = itemsize
    for dim in reversed(shape):
        strides.append(step)
        step *= max(dim, 1)
    return tuple(reversed(strides))


class SharedBlock:
    """A shared-memory region with a control block and one array per field.

    Args:
        fields: ``(name, shape, dtype)`` per field; ``shape`` is the shape of
            one row (e.g. one env's observation).
        num_rows: rows per field (e.g. the number of envs).
        num_workers: worker processes (job slots) of the control block.

    Attributes:
        fields: the normalized fields, ``(name, tuple shape, np.dtype)``.
        num_rows: rows per field.
        num_workers: job slots in the control block.
        layout: the :class:`alf_env._penv.Layout` (offsets and strides).

    Raises:
        ValueError: malformed fields, ``num_rows < 0`` or ``num_workers`` out
            of ``[1, MAX_WORKERS]``.
        OSError: the kernel refused the memory (errno text in the message).
    """

    def __init__(self, fields: Iterable[Sequence[Any]], num_rows: int,
                 num_workers: int) -> None:
        self._setup(_normalize_fields(fields), num_rows, num_workers, region=None)

    @classmethod
    def _attach(cls, fd: int, fields: Tuple[FieldSpec, ...], num_rows: int,
                num_workers: int, size: int) -> "SharedBlock":
        """Maps the block whose memfd is ``fd`` (which the caller still owns)."""
        block = cls.__new__(cls)
        block._setup(fields, num_rows, num_workers,
                     region=SharedRegion.attach(fd, size))
        return block

    def _setup(self, fields: Tuple[FieldSpec, ...], num_rows: int,
               num_workers: int, region: Optional[SharedRegion]) -> None:
        if int(num_rows) < 0:
            raise ValueError(f"num_rows must be >= 0, got {num_rows}")
        self.fields = fields
        self.num_rows = int(num_rows)
        self.num_workers = int(num_workers)
        self.layout: Layout = _penv.compute_layout(
            self.num_workers, self.num_rows,
            [_row_bytes(shape, dtype) for _, shape, dtype in fields])
        if region is None:
            region = SharedRegion(self.layout.total_size)
        elif region.size != self.layout.total_size:
            raise ValueError(
                f"the shared region has {region.size} bytes but the fields need "
                f"{self.layout.total_size}; attach with the creator's fields, "
                f"num_rows and num_workers")
        self._region: Optional[SharedRegion] = region
        buffer = memoryview(region)
        views = {}
        for (name, shape, dtype), field in zip(fields, self.layout.fields):
            view = np.ndarray(
                shape=(self.num_rows, *shape), dtype=dtype, buffer=buffer,
                offset=field.offset,
                strides=(field.row_stride, *_c_strides(shape, dtype.itemsize)))
            views[name] = view
        self._views: Optional[Mapping[str, np.ndarray]] = MappingProxyType(views)

    # ------------------------------------------------------------- access --
    @property
    def region(self) -> SharedRegion:
        """The underlying :class:`alf_env._penv.SharedRegion`."""
        self._check_open()
        return self._region

    @property
    def fd(self) -> int:
        """The region's memfd (owned by the block; do not close it)."""
        return self.region.fd

    @property
    def size(self) -> int:
        """Bytes of the whole region."""
        return self.layout.total_size

    @property
    def views(self) -> Mapping[str, np.ndarray]:
        """Read-only mapping from field name to its numpy view."""
        self._check_open()
        return self._views

    def __getitem__(self, name: str) -> np.ndarray:
        """The numpy view ``(num_rows, *shape)`` of field ``name``."""
        views = self.views
        try:
            return views[name]
        except KeyError:
            raise KeyError(
                f"no field {name!r}; the fields are {sorted(views)}") from None

    def __contains__(self, name: object) -> bool:
        return self._views is not None and name in self._views

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._region is None

    def _check_open(self) -> None:
        if self._region is None:
            raise ValueError("the SharedBlock is closed")

    # ---------------------------------------------------------- endpoints --
    def controller(self, spin_us: int = SPIN_ADAPTIVE,
                   workers_pinned: bool = False) -> Controller:
        """Initialises the control block and returns the main-process side.

        Call exactly once per block, in the main process, before workers
        attach.

        Args:
            spin_us: ``-1`` adaptive spinning, ``0`` never spin, ``> 0`` spin
                that many microseconds before sleeping.
            workers_pinned: the workers are pinned to CPUs, so the adaptive
                policy may spin longer when they outnumber the CPUs (5 ms
                instead of 2 ms; see docs/shared_memory.rst).
        """
        return Controller(self.region, self.num_workers, spin_us, workers_pinned)

    def worker_port(self, index: int, spin_us: int = SPIN_ADAPTIVE,
                    workers_pinned: bool = False) -> WorkerPort:
        """Returns the worker-side port of job slot ``index``.

        Args:
            index: the worker's slot, ``0 <= index < num_workers``.
            spin_us, workers_pinned: as for :meth:`controller`.
        """
        return WorkerPort(self.region, self.num_workers, index, spin_us, workers_pinned)

    # ----------------------------------------------------------- lifetime --
    def close(self) -> None:
        """Drops this block's references to the region (idempotent).

        The mapping itself goes away once no numpy view of it is left, and
        the memory once every process has done the same.
        """
        self._views = None
        self._region = None

    def __enter__(self) -> "SharedBlock":
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

    def __reduce__(self):
        """Pickles as a duplicate of the memfd plus the layout arguments."""
        self._check_open()
        return (_rebuild_shared_block,
                (reduction.DupFd(self._region.fd), self.fields, self.num_rows,
                 self.num_workers, self.layout.total_size))

    def __repr__(self) -> str:
        state = "closed" if self.closed else f"fd={self._region.fd}"
        names = ", ".join(name for name, _, _ in self.fields)
        return (f"SharedBlock({state}, size={self.layout.total_size}, "
                f"num_rows={self.num_rows}, num_workers={self.num_workers}, "
                f"fields=[{names}])")


def _rebuild_shared_block(dup_fd: Any, fields: Tuple[FieldSpec, ...],
                          num_rows: int, num_workers: int,
                          size: int) -> SharedBlock:
    """Unpickles a :class:`SharedBlock`: attaches to the received memfd."""
    fd = dup_fd.detach()
    try:
        return SharedBlock._attach(fd, fields, num_rows, num_workers, size)
    finally:
        os.close(fd)  # attach() keeps its own duplicate
