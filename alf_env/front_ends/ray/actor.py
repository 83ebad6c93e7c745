"""EnvActor: the Ray actor that hosts a share of the envs; its methods return what the env
raises as a :class:`Failure`, so that a Ray error always means the actor is gone."""

import functools
import os
import socket
from typing import Any, Callable, Dict, List, Optional, cast

from alf_env.control_plane.remote import RemoteException
from alf_env.errors import EnvironmentProcessError, WorkerDiedError
from alf_env.lazy_import import import_from


class Failure:
    """An exception raised by the hosted env, on its way to the front end (``remote``,
    a form that always pickles) from its ``node``."""

    def __init__(self, exc: BaseException, offset: int, during: str, node: str) -> None:
        local = _local_env_id(exc)
        if isinstance(exc, WorkerDiedError) and local is not None:
            # A dead env worker of the actor: the same error, naming the front end's id.
            exc = WorkerDiedError(local + offset, exc.exitcode, exc.during,
                                  env_ids=[i + offset for i in exc.env_ids if i is not None])
        self.remote = RemoteException(exc, None if local is None else local + offset, during)
        if self.remote.exception is not None and hasattr(exc, "__notes__") and exc.__notes__:
            exc.__notes__ = []  # they name the local env id; to_exception names the global one
        self.node = node

    @property
    def is_worker_death(self) -> bool:
        """Whether an env worker process of the actor died (its env is unusable)."""
        return isinstance(self.remote.exception, WorkerDiedError)

    def to_exception(self, actor_index: int) -> BaseException:
        """The exception to raise in the front end (``RemoteException.to_exception``)."""
        exc = self.remote.to_exception()
        if hasattr(exc, "add_note"):
            exc.add_note(f"(raised in Ray actor {actor_index} on {self.node})")
        return exc


def _local_env_id(exc: Optional[BaseException]) -> Optional[int]:
    """The env id (local to the hosted env) that an alf_env error chain names."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        env_id = getattr(exc, "env_id", None)
        if isinstance(exc, EnvironmentProcessError) and env_id is not None:
            return int(env_id)
        exc = exc.__cause__ or exc.__context__
    return None


class EnvActor:
    """Hosts the env ``factory`` builds (a host of :mod:`~alf_env.front_ends.ray.hosts`),
    the front end's envs ``offset`` and on."""

    def __init__(self, factory: Callable[[], Any], offset: int) -> None:
        self._factory = factory
        self._offset = offset
        self._env: Any = None
        self._node = f"{socket.gethostname()} ({_node_ip()})"

    def start(self) -> Any:
        """Builds the hosted env; returns ``(describe(), where())`` (or a Failure)."""
        try:
            self._env = self._factory()
            return self._env.describe(), self.where()
        except BaseException as exc:  # noqa: BLE001 -- travels home as a value
            return Failure(exc, self._offset, "start", self._node)

    def run(self, method: str, *args: Any, **kwargs: Any) -> Any:
        """Calls ``method`` of the hosted env; its value, or a :class:`Failure`."""
        try:
            return getattr(self._env, method)(*args, **kwargs)
        except BaseException as exc:  # noqa: BLE001 -- travels home as a value
            return Failure(exc, self._offset, method, self._node)

    def ping(self) -> None:
        """Does nothing: the cost of a Ray round trip to the actor."""

    def where(self) -> Dict[str, Any]:
        """The actor's ``node`` (host and IP), Ray's ``node_id``, ``pid`` and its env's
        ``worker_pids``."""
        pids: List[int] = []
        if self._env is not None and hasattr(self._env, "worker_pids"):
            pids = list(self._env.worker_pids())
        return {"node": self._node, "node_id": _node_id(), "pid": os.getpid(), "worker_pids": pids}

    def close(self, terminate: bool = False) -> Optional[Failure]:
        """Closes the hosted env (bounded by the env's own close)."""
        env, self._env = self._env, None
        try:
            if env is not None:
                env.close(terminate=terminate)
        except BaseException as exc:  # noqa: BLE001 -- travels home as a value
            return Failure(exc, self._offset, "close", self._node)
        return None


def _node_ip() -> str:
    try:
        return cast(str, import_from("ray.util", "get_node_ip_address")())
    except Exception:  # noqa: BLE001 -- only for messages
        return "unknown ip"


def _node_id() -> str:
    try:
        return cast(str, import_from("ray", "get_runtime_context")().get_node_id())
    except Exception:  # noqa: BLE001 -- only for messages and placement checks
        return ""


@functools.lru_cache(maxsize=None)
def actor_class(ray: Any) -> Any:
    """``EnvActor`` as a Ray actor class (built once per process)."""
    return ray.remote(max_restarts=0, max_task_retries=0)(EnvActor)
