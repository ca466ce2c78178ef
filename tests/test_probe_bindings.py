"""The probe's ctypes bindings (ncclsim/probe/bindings.py): loaded against
NVIDIA's CUDA runtime and a real NCCL, and what a user sees when a library
is missing or is not the one declared."""

from __future__ import annotations

import ctypes
import ctypes.util
from importlib import metadata

import pytest

from ncclsim.paths import cudart_lib_dir
from ncclsim.probe import bindings


def test_a_missing_library_says_how_to_run_the_probe() -> None:
    with pytest.raises(bindings.ProbeError, match=r"cannot load NCCL or the CUDA runtime .*libnosuch.*"
                                                  r"run under `ncclsim launch`"):
        bindings.load(nccl="libnosuch-nccl.so.9")


def test_a_library_without_nccls_functions_is_refused() -> None:
    libc = ctypes.util.find_library("c")
    with pytest.raises(bindings.ProbeError, match="ncclGetVersion"):
        bindings.load(nccl=str(libc), cudart=str(libc))


def test_every_declared_function_is_nccls_or_the_runtimes(nccl_build) -> None:
    """The declarations load against the installed NCCL and the CUDA runtime
    the simulation runs on, and NCCL answers through them."""
    build = nccl_build("installed")
    libs = bindings.load(nccl=str(build.lib_dir / "libnccl.so.2"), cudart=str(cudart_lib_dir() / "libcudart.so.12"))
    assert libs.nccl_version() == metadata.version("nvidia-nccl-cu12")  # the test extra's wheel
    text = libs.nccl.ncclGetErrorString(2)
    assert isinstance(text, bytes) and text
    uid = bindings.UniqueId()
    assert ctypes.sizeof(uid) == 128
    shared: list[bytes] = []
    made = libs.shared_unique_id(True, lambda raw: shared.append(raw) or raw)  # the root's share hands on its bytes
    assert len(shared[0]) == 128 and bytes(made) == shared[0] and any(shared[0])
    assert bytes(libs.shared_unique_id(False, lambda raw: shared[0])) == shared[0]  # a non-root takes what it is handed
