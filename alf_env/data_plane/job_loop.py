"""The worker side of the native fast path: the job loop.

A worker enters this loop when its parent sends ``MessageType.FAST_LOOP``.
From then on it waits on its job slot in the shared region (a futex wait that
releases the GIL) and runs one job at a time:

- ``STEP``: the job handler reads this worker's action rows, steps its env(s)
  and writes the results into this worker's rows; report OK.
- ``RESET``: the handler resets (the job argument is handler-defined, e.g. a
  seed) and writes the results; report OK.
- ``CALL``: one request is waiting on the pipe; read it, report OK, then
  serve it (the answer goes back on the pipe, where the parent waits for it).
- ``CLOSE``: report OK and go back to serving the pipe directly.

A step or reset that raises reports ERROR and then sends the exception,
whole, on the pipe (the parent reads it as an unsolicited report). Nothing is
sent on the pipe while the parent waits for the job to finish without reading
the pipe, so no message, however large, can block both sides. Fixed-size
data moves only through the shared rows; anything of variable size moves on
the pipe.
"""

from typing import Any, Callable, List, NamedTuple, Protocol, Tuple

import numpy as np

from alf_env import _penv, nest
from alf_env._penv import _copy_leaves
from alf_env.control_plane import process_environment as pe
from alf_env.control_plane.leaf_codec import compile_nest
from alf_env.control_plane.spec_checks import time_step_count_error, time_step_leaf_error


class JobHandler(Protocol):
    """Runs STEP and RESET jobs for one worker; built in the worker by a factory.

    Raising from either method reports ERROR for the job and sends the
    exception home on the pipe.
    """

    def step(self, arg: int) -> None:
        """Reads the action rows, steps, writes the result rows."""

    def reset(self, arg: int) -> None:
        """Resets, writes the result rows."""

    # Optional: ``after_step()``, run once a STEP job has been reported finished
    # (work that may overlap the trainer's, e.g. resetting envs that ended).


# make_handler(env, block, conn, env_id) -> JobHandler; must be picklable
# (a module-level class or function) for spawn and forkserver.
HandlerFactory = Callable[[Any, Any, Any, Any], JobHandler]


class FastLoopSpec(NamedTuple):
    """What a worker needs to join the shared region (sent with FAST_LOOP).

    Attributes:
        block: the ``SharedBlock`` (pickled with its fd, see ``alf_env.data_plane.shared_block``).
        worker_index: this worker's job slot.
        spin_us: the waiting policy (-1: adaptive, 0: never spin).
        make_handler: builds this worker's :class:`JobHandler`.
        workers_pinned: the workers are pinned to CPUs (``worker_cpus``),
            which lets the adaptive policy spin longer.
    """
    block: Any
    worker_index: int
    spin_us: int
    make_handler: HandlerFactory
    workers_pinned: bool = False


# How long one wait for a job may last before the loop looks around again
# (the parent-death watchdog runs in its own thread; this only bounds how
# stale the loop can get).
_JOB_WAIT_SLICE = 1.0


class _Rows:
    """This worker's rows of a list of fields, and how to move nests in/out."""

    def __init__(self, block: Any, names: Tuple[str, ...], rows: Tuple[int, int],
                 paths: List[str], batched: bool, spec: Any) -> None:
        begin, end = rows
        views = [block.views[name][begin:end] for name in names]
        # An unbatched env owns one row and sees it without the batch dim
        # (`v[0, ...]` stays a writable view, also for scalar fields).
        self.views = views if batched else [v[0, ...] for v in views]
        self.paths = paths
        self._casts: dict = {}
        # Flattening and packing compiled for the spec (a TimeStep field by field).
        self._flatten, self._pack = compile_nest(spec)

    def read(self) -> Any:
        # Copies: the env may keep the action; the parent reuses the rows.
        return self._pack([np.array(v) for v in self.views])

    def write(self, value: Any, env_id: Any) -> None:
        leaves = self._flatten(value)
        views = self.views
        if len(leaves) != len(views):
            raise time_step_count_error(env_id, len(leaves), self.paths)
        # Exact arrays (the common case) in one native call; from the first
        # leaf that needs a cast or is wrong, the checking path below.
        done = _copy_leaves(views, leaves)
        if done == len(views):
            return
        for path, view, leaf in zip(self.paths[done:], views[done:], leaves[done:]):
            array = leaf if type(leaf) is np.ndarray else np.asarray(leaf)
            if array.shape != view.shape or (
                    array.dtype != view.dtype and not self._converts(array.dtype, view.dtype)):
                raise time_step_leaf_error(env_id, path, array.shape, array.dtype,
                                           view.shape, view.dtype)
            # Plain assignment: cheaper than np.copyto, and the dtype was checked.
            view[...] = array

    def _converts(self, source: np.dtype, target: np.dtype) -> bool:
        """numpy's "same_kind" rule, cached (it is slow and asked every step)."""
        key = (source, target)
        if key not in self._casts:
            self._casts[key] = np.can_cast(source, target, casting="same_kind")
        return self._casts[key]


class AlfRowsHandler:
    """The job handler (and its factory) of FastParallelEnvironment's workers.

    Args:
        rows: ``(begin, end)``: the rows this worker owns in every field.
        action_fields: block field names of the flattened action spec.
        time_step_fields: block field names of the flattened time step spec.
    """

    def __init__(self, rows: Tuple[int, int], action_fields: Tuple[str, ...],
                 time_step_fields: Tuple[str, ...]) -> None:
        self.rows = rows
        self.action_fields = action_fields
        self.time_step_fields = time_step_fields

    def __call__(self, env: Any, block: Any, conn: Any, env_id: Any) -> "AlfRowsHandler":
        """Binds to the worker's env and the shared block (in the worker)."""
        batched = bool(env.batched)
        self._env = env
        self._env_id = env_id
        self._action_spec = action_spec = env.action_spec()
        time_step_spec = env.time_step_spec()
        action_paths = [p for p, _ in nest.flatten_with_path(action_spec)]
        time_step_paths = [p for p, _ in nest.flatten_with_path(time_step_spec)]

        def rows_of(rows: Tuple[int, int], batched_rows: bool) -> Tuple[_Rows, _Rows]:
            return (_Rows(block, self.action_fields, rows, action_paths, batched_rows,
                          action_spec),
                    _Rows(block, self.time_step_fields, rows, time_step_paths, batched_rows,
                          time_step_spec))

        self._actions, self._outputs = rows_of(self.rows, batched)
        # An EnvGroup resets its members that ended once the step is reported.
        reset_ended = getattr(env, "reset_ended", None)
        if callable(reset_ended):
            self.after_step = reset_ended

        if callable(getattr(env, "step_member", None)):  # an env_group.EnvGroup
            # (not imported here: it needs torch, which FastVectorEnv's workers never load)
            # Each member reads and writes its own rows: no slicing, no batching.
            begin, end = self.rows
            n = len(env.members)
            per = (end - begin) // n
            member_batched = per > 1 or bool(env.members[0].batched)
            self._members = [
                rows_of((begin + j * per, begin + (j + 1) * per), member_batched)
                + ((env_id or 0) + j,)
                for j in range(n)]
            self.step, self.reset = self._step_members, self._reset_members
        return self

    def step(self, arg: int) -> None:
        self._outputs.write(self._env.step(self._actions.read()), self._env_id)

    def reset(self, arg: int) -> None:
        self._outputs.write(self._env.reset(), self._env_id)

    def _step_members(self, arg: int) -> None:
        group = self._env
        group.begin_job()
        for j, (actions, outputs, env_id) in enumerate(self._members):
            outputs.write(group.step_member(j, actions.read()), env_id)

    def _reset_members(self, arg: int) -> None:
        group = self._env
        group.begin_job()
        for j, (_, outputs, env_id) in enumerate(self._members):
            outputs.write(group.reset_member(j), env_id)


def run_fast_loop(conn: Any, proxy: "pe._WorkerEnvProxy", env_id: Any,
                  spec: FastLoopSpec) -> bool:
    """Serves jobs from the native slot; returns whether to keep serving the pipe."""
    try:
        port = spec.block.worker_port(spec.worker_index, spec.spin_us, spec.workers_pinned)
        handler = spec.make_handler(proxy.env, spec.block, conn, env_id)
    except Exception as exc:  # noqa: BLE001 -- reported; the pipe stays served
        conn.send((pe.MessageType.EXCEPTION,
                   pe.RemoteException(exc, env_id, "entering the native loop")))
        return True
    # Attached: tell the parent (the answer to its FAST_LOOP request).
    conn.send((pe.MessageType.RESULT, None))
    # Enum members and methods as locals, STEP tested first and run inline:
    # this loop is the hot path.
    step, reset, call, close, none = (_penv.JobType.STEP, _penv.JobType.RESET,
                                      _penv.JobType.CALL, _penv.JobType.CLOSE,
                                      _penv.JobType.NONE)
    ok = _penv.JobStatus.OK
    wait_job, finish, handler_step = port.wait_job, port.finish, handler.step
    after_step = getattr(handler, "after_step", None)
    while True:
        job, arg = wait_job(_JOB_WAIT_SLICE)
        if job == step:
            try:
                handler_step(arg)
            except Exception as exc:  # noqa: BLE001 -- reported to the parent whole
                _report_error(conn, port, env_id, "step", exc)
                continue
            finish(ok)
            if after_step is not None:
                after_step()  # raises nothing: errors are kept for the next job
        elif job == reset:
            try:
                handler.reset(arg)
            except Exception as exc:  # noqa: BLE001 -- reported to the parent whole
                _report_error(conn, port, env_id, "reset", exc)
            else:
                finish(ok)
        elif job == call:
            msg_type, payload = conn.recv()
            # Finished before answering: the parent reads the answer only
            # after it has seen the job finish, and an answer larger than the
            # pipe's buffer would otherwise block both sides for ever. (The
            # parent waits for the answer itself with its own timeout.)
            finish(ok)
            if not pe.handle_message(conn, proxy, env_id, msg_type, payload):
                return False
        elif job == close:
            finish(ok)
            return True
        elif job == none:
            continue
        else:
            raise ValueError(f"env {env_id} worker: unknown job type {job!r}")


def _report_error(conn: Any, port: Any, env_id: Any, during: str,
                  exc: Exception) -> None:
    """Reports a failed job: ERROR in the slot, then the exception on the pipe."""
    report = (pe.MessageType.EXCEPTION, pe.RemoteException(exc, env_id, during))
    # ERROR first: the parent reads the report once it sees ERROR, and a
    # report larger than the pipe's buffer would otherwise block both sides.
    port.finish(_penv.JobStatus.ERROR)
    conn.send(report)
