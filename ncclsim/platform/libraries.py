"""Which libraries a simulated process will load, checked for real."""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ncclsim import NcclsimError
from ncclsim.paths import cudart_lib_dir, lib_dir

SIMULATOR_LIBRARIES = ("libcuda.so.1", "libnvidia-ml.so.1", "libnccl-net-ncclsim.so")


@dataclass(frozen=True)
class Libraries:
    simulator_dir: Path
    simulator: tuple[str, ...]  # which of SIMULATOR_LIBRARIES are present
    nccl: Path
    nccl_version: str  # from ncclGetVersion, e.g. "2.30.7"
    cudart: Path

    def to_json(self) -> dict[str, Any]:
        return {"simulator_dir": str(self.simulator_dir), "simulator": list(self.simulator),
                "nccl": str(self.nccl), "nccl_version": self.nccl_version,
                "cudart": str(self.cudart)}


def nccl_version(library: Path) -> str:
    """Load libnccl.so.2 and ask it; this needs no driver (NCCL's runtime starts lazily)."""
    try:
        lib = ctypes.CDLL(str(library))
        code = ctypes.c_int()
        if lib.ncclGetVersion(ctypes.byref(code)) != 0:
            raise OSError("ncclGetVersion failed")
    except (OSError, AttributeError) as e:
        raise NcclsimError(f"{library}: cannot load NCCL: {e}") from e
    v = code.value  # NCCL_VERSION(X,Y,Z) = X*10000 + Y*100 + Z since 2.9
    return f"{v // 10000}.{v % 10000 // 100}.{v % 100}"


def check_libraries(nccl_lib: Path) -> Libraries:
    sim = lib_dir()
    nccl = nccl_lib / "libnccl.so.2"
    return Libraries(
        simulator_dir=sim,
        simulator=tuple(n for n in SIMULATOR_LIBRARIES if (sim / n).exists()),
        nccl=nccl, nccl_version=nccl_version(nccl),
        cudart=cudart_lib_dir() / "libcudart.so.12")
