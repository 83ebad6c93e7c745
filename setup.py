"""Build recipe for alf_env: setuptools drives CMake to build the native module.

``pip install .`` and ``pip install -e .`` both work. Extra CMake arguments can be
passed through the ``CMAKE_ARGS`` environment variable (space separated), e.g.
``CMAKE_ARGS="-DCMAKE_BUILD_TYPE=Debug" pip install -e .``.
"""

import os
import shlex
import subprocess
import sys
from pathlib import Path

from setuptools import Extension, find_packages, setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent


class CMakeExtension(Extension):
    """An extension whose sources are built by CMake from ``sourcedir``."""

    def __init__(self, name: str, sourcedir: str = "") -> None:
        super().__init__(name, sources=[])
        self.sourcedir = os.fspath(Path(sourcedir).resolve())


class CMakeBuild(build_ext):
    """Configures and builds a :class:`CMakeExtension` with CMake."""

    def build_extension(self, ext: Extension) -> None:
        if not isinstance(ext, CMakeExtension):
            return super().build_extension(ext)
        import pybind11  # build requirement, see pyproject.toml

        ext_fullpath = Path.cwd() / self.get_ext_fullpath(ext.name)
        extdir = ext_fullpath.parent.resolve()
        build_type = "Debug" if self.debug else "Release"
        cmake_args = [
            f"-DCMAKE_LIBRARY_OUTPUT_DIRECTORY={extdir}{os.sep}",
            f"-DPython_EXECUTABLE={sys.executable}",
            f"-Dpybind11_DIR={pybind11.get_cmake_dir()}",
            f"-DCMAKE_BUILD_TYPE={build_type}",
        ]
        if "CMAKE_ARGS" in os.environ:
            cmake_args += shlex.split(os.environ["CMAKE_ARGS"])
        build_args = []
        if not any(a.startswith("-G") for a in cmake_args):
            try:
                import ninja  # noqa: F401

                cmake_args.append("-GNinja")
            except ImportError:
                build_args.append(f"-j{os.cpu_count() or 2}")
        build_temp = Path(self.build_temp) / ext.name
        build_temp.mkdir(parents=True, exist_ok=True)
        subprocess.run(["cmake", ext.sourcedir, *cmake_args], cwd=build_temp, check=True)
        subprocess.run(["cmake", "--build", ".", *build_args], cwd=build_temp, check=True)


def _version() -> str:
    for line in (ROOT / "alf_env" / "__init__.py").read_text().splitlines():
        if line.startswith("__version__"):
            return line.split("=", 1)[1].strip().strip("\"'")
    raise RuntimeError("alf_env/__init__.py has no __version__ line")


setup(
    name="alf_env",
    version=_version(),
    description="Fast, reliable multi-process RL environments (ALF API and gymnasium VectorEnv)",
    long_description=(ROOT / "README.md").read_text(),
    long_description_content_type="text/markdown",
    packages=find_packages(include=["alf_env", "alf_env.*"]),
    ext_modules=[CMakeExtension("alf_env._penv", sourcedir=str(ROOT))],
    cmdclass={"build_ext": CMakeBuild},
    python_requires=">=3.10",
    install_requires=[
        "numpy>=1.23",
        "torch>=2.1",
        "gymnasium>=1.0",
        "absl-py>=1.0",
        "cloudpickle>=2.0",
        "matplotlib>=3.7",  # the plot of alf-env-bench
    ],
    extras_require={
        "test": ["pytest>=7", "pytest-timeout>=2.1", "psutil>=5.9"],
        # Real workloads of alf-env-bench (MuJoCo, Atari with its ROMs, OpenCV for
        # AtariPreprocessing) and the EnvPool reference row; nothing is downloaded at run time.
        "bench": [
            "mujoco>=3.0",
            "imageio>=2.14",
            "ale-py>=0.9",
            "opencv-python-headless>=4.8",
            "envpool>=0.8",
        ],
        # alf_env.sb3: a stable-baselines3 VecEnv over the fast workers.
        "sb3": ["stable-baselines3>=2.3"],
        # alf_env.distributed: the vector env with its workers on Ray actors.
        "ray": ["ray>=2.9"],
    },
    entry_points={"console_scripts": ["alf-env-bench = alf_env.bench:main"]},
    zip_safe=False,
)
