"""Names imported on first use: the package's one way of importing lazily, so that
``import alf_env`` does not import torch and a worker that unpickles a constructor imports
neither torch nor matplotlib."""

import importlib
import sys
from typing import Any, Callable, List, Mapping, Optional, Tuple

__all__ = ["import_from", "lazy_exports"]


def import_from(module: str, name: Optional[str] = None) -> Any:
    """Imports ``module`` and returns it, or its attribute ``name`` unless that is ``None``."""
    imported = importlib.import_module(module)
    return imported if name is None else getattr(imported, name)


def lazy_exports(package: str, names: Mapping[str, str]
                 ) -> Tuple[Callable[[str], Any], Callable[[], List[str]]]:
    """The ``__getattr__`` and ``__dir__`` of a package whose names load on first use.

    Use it at the end of the package's ``__init__.py``::

        __getattr__, __dir__ = lazy_exports(__name__, {"Name": "pkg.module"})
    """

    def __getattr__(name: str) -> Any:
        module = names.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = import_from(module, name)
        setattr(sys.modules[package], name, value)  # later reads skip this function
        return value

    def __dir__() -> List[str]:
        return sorted(set(vars(sys.modules[package])) | set(names))

    return __getattr__, __dir__
