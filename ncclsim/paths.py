"""Where ncclsim's installed pieces live, and NVIDIA's libraries from PyPI."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from typing import Mapping, Optional

from ncclsim import NcclsimError

PACKAGE_DIR = Path(__file__).resolve().parent


class MissingComponentError(NcclsimError, FileNotFoundError):
    """A library ncclsim needs is not installed where it should be."""


def lib_dir() -> Path:
    """Directory holding libcuda.so.1, libnvidia-ml.so.1 and the net plugin.

    `pip install .` builds them there; in a source checkout run
    `python fake_cuda/build.py --out ncclsim/lib` first.
    """
    d = PACKAGE_DIR / "lib"
    if not (d / "libcuda.so.1").exists():
        raise MissingComponentError(
            f"{d}/libcuda.so.1 is missing: install ncclsim with `pip install .` "
            "(or build in place with `python fake_cuda/build.py --out ncclsim/lib`)")
    return d


def gpu_models_file() -> Path:
    return PACKAGE_DIR / "platform" / "gpu_models.json"


def nvidia_package_dirs() -> list[Path]:
    """Directories of the `nvidia` namespace package that NVIDIA's wheels share."""
    spec = importlib.util.find_spec("nvidia")
    if spec is None or not spec.submodule_search_locations:
        return []
    return [Path(p) for p in spec.submodule_search_locations]


def _nvidia_lib(relative: str, wheel: str) -> Path:
    for base in nvidia_package_dirs():
        if (base / relative).exists():
            return (base / relative).parent
    raise MissingComponentError(
        f"{Path(relative).name} not found in the `nvidia` Python package: "
        f"install it with `pip install {wheel}` in the environment running ncclsim")


def nccl_lib_dir() -> Path:
    """Directory of the NCCL wheel's libnccl.so.2."""
    return _nvidia_lib("nccl/lib/libnccl.so.2", "nvidia-nccl-cu12")


def cudart_lib_dir() -> Path:
    """Directory of the shared CUDA runtime, libcudart.so.12."""
    return _nvidia_lib("cuda_runtime/lib/libcudart.so.12", "nvidia-cuda-runtime-cu12")


def mpiexec() -> Path:
    """The mpich wheel's mpiexec, beside the interpreter running ncclsim."""
    exe = Path(sys.executable).parent / "mpiexec"
    if not exe.exists():
        raise MissingComponentError(f"{exe} is missing: install the `mpich` wheel in this environment")
    return exe


def mpi_lib_dir() -> Optional[Path]:
    """Where that mpiexec's libmpi.so.12 is (the wheel puts its libraries in
    lib/ beside bin/), for programs linked against it without a run path
    (nccl-tests built with MPI=1); None when it is elsewhere."""
    d = mpiexec().parent.parent / "lib"
    return d if (d / "libmpi.so.12").exists() else None


def ncclsim_command() -> list[str]:
    """How to start the installed ncclsim: its console script beside the
    interpreter, else the module in isolated mode. Never `python -m ncclsim`
    as such: in a source checkout that imports the source tree, which has no
    built libraries."""
    script = Path(sys.executable).parent / "ncclsim"
    if script.exists():
        return [str(script)]
    return [sys.executable, "-I", "-m", "ncclsim"]


def mpi_nvcc_flags() -> list[str]:
    """What the mpich wheel's `mpicc -show` adds to a compile and link, as nvcc
    options (for MPI programs built with nvcc: tests/programs/nccl_perf.cu)."""
    mpicc = Path(sys.executable).parent / "mpicc"
    if not mpicc.exists():
        raise MissingComponentError(f"{mpicc} is missing: install the `mpich` wheel in this environment")
    words = subprocess.run([str(mpicc), "-show"], capture_output=True, text=True, check=True).stdout.split()
    flags: list[str] = []
    for w in words[1:]:  # words[0] is the C compiler
        if w.startswith("-Wl,"):
            flags += ["-Xlinker", w[len("-Wl,"):]]
        elif w.startswith(("-I", "-L", "-l")):
            flags.append(w)
        else:
            flags += ["-Xcompiler", w]
    return flags


def default_config_dir(environ: Mapping[str, str]) -> Path:
    """$XDG_CACHE_HOME/ncclsim, or ~/.cache/ncclsim (XDG ignores relative paths)."""
    xdg = environ.get("XDG_CACHE_HOME", "")
    if os.path.isabs(xdg):
        return Path(xdg) / "ncclsim"
    home = environ.get("HOME")
    return (Path(home) if home else Path.home()) / ".cache" / "ncclsim"
