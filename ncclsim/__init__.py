"""ncclsim: run NVIDIA's unmodified NCCL on simulated multi-host GPU clusters."""

from __future__ import annotations

__version__ = "0.1.0"


class NcclsimError(Exception):
    """A problem the user can act on; the CLI prints it as one line and exits 2."""
