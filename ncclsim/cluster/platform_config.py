"""A host of the cluster model as the platform file sees it: what the fake
driver, NVML and the net plugin report on that host."""

from __future__ import annotations

from typing import Optional

from ncclsim.cluster.model import Host
from ncclsim.platform.config import GpuConfig, NicConfig, PlatformConfig
from ncclsim.platform.models import GpuCatalog, load_models


def platform_config(host: Host, catalog: Optional[GpuCatalog] = None) -> PlatformConfig:
    catalog = catalog or load_models()
    gpus = tuple(
        GpuConfig(model=g.model, bus_id=g.bus_id, uuid=g.uuid,
                  memory=catalog.get(g.model).total_memory, numa_node=g.numa_node,
                  # NVML numbers links 0..n-1; runs per target, in the model's order.
                  nvlink_remote=tuple(link.target for link in g.nvlinks for _ in range(link.count)),
                  pcie_gen=g.link.generation, pcie_width=g.link.width)
        for g in host.gpus)
    nics = tuple(NicConfig(name=n.name, bus_id=n.bus_id, speed_mbps=n.speed_mbps, guid=n.guid,
                           port=n.port, latency_us=n.latency_us)
                 for n in host.nics)
    return PlatformConfig(host_index=host.index, hostname=host.hostname, gpus=gpus, nics=nics,
                          multicast=host.multicast, collnet=host.collnet)
