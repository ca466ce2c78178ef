"""The files one run needs per simulated host, written from the cluster model:

    run_dir/hosts/h<i>/platform.conf   NCCLSIM_PLATFORM (fake driver, NVML, net plugin)
    run_dir/hosts/h<i>/topo.xml        NCCL_TOPO_FILE
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from ncclsim.cluster.model import Cluster, Host
from ncclsim.cluster.platform_config import platform_config
from ncclsim.platform.config import write_platform
from ncclsim.platform.models import GpuCatalog, load_models
from ncclsim.topology.xml_writer import TopologyXmlWriter


@dataclass(frozen=True)
class HostArtifacts:
    host: Host
    directory: Path
    platform_conf: Path
    topo_xml: Path

    def environment(self) -> dict[str, str]:
        """The variables that put a process on this host (besides the library path)."""
        return {"NCCLSIM_PLATFORM": str(self.platform_conf), "NCCL_TOPO_FILE": str(self.topo_xml),
                "NCCL_HOSTID": self.host.host_id}


def host_dir(run_dir: Path, host: Host) -> Path:
    return run_dir / "hosts" / f"h{host.index}"


def write_host_artifacts(cluster: Cluster, run_dir: Path,
                         catalog: Optional[GpuCatalog] = None) -> list[HostArtifacts]:
    catalog = catalog or load_models()
    writer = TopologyXmlWriter()
    out = []
    for host in cluster.hosts:
        d = host_dir(Path(run_dir), host)
        conf, topo = d / "platform.conf", d / "topo.xml"
        write_platform(platform_config(host, catalog), conf, catalog)
        writer.write(host, topo, cluster.preset)
        out.append(HostArtifacts(host, d, conf, topo))
    return out
