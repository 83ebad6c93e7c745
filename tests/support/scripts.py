"""Loading the repository's scripts (benchmarks/ is not a package) for their tests."""

import importlib.util
import types

from tests.support.paths import REPO_ROOT


def load_benchmark_script(name: str) -> types.ModuleType:
    """``benchmarks/<name>.py`` as a module (the folder is not a package)."""
    spec = importlib.util.spec_from_file_location(name, REPO_ROOT / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
