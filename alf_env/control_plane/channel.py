"""The parent's end of a worker's pipe: requests and the promises of their answers
(docs/protocol.rst, "Ordering and promises")."""

import multiprocessing.process
import select
import time
import weakref
from multiprocessing.connection import Connection
from multiprocessing.reduction import ForkingPickler
from typing import Any, Callable, Dict, Iterable, List, NamedTuple, Optional, Sequence, Tuple

from alf_env.control_plane import shutdown
from alf_env.control_plane.guards import OneThread, one_thread_at_a_time
from alf_env.control_plane.protocol import (
    DEATH_GRACE,
    EnvState,
    MessageType,
    read_last_words,
    read_message,
    send_message,
)
from alf_env.control_plane.shutdown import (
    Stopping,
    register_worker,
    release_process,
    stop_all,
    unregister_worker,
)
from alf_env.control_plane.worker import JobLoopEntry
from alf_env.errors import (
    EnvironmentClosedError,
    EnvironmentProcessError,
    EnvTimeoutError,
    WorkerDiedError,
)


class Promise:
    """The pending answer of request ``seq``; call it to wait for the value. Held weakly by
    its channel and without ``__del__`` (docs/protocol.rst says why)."""

    __slots__ = ("channel", "seq", "_transform", "answer", "__weakref__")

    def __init__(self, channel: "WorkerChannel", seq: int,
                 transform: Optional[Callable[[Any], Any]] = None) -> None:
        self.channel = channel
        self.seq = seq
        self._transform = transform
        self.answer: Optional[Tuple[MessageType, Any]] = None

    def __call__(self, timeout: Optional[float] = None) -> Any:
        """Waits for the answer, ``timeout`` seconds at most (``None``: no limit); raises
        ``EnvTimeoutError``, ``WorkerDiedError``, or what the worker raised."""
        value = self.channel.await_answer(self, timeout)
        return self._transform(value) if self._transform else value


class _Undecodable(NamedTuple):
    """The answer of a request whose reply did not unpickle in the trainer."""

    error: EnvironmentProcessError

    def to_exception(self) -> Exception:
        return self.error


class WorkerChannel:
    """One worker's process and pipe as the parent sees them: its ``state`` (changed only
    here), its requests and the promises of their answers. A request and a wait hold the
    owner's guard ``one_thread``; ``fast``: the worker may enter the job loop."""

    def __init__(self, env_id: Optional[int], hosted_env_ids: Optional[List[int]],
                 fast: bool, one_thread: OneThread) -> None:
        self.env_id = env_id
        self.hosted_env_ids = hosted_env_ids
        self.fast = fast
        self.state = EnvState.NEW
        self._one_thread = one_thread
        self.process: multiprocessing.process.BaseProcess = None  # type: ignore[assignment]  # set by open(), not read before
        self.conn: Connection = None  # type: ignore[assignment]  # likewise
        self._poller = select.poll()  # of the pipe and the sentinel
        self._finalizer: Optional["weakref.finalize[..., None]"] = None
        self._death: Optional[WorkerDiedError] = None
        self._out_of_step: Optional[EnvironmentProcessError] = None
        self._unplaced = False  # a request is being sent whose answer has no place yet
        self.next_seq = 0  # of the next request
        self.received_seq = 0  # of the next answer to read
        # The promises of unread answers, weakly: a dropped one's answer is discarded.
        self._waiting: Dict[int, "weakref.ReferenceType[Promise]"] = {}
        self._doorbell: Optional[Callable[[Callable[[], None]], None]] = None

    def open(self, process: multiprocessing.process.BaseProcess, conn: Connection) -> None:
        """Takes the started worker ``process`` and the parent's end of its pipe."""
        self.process, self.conn = process, conn
        self._poller.register(conn.fileno(), select.POLLIN)
        self._poller.register(process.sentinel, select.POLLIN)
        self.state = EnvState.STARTING
        self._finalizer = register_worker(self)

    def wait_start(self, timeout: Optional[float] = None) -> None:
        """Waits for READY (``ProcessEnvironment.wait_start``); a failure closes the worker."""
        if self.state is EnvState.RUNNING:
            return
        if self.state is not EnvState.STARTING:
            raise RuntimeError(f"env {self.env_id}: wait_start() needs a started "
                               f"env (state is {self.state.value})")
        try:
            self._wait_readable(timeout, "start")
            self._value(self._read_message("start"), MessageType.READY, "READY", "start")
            self.state = EnvState.RUNNING
        except BaseException:
            self.close()
            raise

    def close(self, polite_timeout: Optional[float] = None) -> None:
        """Closes the worker (:func:`~alf_env.control_plane.shutdown.stop_all`)."""
        stop_all([self], polite_timeout)

    def begin_close(self) -> Optional[Stopping]:
        """First step of ``stop_all``: marks the channel closed, tells the worker."""
        if self.state is EnvState.CLOSED:
            return None
        in_job_loop = self._doorbell is not None
        self._doorbell = None
        polite = (self.state is EnvState.RUNNING and not in_job_loop
                  and self.process.exitcode is None)
        started = self.state is not EnvState.NEW
        self.state = EnvState.CLOSED
        unregister_worker(self, self._finalizer)
        if not started:
            return None
        if polite:
            try:
                self.conn.send((MessageType.CLOSE, None))
            except (OSError, ValueError):
                polite = False
        stopping = Stopping(self, polite)
        if not polite and not stopping.exited:
            # It would not read CLOSE (still starting, or stuck in a job loop).
            self.process.terminate()
        return stopping

    def end_close(self, stopping: Stopping) -> None:
        """Last step of ``stop_all``: releases the process and the pipe."""
        release_process(stopping.process, self.env_id)
        self.conn.close()
        self._waiting.clear()

    def disown(self) -> None:
        """In a forked child: closed without a word to the parent's worker, which
        multiprocessing forgets too (its exit hook would terminate it)."""
        if self.state in (EnvState.NEW, EnvState.CLOSED):
            return
        self.state = EnvState.CLOSED
        self._doorbell = None
        multiprocessing.process._children.discard(self.process)  # type: ignore[attr-defined]

    def fds(self) -> Tuple[int, int]:
        """The pipe's descriptor and the process sentinel."""
        return self.conn.fileno(), self.process.sentinel

    def start_job_loop(self, spec: JobLoopEntry,
                        doorbell: Callable[[Callable[[], None]], None]) -> None:
        """Sends JOB_LOOP (``spec``: a ``JobLoopSpec``; ``ValueError`` unless ``fast``); later
        requests ring ``doorbell`` with their ``write``: it makes the worker read its pipe
        (a CALL job), calls ``write()``, and returns once the worker has read it (raising
        before ``write`` means nothing was posted)."""
        if not self.fast:
            raise ValueError(f"env {self.env_id}: start_job_loop() needs an env "
                             f"created with fast=True")
        self.request(MessageType.JOB_LOOP, spec)()
        self._doorbell = doorbell

    @property
    def in_job_loop(self) -> bool:
        """Whether the worker is serving the job loop (and is usable)."""
        return self._doorbell is not None and self.state is EnvState.RUNNING

    def stop_job_loop(self) -> None:
        """Forgets the doorbell once the worker has left the job loop."""
        self._doorbell = None

    def pending_report(self) -> Promise:
        """A promise of the message the worker sends unasked (a job's error report)."""
        self.check_usable()
        return self._promise()

    def mark_died(self, during: str) -> Exception:
        """Records that the worker died (seen by the ``Controller``); returns the error, an
        ``EnvironmentClosedError`` if the env was closed meanwhile."""
        if self.state is EnvState.CLOSED:
            return EnvironmentClosedError(f"env {self.env_id} is closed; create a new environment")
        return self.died(during) if self._death is None else self._death

    def check_usable(self) -> None:
        """Raises unless requests can be sent (waits for a starting worker)."""
        if self.state is EnvState.RUNNING:
            return
        if self.state is EnvState.DEAD and self._death is not None:
            raise self._death
        if self.state is EnvState.OUT_OF_STEP and self._out_of_step is not None:
            raise self._out_of_step
        if self.state is EnvState.CLOSED:
            raise EnvironmentClosedError(f"env {self.env_id} is closed; create a new environment")
        if self.state is EnvState.STARTING:
            self.wait_start()
            return
        if self.state is EnvState.NEW:
            raise RuntimeError(f"env {self.env_id} is not started; call start() first")
        raise ValueError(f"env {self.env_id}: unknown state {self.state!r}")

    def request(self, msg_type: MessageType, payload: Any,
                transform: Optional[Callable[[Any], Any]] = None) -> Promise:
        """Sends one request; returns the promise of its answer (``transform`` of it)."""
        self.check_usable()
        # Pickled first: a payload that does not pickle fails with nothing sent.
        data = ForkingPickler.dumps((msg_type, payload))
        sent = []  # [True] once the request is on the pipe, whole

        def write() -> None:
            # Until the answer's place is taken, a Ctrl-C may leave the request (or part)
            # on the pipe with no place for its answer.
            self._unplaced = True
            # Owed answers are received while writing: the worker may be writing one.
            if not send_message(self.conn, data, self.process.sentinel,
                                lambda: self.received_seq < self.next_seq,
                                lambda: self.receive_ready("sending a request")):
                raise self.died("sending a request")
            sent.append(True)

        try:
            if self._doorbell is None:
                write()
            else:
                # The answer's place is known only once the doorbell has collected the
                # worker's earlier jobs (a failed one's report takes the next place).
                self._doorbell(write)
            promise = self._promise(transform)
            self._unplaced = False
            return promise
        except (BrokenPipeError, ConnectionResetError):
            raise self.died("sending a request") from None
        except BaseException as exc:
            if self._unplaced and self.state is EnvState.RUNNING:
                if sent:  # whole on the pipe: no promise, its answer is dropped on arrival
                    self._take_seq()
                    self._unplaced = False
                else:
                    self._fall_out_of_step("sending a request", exc)
            raise

    def _promise(self, transform: Optional[Callable[[Any], Any]] = None) -> Promise:
        promise = Promise(self, self._take_seq(), transform)
        self._waiting[promise.seq] = weakref.ref(promise)
        return promise

    def _take_seq(self) -> int:
        seq = self.next_seq
        self.next_seq += 1
        return seq

    def await_answer(self, promise: Promise, timeout: Optional[float]) -> Any:
        """:meth:`Promise.__call__`."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while promise.answer is None:
            self.check_usable()
            if promise.seq < self.received_seq:
                raise RuntimeError(f"env {self.env_id}: this promise was already "
                                   f"fulfilled; a promise can be called once")
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            self.receive_one(remaining, during="a call")
        answer, promise.answer = promise.answer, None
        return self._value(answer, MessageType.RESULT, "RESULT or EXCEPTION", "a call")

    def _value(self, answer: Tuple[MessageType, Any], expected: MessageType, what: str,
               during: str) -> Any:
        """The payload of an ``expected`` message; raises what an EXCEPTION carries."""
        msg_type, payload = answer
        if msg_type is expected:
            return payload
        if msg_type is MessageType.EXCEPTION:  # fatal: the worker's last words, it exits
            raise (self.died(during, payload.traceback_text)
                   if getattr(payload, "fatal", False) else payload.to_exception())
        raise EnvironmentProcessError(f"env {self.env_id}: expected {what} from the worker, "
                                      f"got {msg_type}", self.env_id)

    # A blocking call holds the one-thread guard from its request to its answer.
    request = one_thread_at_a_time(request, "a request")
    await_answer = one_thread_at_a_time(await_answer, "waiting for an answer")

    def has_answer(self, seq: int) -> bool:
        """Whether the answer of request ``seq`` was received (or already taken)."""
        return seq < self.received_seq

    def receive_one(self, timeout: Optional[float], during: str) -> None:
        """Receives the next answer and keeps it for its promise (if still wanted)."""
        self._wait_readable(timeout, during)
        self.receive_ready(during)

    def receive_ready(self, during: str) -> None:
        """:meth:`receive_one` of a pipe known to be readable. A message is filed whole
        or the env falls out of step: a cut-short read would misfile every later answer."""
        received = self.received_seq
        try:
            self._keep(self._read_message(during))
        except BaseException as exc:
            if self.received_seq == received and self.state is EnvState.RUNNING:
                self._fall_out_of_step("reading an answer", exc)
            raise

    def _read_message(self, during: str) -> Tuple[MessageType, Any]:
        """Reads one message; one that does not unpickle becomes its request's error."""
        try:
            msg_type, payload = read_message(self.conn)
        except (EOFError, OSError):
            raise self.died(during) from None
        if msg_type is None:  # the pipe is in step: only this request fails
            error = EnvironmentProcessError(
                f"env {self.env_id}: the worker's answer could not be unpickled in the trainer: "
                f"{type(payload).__name__}: {payload}; return values whose classes the trainer "
                f"can import", self.env_id)
            error.__cause__ = payload
            return MessageType.EXCEPTION, _Undecodable(error)
        return msg_type, payload

    def _keep(self, answer: Tuple[MessageType, Any]) -> None:
        """Files the next answer on its promise, if any; ``received_seq`` moves last."""
        ref = self._waiting.pop(self.received_seq, None)
        promise = None if ref is None else ref()
        if promise is not None:
            promise.answer = answer
        self.received_seq += 1

    def _wait_readable(self, timeout: Optional[float], during: str) -> None:
        """Waits until the pipe is readable; raises if the worker died first."""
        # One poll object per env: multiprocessing.connection.wait builds one per call.
        timeout_ms = None if timeout is None else int(timeout * 1000)
        ready = {fd for fd, _ in self._poller.poll(timeout_ms)}
        if not ready:
            raise EnvTimeoutError(f"env {self.env_id}: no answer from the worker within "
                                  f"{timeout:.3g} s during {during}")
        if self.conn.fileno() not in ready and not self.conn.poll(DEATH_GRACE):
            raise self.died(during)

    def _fall_out_of_step(self, during: str, cause: BaseException) -> None:
        """Records a message cut short on the pipe: only close() is left."""
        self._out_of_step = EnvironmentProcessError(
            f"env {self.env_id}: {type(cause).__name__} cut short {during} on the "
            f"worker's pipe, so the pipe is out of step (its messages no longer line "
            f"up with the requests); close() the env and create a new one", self.env_id)
        self.state = EnvState.OUT_OF_STEP

    def died(self, during: str, last_words: str = "") -> WorkerDiedError:
        """Records that the worker is gone; the error has its last words (if any)."""
        self.process.join(shutdown.KILL_TIMEOUT)  # read now, so a setting applies
        exitcode = self.process.exitcode
        self._death = WorkerDiedError(self.env_id, exitcode, during, self.hosted_env_ids,
                                      last_words or read_last_words(self.conn, exitcode))
        self.state = EnvState.DEAD
        return self._death


def resolve_all(promises: Sequence[Callable[..., Any]], timeout: Optional[float] = None,
                during: str = "a call") -> List[Any]:
    """Waits for several promises (``ProcessEnvironment``'s; other callables are just
    called) together, ``timeout`` seconds for all; returns their values. A death raises at
    once, a timeout uses no promise up, and a worker's exception (the first) is raised
    once all have answered, so every pipe stays in step."""
    _receive_until(_owed(promises), timeout, during)
    values, first_error = [], None
    for promise in promises:
        try:
            values.append(promise())
        except WorkerDiedError:
            raise
        except Exception as exc:  # noqa: BLE001 -- raised once all have answered
            first_error = exc if first_error is None else first_error
            values.append(None)
    if first_error is not None:
        raise first_error
    return values


def wait_answers(promises: Sequence[Promise], k: Optional[int] = None,
                 timeout: Optional[float] = None, during: str = "a call") -> List[int]:
    """Waits until ``k`` of ``promises`` (default: all) have their answers, using none up;
    returns their indices in arrival order (those answered already first)."""
    k = len(promises) if k is None else k
    pending = dict(enumerate(promises))
    order: List[int] = []

    def enough(env: Optional[WorkerChannel] = None) -> bool:
        for i, promise in list(pending.items()):
            if (env is None or promise.channel is env) and promise.channel.has_answer(promise.seq):
                order.append(i)
                del pending[i]
        return len(order) >= k

    if not enough():
        _receive_until(_owed(pending.values()), timeout, during, enough)
    return order


def _owed(promises: Iterable[Any]) -> Dict[WorkerChannel, int]:
    """The last answer each busy worker owes of ``promises``."""
    last_seq: Dict[WorkerChannel, int] = {}
    for promise in promises:
        if isinstance(promise, Promise) and not promise.channel.has_answer(promise.seq):
            last_seq[promise.channel] = max(promise.seq, last_seq.get(promise.channel, -1))
    return last_seq


def receive_answers(channels: Sequence[WorkerChannel], timeout: Optional[float] = None,
                    during: str = "a call") -> None:
    """Receives every answer the workers of ``channels`` owe; raises as :func:`resolve_all`."""
    _receive_until({channel: channel.next_seq - 1 for channel in channels
                    if channel.received_seq < channel.next_seq}, timeout, during)


def _receive_until(last_seq: Dict[WorkerChannel, int], timeout: Optional[float], during: str,
                   enough: Optional[Callable[[WorkerChannel], bool]] = None) -> None:
    """Receives answers until each worker in ``last_seq`` has sent answer ``last_seq[env]``,
    or ``enough(env)``, asked after each answer, says so."""
    deadline = None if timeout is None else time.monotonic() + timeout
    poller = select.poll()
    by_fd: Dict[int, Tuple[WorkerChannel, bool]] = {}  # fd -> (env, is its pipe)
    for env in last_seq:
        env.check_usable()
        for fd, is_pipe in zip(env.fds(), (True, False)):
            poller.register(fd, select.POLLIN)
            by_fd[fd] = (env, is_pipe)
    while last_seq:
        remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
        ready = poller.poll(None if remaining is None else int(remaining * 1000))
        if not ready:
            ids = sorted((env.env_id for env in last_seq), key=lambda i: -1 if i is None else i)
            raise EnvTimeoutError(f"envs {ids} gave no answer within {timeout:.3g} s "
                                  f"during {during}")
        served = set()
        for fd, _ in ready:
            env, is_pipe = by_fd[fd]
            if env in served or env not in last_seq:
                continue
            served.add(env)
            if is_pipe:
                env.receive_ready(during)
            else:
                env.receive_one(0.0, during)
            if enough is not None and enough(env):
                return
            if env.has_answer(last_seq[env]):
                del last_seq[env]
                for own_fd in env.fds():
                    poller.unregister(own_fd)
