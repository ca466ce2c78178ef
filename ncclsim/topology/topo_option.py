"""`--topo FILE [--gpu-model M]` of `launch`, `sweep` and `topo generate`:
every host is the machine of a real topology file (NCCL's dump, a hand-written
NCCL_TOPO_FILE, `nvidia-smi topo -m`), imported as `topo import` does."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

from ncclsim import NcclsimError

if TYPE_CHECKING:
    from ncclsim.topology.importers import ImportResult


class TopoOptionError(NcclsimError):
    """--topo cannot be used as given; names the option."""


TOPO_HELP = ("every host is the machine of this NCCL topology file (NCCL_TOPO_DUMP_FILE, a "
             "hand-written NCCL_TOPO_FILE) or `nvidia-smi topo -m` output, imported as `ncclsim "
             "topo import` does")


def add_arguments(p: Any, kept: str) -> None:
    """`kept`: where the spec (with its notes) is written, for the help text.
    `p`: the group of options that say what the hosts are (--preset, --spec)."""
    p.add_argument("--topo", metavar="FILE", help=f"{TOPO_HELP} (the spec, with its notes: {kept})")


def add_gpu_model(p: argparse.ArgumentParser) -> None:
    p.add_argument("--gpu-model", metavar="MODEL",
                   help="with --topo: the GPUs' model, for files that do not tell it")


def check(topo: Optional[str], gpu_model: Optional[str]) -> None:
    if gpu_model and not topo:
        raise TopoOptionError("--gpu-model names the model of --topo's GPUs: give --topo FILE")


def imported(topo: str, output: Path, gpu_model: Optional[str] = None) -> ImportResult:
    """The file's machine, the spec to be kept as `output`; an error names the option."""
    # The importers (lxml, the XML writer) load only when --topo is given.
    from ncclsim.topology.importers import TopoImportError, import_topology
    try:
        return import_topology(Path(topo), output, gpu_model)
    except TopoImportError as e:
        raise TopoOptionError(f"--topo: {e}") from None
