"""One NCCL topology XML per simulated host (NCCL_TOPO_FILE), from the cluster model.

NCCL loads the file, fills in only the calling rank's GPU and the net plugin's
NICs, trims what no rank uses and fuses the ranks' views of the host, so the
file describes the whole host. Its attributes keep NCCL from reading /sys,
CPUID or NVML for devices that do not exist here.
"""

from __future__ import annotations

from pathlib import Path
from typing import Union

import jinja2

from ncclsim.cluster.model import (
    PCI_CLASS_BRIDGE, PCI_CLASS_GPU, Gpu, Host, Nic, PciSwitch)
from ncclsim.files import write_atomically
from ncclsim.topology.validate import validate_topology

TEMPLATES_DIR = Path(__file__).resolve().parent / "templates"
TEMPLATE = "topology.xml.j2"


def _kind(device: Union[PciSwitch, Gpu, Nic]) -> str:
    if isinstance(device, PciSwitch):
        return "switch"
    return "gpu" if isinstance(device, Gpu) else "nic"


def _number(x: float) -> str:
    """Integers without a fraction; NCCL reads the value with strtof."""
    return f"{x:g}"


class TopologyXmlWriter:
    """Renders hosts with one compiled template; every result is validated."""

    def __init__(self, templates_dir: Path = TEMPLATES_DIR) -> None:
        env = jinja2.Environment(
            loader=jinja2.FileSystemLoader(str(templates_dir)),
            # NCCL does not decode entities: values are validated instead of escaped.
            autoescape=False, undefined=jinja2.StrictUndefined,
            trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True)
        env.filters.update(
            pci_class=lambda c: f"0x{c:06x}", pci_id=lambda v: f"0x{v:04x}",
            guid=lambda g: f"0x{g:x}", number=_number)
        env.globals.update(kind=_kind, PCI_CLASS_BRIDGE=PCI_CLASS_BRIDGE,
                           PCI_CLASS_GPU=PCI_CLASS_GPU)
        try:
            self._template = env.get_template(TEMPLATE)
        except jinja2.TemplateNotFound as e:
            raise FileNotFoundError(
                f"{templates_dir / TEMPLATE} is missing: the ncclsim installation is incomplete "
                "(reinstall it with `pip install .`)") from e

    def render(self, host: Host, preset: str = "") -> str:
        origin = f"preset {preset}, " if preset else ""
        text = self._template.render(
            host=host, name=f"{preset or 'ncclsim'}/{host.hostname}",
            comment=f"ncclsim: {origin}host {host.index} ({host.hostname}, NCCL_HOSTID "
                    f"{host.host_id}); the NCCL_TOPO_FILE of this host only")
        validate_topology(text, domain=host.domain, source=f"topology of {host.hostname}")
        return text

    def write(self, host: Host, path: Path, preset: str = "") -> Path:
        """Render and write atomically (a rank may be reading an older copy)."""
        write_atomically(path, self.render(host, preset))
        return path


def render_topology(host: Host, preset: str = "") -> str:
    return TopologyXmlWriter().render(host, preset)
