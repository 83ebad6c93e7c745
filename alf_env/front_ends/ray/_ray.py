"""Lazy access to Ray (an optional dependency) and how its errors map to ours."""

from typing import Any, Dict, Optional

from absl import logging

from alf_env.lazy_import import import_from

#: ``ray.init``'s arguments when no Ray instance runs (a local one is started, as Ray's do).
DEFAULT_INIT_KWARGS: Dict[str, Any] = {"include_dashboard": False, "log_to_driver": True}


def ensure_initialized(init_kwargs: Optional[Dict[str, Any]] = None) -> Any:
    """Returns the ``ray`` module, starting a local Ray instance if none is connected (an
    ``ImportError`` says how to install Ray if it is missing)."""
    try:
        ray = import_from("ray")
    except ImportError as exc:
        raise ImportError(
            "alf_env.distributed needs Ray, which is not installed; install it with "
            "`pip install alf_env[ray]` (or `pip install 'ray>=2.9'`)") from exc
    if not ray.is_initialized():
        kwargs = dict(DEFAULT_INIT_KWARGS, **(init_kwargs or {}))
        logging.info("alf_env.distributed: no Ray instance connected; ray.init(%s)", kwargs)
        ray.init(**kwargs)
    return ray


def is_death(ray: Any, exc: BaseException) -> bool:
    """Whether a Ray error means that the actor (or its node) is gone."""
    return isinstance(exc, (ray.exceptions.RayActorError, ray.exceptions.ObjectLostError,
                            ray.exceptions.NodeDiedError))
