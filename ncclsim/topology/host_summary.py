"""What one host holds, in the terms the preset docs and NCCL's dump use:
the summary `topo generate`, `topo validate` and `topo import` print."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ncclsim.cluster.model import Host
from ncclsim.topology.validate import BRIDGE_CLASSES


@dataclass(frozen=True)
class HostSummary:
    """What one host holds, in the terms the preset docs and NCCL's dump use."""
    sockets: int
    gpus: int
    nvlinks_per_gpu: tuple[int, ...]
    nics: int
    nic_speeds_mbps: tuple[int, ...]
    pci_switches: int

    @classmethod
    def of_host(cls, h: Host) -> HostSummary:
        return cls(len(h.sockets), len(h.gpus), tuple(g.nvlink_count for g in h.gpus),
                   len(h.nics), tuple(n.speed_mbps for n in h.nics), len(h.switches))

    @classmethod
    def of_xml(cls, root: Any) -> HostSummary:
        gpus = root.findall(".//gpu")
        nets = root.findall(".//net")
        return cls(len(root.findall("cpu")), len(gpus),
                   tuple(sum(int(n.get("count")) for n in g.findall("nvlink")) for g in gpus),
                   len(nets), tuple(int(n.get("speed", "0")) for n in nets),
                   sum(1 for p in root.iter("pci") if p.get("class") in BRIDGE_CLASSES))

    def text(self) -> str:
        links = sorted(set(self.nvlinks_per_gpu))
        nvl = ("no NVLink" if links in ([], [0]) else
               f"{'/'.join(map(str, links))} NVLinks per GPU")
        speeds = sorted({s for s in self.nic_speeds_mbps if s > 0})  # 0: left to the plugin
        nics = plural(self.nics, "NIC") + (
            f" ({'/'.join(_gbps(s) for s in speeds)})" if speeds else "")
        return (f"{plural(self.gpus, 'GPU')} ({nvl}), {nics}, {plural(self.pci_switches, 'PCI switch')}, "
                f"{plural(self.sockets, 'socket')}")

    def to_json(self) -> dict[str, Any]:
        return {"sockets": self.sockets, "gpus": self.gpus,
                "nvlinks_per_gpu": list(self.nvlinks_per_gpu), "nics": self.nics,
                "nic_speeds_mbps": list(self.nic_speeds_mbps), "pci_switches": self.pci_switches}


def plural(count: int, noun: str) -> str:
    return f"{count} {noun}" + ("" if count == 1 else "es" if noun.endswith("ch") else "s")


def _gbps(mbps: int) -> str:
    return f"{mbps / 1000:g} Gb/s"


