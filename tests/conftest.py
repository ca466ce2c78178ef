"""Shared fixtures. Tests run against the installed ncclsim; nothing is skipped
when a piece is missing: the test fails and says what is missing."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Callable, Mapping, Optional

import pytest

import ncclsim.paths
from ncclsim.platform.models import GpuCatalog, load_models

RunCli = Callable[..., "subprocess.CompletedProcess[str]"]


@pytest.fixture(scope="session")
def lib_dir() -> Path:
    """ncclsim's built libraries (libcuda.so.1, libnvidia-ml.so.1, ...)."""
    return ncclsim.paths.lib_dir()


@pytest.fixture(scope="session")
def catalog() -> GpuCatalog:
    return load_models()


@pytest.fixture
def no_sys_pci(tmp_path: Path) -> Path:
    """An empty stand-in for /sys/bus/pci/devices: no real device collides."""
    d = tmp_path / "sys-pci-devices"
    d.mkdir()
    return d


@pytest.fixture(scope="session")
def ncclsim_exe() -> Path:
    """The installed `ncclsim` console script, beside the interpreter running pytest."""
    exe = Path(sys.executable).parent / "ncclsim"
    assert exe.exists(), f"{exe} is missing: install ncclsim (`pip install .`) in this environment"
    return exe


@pytest.fixture
def clean_env(tmp_path: Path) -> dict[str, str]:
    """The caller's environment without simulator variables, with a private cache."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("NCCLSIM_", "NCCL_", "CUDA_"))}
    env["XDG_CACHE_HOME"] = str(tmp_path / "cache")
    return env


@pytest.fixture
def run_cli(ncclsim_exe: Path, clean_env: dict[str, str], tmp_path: Path) -> RunCli:
    """Run `ncclsim ARGS...` outside the source tree; returns the CompletedProcess."""
    def run(*args: str, env: Optional[Mapping[str, str]] = None,
            ) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(ncclsim_exe), *args], cwd=tmp_path, text=True,
                              capture_output=True, env={**clean_env, **(env or {})}, timeout=120)
    return run
