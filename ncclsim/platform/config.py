"""The platform one simulated host presents: typed model, file writer and reader.

The file format is the one documented at the top of
fake_cuda/common/platform.h and read by fc_platform_load(); the reader here
applies the same rules so that Python shows exactly what the driver and NVML
will report.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from ncclsim import NcclsimError
from ncclsim.files import write_atomically
from ncclsim.platform.models import GpuCatalog, GpuModel, load_models
from ncclsim.platform.pci import PciAddress, PciFormatError, format_uuid, parse_uuid
from ncclsim.rundir import host_name

# Limits shared with fake_cuda/common/platform.h (FC_MAX_GPUS, FC_MAX_NVLINKS)
# and the ranges fc_platform_load() accepts.
MAX_GPUS = 64
MAX_NVLINKS = 18
MAX_NICS = 64
MAX_HOST_INDEX = 0xFFFF
DEFAULT_DRIVER_VERSION = 13000
DRIVER_VERSION_RANGE = (11000, 99990)
MEMORY_RANGE = (1 << 20, 1 << 50)
NUMA_RANGE = (-1, 1023)
PCIE_GEN_MAX, PCIE_WIDTH_MAX = 6, 32  # a GPU's PCIe link: Gen1..Gen6, x1..x32
MAX_LINE = 4095  # fc_platform_load reads lines into a 4096-byte buffer

SYS_PCI_DEVICES = Path("/sys/bus/pci/devices")

# ---- Default platform rule. C twin: fc_platform_default() and its helpers in
# fake_cuda/common/platform.c; change both together. ----

# GPU bus numbers of an 8-GPU HGX/DGX H100 board, GPU0..7.
BOARD_GPU_BUSES = (0x18, 0x2A, 0x3A, 0x5D, 0x9A, 0xAB, 0xBA, 0xDB)
# Bare-metal NVSwitch bus numbers; a GPU's links go round-robin over them.
NVSWITCH_BUSES = (0x05, 0x06, 0x07, 0x08)
# GPUs past the eighth sit on further boards: same slot, bus moved by this much
# per board (8 boards fit between the slot buses without collisions).
EXTRA_BOARD_BUS_STEP = 2


def default_gpu_bus(index: int) -> int:
    board, slot = divmod(index, len(BOARD_GPU_BUSES))
    return BOARD_GPU_BUSES[slot] + EXTRA_BOARD_BUS_STEP * board


def default_uuid(host_index: int, device: int) -> str:
    """"ncsm", host (big-endian u32), device (big-endian u32), 00 00 00 01."""
    raw = b"ncsm" + host_index.to_bytes(4, "big") + device.to_bytes(4, "big") + b"\0\0\0\1"
    return format_uuid(raw)


def default_numa_node(index: int, ngpus: int) -> int:
    return 0 if 2 * index < ngpus else 1


def default_nvlinks(model: GpuModel, domain: int) -> tuple[PciAddress, ...]:
    n = min(model.nvlinks, MAX_NVLINKS)
    return tuple(PciAddress(domain, NVSWITCH_BUSES[i % len(NVSWITCH_BUSES)]) for i in range(n))


def host_domain(host_index: int, buses: tuple[int, ...],
                sys_pci_devices: Path = SYS_PCI_DEVICES) -> int:
    """The host index, or 0x100 + index when one of the host's GPU or NVSwitch
    bus ids would name a real PCI device here (NCCL reads /sys for bus ids it
    finds there)."""
    domain = host_index & 0xFFFF
    if any((sys_pci_devices / str(PciAddress(domain, b))).exists()
           for b in (*buses, *NVSWITCH_BUSES)):
        return (0x100 + host_index) & 0xFFFF
    return domain

# ---- end of the default rule ----


class PlatformConfigError(NcclsimError, ValueError):
    pass


@dataclass(frozen=True)
class GpuConfig:
    model: str  # key in gpu_models.json
    bus_id: PciAddress
    uuid: str  # "GPU-xxxxxxxx-..."
    memory: int  # bytes
    numa_node: int = -1
    nvlink_remote: tuple[PciAddress, ...] = ()  # link i -> remote PCI bus id
    pcie_gen: int = 0  # the GPU's PCIe link; 0: the model's
    pcie_width: int = 0


@dataclass(frozen=True)
class NicConfig:
    """A NIC the net plugin reports on this host."""
    name: str  # the plugin's device name, as in the topology XML's <net name>
    bus_id: PciAddress
    speed_mbps: int
    guid: int
    port: int = 1
    latency_us: float = 0.0


def default_nic_guid(host_index: int, nic: int) -> int:
    """Unique per (host, NIC); the same rule as fc_platform_load()."""
    return 0x6E63736D00000000 | (host_index << 16) | nic


@dataclass(frozen=True)
class PlatformConfig:
    host_index: int
    hostname: str
    gpus: tuple[GpuConfig, ...] = field(default_factory=tuple)
    driver_version: int = DEFAULT_DRIVER_VERSION
    nics: tuple[NicConfig, ...] = field(default_factory=tuple)
    multicast: bool = False  # the host's NVSwitches offer multicast objects (NVLS)
    collnet: bool = False  # the fabric reduces in its switches (SHARP): the net plugin offers CollNet

    def validate(self, catalog: GpuCatalog) -> None:
        """Raise PlatformConfigError for anything fc_platform_load() would reject."""
        def check(ok: bool, msg: str) -> None:
            if not ok:
                raise PlatformConfigError(msg)

        check(0 <= self.host_index <= MAX_HOST_INDEX,
              f"host index must be 0..{MAX_HOST_INDEX}, got {self.host_index}")
        check(DRIVER_VERSION_RANGE[0] <= self.driver_version <= DRIVER_VERSION_RANGE[1],
              f"driver_version must look like 13000, got {self.driver_version}")
        check("\n" not in self.hostname and self.hostname == self.hostname.strip()
              and len(self.hostname) < 256, f"bad hostname {self.hostname!r}")
        check(1 <= len(self.gpus) <= MAX_GPUS,
              f"a host has 1..{MAX_GPUS} GPUs, got {len(self.gpus)}")
        seen: dict[PciAddress, int] = {}
        for i, g in enumerate(self.gpus):
            catalog.get(g.model)
            check(g.bus_id not in seen, f"GPU {seen.get(g.bus_id)} and {i} have the same bus id "
                                        f"{g.bus_id}")
            seen[g.bus_id] = i
            parse_uuid(g.uuid)
            check(MEMORY_RANGE[0] <= g.memory <= MEMORY_RANGE[1],
                  f"GPU {i}: memory must be a byte count, got {g.memory}")
            check(NUMA_RANGE[0] <= g.numa_node <= NUMA_RANGE[1],
                  f"GPU {i}: numa_node must be -1..1023, got {g.numa_node}")
            check(len(g.nvlink_remote) <= MAX_NVLINKS,
                  f"GPU {i}: at most {MAX_NVLINKS} NVLinks, got {len(g.nvlink_remote)}")
            check(0 <= g.pcie_gen <= PCIE_GEN_MAX and 0 <= g.pcie_width <= PCIE_WIDTH_MAX,
                  f"GPU {i}: PCIe gen 1..{PCIE_GEN_MAX}, width 1..{PCIE_WIDTH_MAX} (0: the model's)")
        check(len(self.nics) <= MAX_NICS, f"a host has at most {MAX_NICS} NICs")
        names = [n.name for n in self.nics]
        check(len(set(names)) == len(names), f"NIC names must be unique, got {names}")
        for n in self.nics:
            check(0 < len(n.name) < 64 and n.name.strip() == n.name, f"bad NIC name {n.name!r}")
            check(1 <= n.speed_mbps <= 100_000_000, f"NIC {n.name}: speed must be Mb/s")
            check(1 <= n.port <= 255, f"NIC {n.name}: port must be 1..255")


def default_platform(host_index: int = 0, ngpus: int = 8, model: str = "h100",
                     catalog: Optional[GpuCatalog] = None,
                     sys_pci_devices: Path = SYS_PCI_DEVICES) -> PlatformConfig:
    """ngpus x model on one host, laid out like an HGX board (see the rule above)."""
    catalog = catalog or load_models()
    m = catalog.get(model)
    if not 1 <= ngpus <= MAX_GPUS:
        raise PlatformConfigError(f"a host has 1..{MAX_GPUS} GPUs, got {ngpus}")
    if not 0 <= host_index <= MAX_HOST_INDEX:
        raise PlatformConfigError(f"host index must be 0..{MAX_HOST_INDEX}, got {host_index}")
    buses = tuple(default_gpu_bus(i) for i in range(ngpus))
    domain = host_domain(host_index, buses, sys_pci_devices)
    gpus = tuple(
        GpuConfig(model=m.key, bus_id=PciAddress(domain, bus), uuid=default_uuid(host_index, i),
                  memory=m.total_memory, numa_node=default_numa_node(i, ngpus),
                  nvlink_remote=default_nvlinks(m, domain))
        for i, bus in enumerate(buses))
    return PlatformConfig(host_index=host_index, hostname=host_name(host_index), gpus=gpus,
                          multicast=m.multicast)  # an HGX-style board: GPUs on NVSwitches


# ---- writer ----

def _format_links(links: tuple[PciAddress, ...]) -> str:
    """Runs of the same remote as `bus*n`, the compact form the reader accepts."""
    parts: list[str] = []
    i = 0
    while i < len(links):
        j = i
        while j < len(links) and links[j] == links[i]:
            j += 1
        parts.append(str(links[i]) if j - i == 1 else f"{links[i]}*{j - i}")
        i = j
    return ",".join(parts)


def format_platform(cfg: PlatformConfig) -> str:
    """The file text; every field is written, so the reader's defaults never apply."""
    lines = ["# ncclsim platform configuration (format: fake_cuda/common/platform.h)",
             "[platform]",
             f"host_index = {cfg.host_index}",
             f"hostname = {cfg.hostname}",
             f"driver_version = {cfg.driver_version}",
             f"multicast = {int(cfg.multicast)}",
             f"collnet = {int(cfg.collnet)}"]
    for g in cfg.gpus:
        lines += ["[gpu]",
                  f"model = {g.model}",
                  f"bus_id = {g.bus_id}",
                  f"uuid = {g.uuid}",
                  f"memory = {g.memory}",
                  f"numa_node = {g.numa_node}",
                  f"nvlink_remote = {_format_links(g.nvlink_remote)}".rstrip()]
        lines += [f"{k} = {v}" for k, v in (("pcie_gen", g.pcie_gen), ("pcie_width", g.pcie_width)) if v]
    for n in cfg.nics:
        lines += ["[nic]",
                  f"name = {n.name}",
                  f"bus_id = {n.bus_id}",
                  f"speed = {n.speed_mbps}",
                  f"guid = {n.guid:#x}",
                  f"port = {n.port}",
                  f"latency = {n.latency_us:g}"]
    return "\n".join(lines) + "\n"


def write_platform(cfg: PlatformConfig, path: Path, catalog: Optional[GpuCatalog] = None) -> bool:
    """Write atomically, and only when the content changes (several processes may
    ask for the same file at once). Returns whether the file was (re)written."""
    cfg.validate(catalog or load_models())
    text = format_platform(cfg)
    try:
        if path.read_text() == text:
            return False
    except OSError:
        pass
    write_atomically(path, text)
    return True


# ---- reader (mirrors fc_platform_load) ----

_C_INT = re.compile(r"^[+-]?(0[xX][0-9a-fA-F]+|0[0-7]*|[1-9][0-9]*)$")


def _c_int(v: str, lo: int, hi: int) -> Optional[int]:
    """strtoll(v, .., 0) with a range check; None when fc_platform_load would fail."""
    if not _C_INT.match(v):
        return None
    body = v.lstrip("+-")
    base = 16 if body[:2].lower() == "0x" else 8 if len(body) > 1 and body[0] == "0" else 10
    x = int(v, base)
    return x if lo <= x <= hi else None


def _parse_links(v: str) -> Optional[tuple[PciAddress, ...]]:
    links: list[PciAddress] = []
    for tok in (t.strip() for t in v.split(",")):
        if not tok:
            continue  # strtok skips empty fields
        bus, star, count_s = tok.partition("*")
        count = _c_int(count_s.strip(), 1, MAX_NVLINKS) if star else 1
        if count is None:
            return None
        try:
            a = PciAddress.parse(bus)
        except PciFormatError:
            return None
        links += [a] * count
    return tuple(links) if len(links) <= MAX_NVLINKS else None


@dataclass
class _GpuDraft:
    """A [gpu] section while it is read; missing fields get defaults at the end."""
    model: Optional[GpuModel] = None
    bus_id: Optional[PciAddress] = None
    uuid: Optional[str] = None
    memory: Optional[int] = None
    numa_node: int = -1
    nvlink_remote: Optional[tuple[PciAddress, ...]] = None
    pcie_gen: int = 0
    pcie_width: int = 0


def _gpu_key(g: _GpuDraft, key: str, val: str, catalog: GpuCatalog) -> Optional[str]:
    """Set one [gpu] key; returns the problem, or None."""
    try:
        if key == "model":
            g.model = catalog.get(val)
        elif key == "bus_id":
            g.bus_id = PciAddress.parse(val)
        elif key == "uuid":
            g.uuid = format_uuid(parse_uuid(val))
        elif key == "memory":
            g.memory = _c_int(val, *MEMORY_RANGE)
            if g.memory is None:
                return f'memory must be a byte count, got "{val}"'
        elif key == "numa_node":
            numa = _c_int(val, *NUMA_RANGE)
            if numa is None:
                return f'numa_node must be -1..1023, got "{val}"'
            g.numa_node = numa
        elif key in ("pcie_gen", "pcie_width"):
            hi = PCIE_GEN_MAX if key == "pcie_gen" else PCIE_WIDTH_MAX
            x = _c_int(val, 1, hi)
            if x is None:
                return f'{key} must be 1..{hi}, got "{val}"'
            setattr(g, key, x)
        elif key == "nvlink_remote":
            g.nvlink_remote = _parse_links(val)
            if g.nvlink_remote is None:
                return ("nvlink_remote must be a list of bus ids with optional *count, "
                        f"at most {MAX_NVLINKS} links")
        else:
            return f'unknown key "{key}" in [gpu]'
    except NcclsimError as e:
        return str(e)
    return None


def _nic_key(n: dict[str, object], key: str, val: str) -> Optional[str]:
    """Set one [nic] key; returns the problem, or None."""
    try:
        if key == "name":
            if not 0 < len(val) < 64:
                return "nic name must be 1..63 characters"
            n[key] = val
        elif key == "bus_id":
            n[key] = PciAddress.parse(val)
        elif key in ("speed", "port"):
            x = _c_int(val, 1, 100_000_000 if key == "speed" else 255)
            if x is None:
                return f'{key} out of range: "{val}"'
            n[key] = x
        elif key == "guid":
            n[key] = int(val, 0)
        elif key == "latency":
            n[key] = float(val)
        else:
            return f'unknown key "{key}" in [nic]'
    except (ValueError, NcclsimError) as e:
        return f'bad {key} "{val}": {e}'
    return None


def _platform_key(key: str, val: str, out: dict[str, int | str]) -> Optional[str]:
    """Set one [platform] key; returns the problem, or None."""
    if key == "host_index":
        x = _c_int(val, 0, MAX_HOST_INDEX)
        if x is None:
            return f'host_index must be 0..65535, got "{val}"'
        out[key] = x
    elif key == "driver_version":
        x = _c_int(val, *DRIVER_VERSION_RANGE)
        if x is None:
            return f'driver_version must look like 13000, got "{val}"'
        out[key] = x
    elif key == "hostname":
        out[key] = val
    elif key in ("multicast", "collnet"):
        x = _c_int(val, 0, 1)
        if x is None:
            return f'{key} must be 0 or 1, got "{val}"'
        out[key] = x
    else:
        return f'unknown key "{key}" in [platform]'
    return None


def parse_platform(text: str, source: str = "<string>",
                   catalog: Optional[GpuCatalog] = None) -> PlatformConfig:
    """Parse the file text; errors read "<source>:<line>: <problem>" as in C."""
    catalog = catalog or load_models()
    plat: dict[str, int | str] = {}
    drafts: list[_GpuDraft] = []
    nic_drafts: list[dict[str, object]] = []
    section = ""

    def fail(line: int, msg: str) -> PlatformConfigError:
        return PlatformConfigError(f"{source}:{line}: {msg}")  # line 0: the file as a whole

    for lineno, raw in enumerate(text.splitlines(), 1):
        if len(raw) >= MAX_LINE:
            raise fail(lineno, "line too long")
        s = raw.strip()
        if not s or s.startswith("#"):
            continue
        if s.startswith("["):
            if s not in ("[platform]", "[gpu]", "[nic]"):
                raise fail(lineno, f"unknown section {s} (expected [platform], [gpu] or [nic])")
            section = s[1:-1]
            if section == "nic":
                nic_drafts.append({})
            if section == "gpu":
                if len(drafts) >= MAX_GPUS:
                    raise fail(lineno, f"more than {MAX_GPUS} [gpu] sections")
                drafts.append(_GpuDraft())
            continue
        if "=" not in s:
            raise fail(lineno, f'expected `key = value`, got "{s}"')
        key, _, val = (p.strip() for p in s.partition("="))
        if section == "platform":
            problem = _platform_key(key, val, plat)
        elif section == "gpu":
            problem = _gpu_key(drafts[-1], key, val, catalog)
        elif section == "nic":
            problem = _nic_key(nic_drafts[-1], key, val)
        else:
            problem = f'"{key}" outside any section'
        if problem:
            raise fail(lineno, problem)

    if not drafts:
        raise fail(0, "no [gpu] section: a host needs at least one GPU")
    host = int(plat.get("host_index", 0))
    gpus: list[GpuConfig] = []
    for i, g in enumerate(drafts):
        if g.model is None:
            raise fail(0, f"[gpu] #{i} has no model")
        if g.bus_id is None:
            raise fail(0, f"[gpu] #{i} has no bus_id")
        for j, prev in enumerate(gpus):
            if prev.bus_id == g.bus_id:
                raise fail(0, f"[gpu] #{j} and #{i} have the same bus_id")
        links = g.nvlink_remote
        gpus.append(GpuConfig(
            model=g.model.key, bus_id=g.bus_id, uuid=g.uuid or default_uuid(host, i),
            memory=g.memory or g.model.total_memory, numa_node=g.numa_node,
            nvlink_remote=default_nvlinks(g.model, g.bus_id.domain) if links is None else links,
            pcie_gen=g.pcie_gen, pcie_width=g.pcie_width))
    nics: list[NicConfig] = []
    for i, n in enumerate(nic_drafts):
        if "name" not in n or "speed" not in n:
            raise fail(0, f"[nic] #{i} has no {'name' if 'name' not in n else 'speed'}")
        nics.append(NicConfig(name=str(n["name"]), bus_id=n.get("bus_id", PciAddress(0, 0)),  # type: ignore[arg-type]
                              speed_mbps=int(n["speed"]), guid=int(n.get("guid", default_nic_guid(host, i))),  # type: ignore[call-overload]
                              port=int(n.get("port", 1)), latency_us=float(n.get("latency", 0.0))))  # type: ignore[arg-type]
    return PlatformConfig(
        host_index=host,
        hostname=str(plat.get("hostname") or host_name(host)),
        driver_version=int(plat.get("driver_version", DEFAULT_DRIVER_VERSION)),
        gpus=tuple(gpus), nics=tuple(nics), multicast=bool(plat.get("multicast", 0)),
        collnet=bool(plat.get("collnet", 0)))


def read_platform(path: Path, catalog: Optional[GpuCatalog] = None) -> PlatformConfig:
    try:
        text = path.read_text()
    except OSError as e:
        raise PlatformConfigError(
            f"{path}: cannot open platform configuration: {e.strerror or e}") from e
    return parse_platform(text, str(path), catalog)
