"""What a rank of a launch reads from its environment, for programs that run
as ranks (the probe): nothing here imports more than it needs."""

from __future__ import annotations

from typing import Mapping

# The emulation keeps NCCL's protocol and the modelled time but moves no data
# and never reads or writes the program's buffers (launch --no-payload).
NO_PAYLOAD_VARIABLE = "NCCLSIM_NO_PAYLOAD"
# The GPUs each process of a launch drives (launch --gpus-per-process): what
# the probe drives under MPI unless told otherwise.
GPUS_PER_PROCESS_VARIABLE = "NCCLSIM_GPUS_PER_PROCESS"


def launched_gpus_per_process(environ: Mapping[str, str]) -> int:
    """launch's --gpus-per-process in a rank's environment; 0 when not launched so."""
    value = environ.get(GPUS_PER_PROCESS_VARIABLE, "")
    return int(value) if value.isdigit() else 0


def without_payload(environ: Mapping[str, str]) -> bool:
    """Whether a process with `environ` runs without payload (its buffers hold nothing NCCL computed)."""
    return environ.get(NO_PAYLOAD_VARIABLE, "") == "1"
