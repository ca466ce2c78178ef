"""The files of each simulated host, written from the cluster model (where
they go: ncclsim.rundir.HostFiles):

    h<i>/platform.conf   NCCLSIM_PLATFORM (fake driver, NVML, net plugin)
    h<i>/topo.xml        NCCL_TOPO_FILE
    h<i>/env             the variables that put a process on the host, as
                         `export` lines (what rank.sh sources)
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from ncclsim.cluster.model import Cluster, Host
from ncclsim.cluster.platform_config import platform_config
from ncclsim.platform.config import write_platform
from ncclsim.platform.models import GpuCatalog, load_models
from ncclsim.rundir import HostFiles
from ncclsim.topology.xml_writer import TopologyXmlWriter


@dataclass(frozen=True)
class HostArtifacts:
    host: Host
    files: HostFiles

    @property
    def platform_conf(self) -> Path:
        return self.files.platform_conf

    @property
    def topo_xml(self) -> Path:
        return self.files.topo_xml

    def environment(self) -> dict[str, str]:
        """The variables that put a process on this host (besides the library path)."""
        return {"NCCLSIM_PLATFORM": str(self.platform_conf), "NCCL_TOPO_FILE": str(self.topo_xml),
                "NCCL_HOSTID": self.host.host_id, "NCCLSIM_HOSTNAME": self.host.hostname,
                "NCCLSIM_TIME_BOARD": str(self.files.time_board), "NCCLSIM_WAKE_BOARD": str(self.files.wake_board),
                "NCCLSIM_DELIVERY_BOARD": str(self.files.delivery_board)}

    def env_text(self) -> str:
        return "".join(f"export {k}={shlex.quote(v)}\n" for k, v in self.environment().items())


def write_host_artifacts(cluster: Cluster, hosts_dir: Path,
                         catalog: Optional[GpuCatalog] = None) -> list[HostArtifacts]:
    """hosts_dir/h<i>/ for every host of the cluster."""
    catalog = catalog or load_models()
    writer = TopologyXmlWriter()
    out = []
    for host in cluster.hosts:
        a = HostArtifacts(host, HostFiles.of(Path(hosts_dir), host.index))
        a.files.directory.mkdir(parents=True, exist_ok=True)
        write_platform(platform_config(host, catalog), a.platform_conf, catalog)
        writer.write(host, a.topo_xml, cluster.preset)
        a.files.env.write_text(a.env_text())
        out.append(a)
    return out
