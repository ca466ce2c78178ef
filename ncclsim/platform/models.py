"""GPU models the simulated platform can present, read from gpu_models.json.

fake_cuda/build.py compiles the same file into the C table, so Python and C
never disagree about a model.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any, Iterator, Mapping, Optional

from ncclsim import NcclsimError
from ncclsim.paths import gpu_models_file


class UnknownModelError(NcclsimError, KeyError):
    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0])


@dataclass(frozen=True)
class Clocks:
    graphics: int
    sm: int
    memory: int
    video: int


@dataclass(frozen=True)
class GpuModel:
    key: str  # "h100"
    name: str  # "NVIDIA H100 80GB HBM3"
    sm: int  # compute capability as major*10 + minor
    architecture: str
    total_memory: int  # bytes
    pci_device_id: int
    pci_subsystem_id: int
    pcie_gen: int
    pcie_width: int
    nvlinks: int
    nvlink_version: int
    bar1_mib: int
    power_limit_w: int
    max_clocks_mhz: Clocks
    attributes: Mapping[str, int]  # CU_DEVICE_ATTRIBUTE_<name> -> value
    source: str = ""  # where the values come from (older models: the file's _comment)
    # The model whose board (and preset) this one's NVLinks are wired like, for a
    # model without a preset of its own ("": its own; e.g. H20 on an HGX H100 board).
    nvlink_board: str = ""

    @property
    def multicast(self) -> bool:
        """Whether the GPU can join NVSwitch multicast objects (NVLink SHARP)."""
        return bool(self.attributes.get("MULTICAST_SUPPORTED", 0))

    @classmethod
    def from_json(cls, key: str, d: Mapping[str, Any]) -> GpuModel:
        return cls(
            key=key, name=d["name"], sm=int(d["sm"]), architecture=d.get("architecture", ""),
            total_memory=int(d["total_memory"]),
            pci_device_id=int(d["pci_device_id"], 0),
            pci_subsystem_id=int(d["pci_subsystem_id"], 0),
            pcie_gen=int(d["pcie_gen"]), pcie_width=int(d["pcie_width"]),
            nvlinks=int(d["nvlinks"]), nvlink_version=int(d["nvlink_version"]),
            bar1_mib=int(d["bar1_mib"]), power_limit_w=int(d["power_limit_w"]),
            max_clocks_mhz=Clocks(**{k: int(v) for k, v in d["max_clocks_mhz"].items()}),
            attributes=MappingProxyType({k: int(v) for k, v in d["attributes"].items()}),
            source=str(d.get("source", "")), nvlink_board=str(d.get("nvlink_board", "")),
        )


@dataclass(frozen=True)
class GpuCatalog:
    """All known models, keyed by their short key."""

    models: Mapping[str, GpuModel]

    def __iter__(self) -> Iterator[GpuModel]:
        return iter(self.models.values())

    def keys(self) -> list[str]:
        return list(self.models)

    def get(self, key_or_name: str) -> GpuModel:
        """A model by key ("h100") or full name, as fc_gpu_model_find matches."""
        for m in self.models.values():
            if key_or_name in (m.key, m.name):
                return m
        raise UnknownModelError(
            f"unknown GPU model {key_or_name!r} (known: {', '.join(self.models)})")


def load_models(path: Optional[Path] = None) -> GpuCatalog:
    path = path or gpu_models_file()
    try:
        data = json.loads(path.read_text())
        models = {key: GpuModel.from_json(key, d) for key, d in data["models"].items()}
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise NcclsimError(f"{path}: cannot read GPU models: {e}") from e
    return GpuCatalog(MappingProxyType(models))
