"""The simulated cluster: one typed model (model), built from presets in
topologies/ (presets, build), from which each host's platform file
(platform_config) and NCCL topology XML (ncclsim.topology.xml_writer) are
derived; ncclsim.topology.host_artifacts writes both per host."""

from ncclsim.cluster.build import build_cluster, build_host
from ncclsim.cluster.errors import ClusterError, PresetFormatError, UnknownPresetError
from ncclsim.cluster.model import Cluster, CpuSocket, Gpu, Host, Nic, NvLink, NvSwitch, PciSwitch
from ncclsim.cluster.platform_config import platform_config
from ncclsim.cluster.presets import DEFAULT_PRESET, available_presets, load_preset

__all__ = [
    "Cluster", "ClusterError", "CpuSocket", "DEFAULT_PRESET", "Gpu", "Host", "Nic", "NvLink",
    "NvSwitch", "PciSwitch", "PresetFormatError", "UnknownPresetError", "available_presets",
    "build_cluster", "build_host", "load_preset", "platform_config",
]
