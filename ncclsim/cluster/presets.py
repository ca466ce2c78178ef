"""Cluster presets: the YAML files of topologies/ (format in topologies/README.md),
read into a typed description of one host with bus numbers but no domain yet."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Optional, Sequence, TypeVar

import yaml

from ncclsim.cluster.errors import PresetFormatError, UnknownPresetError
from ncclsim.cluster.model import NIC_CLASSES, PCIE_LINK_SPEEDS, PciIdentity, PciLink
from ncclsim.paths import PACKAGE_DIR

FORMAT_VERSION = 1
DEFAULT_PRESET = "dgx-h100"
SUFFIX = ".yaml"

T = TypeVar("T")


def preset_dirs() -> tuple[Path, ...]:
    """Where presets are looked up: the copy packaging puts beside the package,
    then the topologies/ of a source checkout."""
    return tuple(d for d in (PACKAGE_DIR / "topologies", PACKAGE_DIR.parent / "topologies")
                 if d.is_dir())


@dataclass(frozen=True)
class CpuSpec:
    arch: str
    vendor: str
    family_id: int
    model_id: int
    cores_per_socket: int
    threads_per_core: int


@dataclass(frozen=True)
class GpuSpec:
    bus: int
    model: str
    nvlinks: tuple[tuple[int, int], ...]  # (target bus, count)
    link: Optional[PciLink] = None  # its PCIe link; None: the model's


@dataclass(frozen=True)
class NicSpec:
    bus: int
    name: str  # may contain {index}
    transport: str
    speed_mbps: int
    port: int
    latency_us: float
    identity: PciIdentity
    link: PciLink
    max_conn: Optional[int]
    gdr: Optional[bool]
    dev: Optional[int] = None  # the net plugin's number for it (NET/<dev>); None: bus order


@dataclass(frozen=True)
class SwitchSpec:
    bus: int
    identity: PciIdentity
    link: PciLink
    gpus: tuple[GpuSpec, ...]
    nics: tuple[NicSpec, ...]
    switches: tuple[SwitchSpec, ...]


@dataclass(frozen=True)
class SocketSpec:
    numa_id: int
    affinity: Optional[str]  # None: derived from CpuSpec
    gpus: tuple[GpuSpec, ...]
    nics: tuple[NicSpec, ...]
    switches: tuple[SwitchSpec, ...]


@dataclass(frozen=True)
class Preset:
    name: str
    description: str
    source: Path
    cpu: CpuSpec
    nvswitches: tuple[int, ...]
    sockets: tuple[SocketSpec, ...]
    multicast: Optional[bool] = None  # NVSwitch multicast (NVLS); None: wherever the hardware has it
    collnet: bool = False  # the network's switches reduce (SHARP): NCCL may use CollNet

    def gpus(self) -> list[GpuSpec]:
        """All GPUs, in bus order (= their index on the host)."""
        return sorted(_walk(self.sockets, "gpus"), key=lambda g: g.bus)

    def nics(self) -> list[NicSpec]:
        """All NICs, in the net plugin's order (= their index on the host): by
        `dev` where the spec gives it (a real machine's mlx5_N is NET/N whatever
        its bus), else by bus."""
        return sorted(_walk(self.sockets, "nics"), key=lambda n: (n.dev or 0, n.bus))

    def switch_buses(self) -> list[int]:
        return [s.bus for s in _walk(self.sockets, "switches")]


def _walk(nodes: Sequence[Any], attr: str) -> Iterator[Any]:
    for node in nodes:
        yield from getattr(node, attr)
        yield from _walk(node.switches, attr)


# ---- lookup ----

def available_presets(search: Optional[Sequence[Path]] = None) -> list[str]:
    dirs = preset_dirs() if search is None else search
    return sorted({p.stem for d in dirs for p in Path(d).glob(f"*{SUFFIX}")})


def find_preset(name_or_path: str, search: Optional[Sequence[Path]] = None) -> Path:
    """A preset by name (in `search`, default preset_dirs()) or by file path."""
    candidate = Path(name_or_path).expanduser()
    if candidate.suffix == SUFFIX or "/" in name_or_path:
        if candidate.is_file():
            return candidate
        raise UnknownPresetError(f"preset file {candidate} does not exist")
    dirs = preset_dirs() if search is None else search
    for d in dirs:
        path = Path(d) / f"{name_or_path}{SUFFIX}"
        if path.is_file():
            return path
    known = available_presets(dirs)
    where = ", ".join(str(d) for d in dirs) or "no preset directory found"
    raise UnknownPresetError(
        f"unknown preset {name_or_path!r}: available presets are "
        f"{', '.join(known) if known else 'none'} (looked in {where}); "
        f"or give the path of a {SUFFIX} file")


def _yaml_error(path: Path, e: "yaml.YAMLError") -> str:
    """One line: file:line:column and what the parser expected."""
    mark = getattr(e, "problem_mark", None)
    where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark else str(path)
    what = " ".join(str(getattr(e, "problem", None) or e).split())
    context = getattr(e, "context", None)
    return f"{where}: not valid YAML: {what}" + (f" ({' '.join(context.split())})" if context else "")


def load_preset(name_or_path: str = DEFAULT_PRESET,
                search: Optional[Sequence[Path]] = None) -> Preset:
    path = find_preset(name_or_path, search)
    try:
        doc = yaml.safe_load(path.read_text())
    except OSError as e:
        raise PresetFormatError(f"{path}: cannot read: {e.strerror or e}") from e
    except yaml.YAMLError as e:
        raise PresetFormatError(_yaml_error(path, e)) from e
    return parse_preset(doc, path)


# ---- parsing ----

class _Node:
    """A mapping of the document with its key path, for messages that point at
    the offending entry."""

    def __init__(self, value: Any, path: str, source: Path, allowed: Sequence[str]) -> None:
        self.source = source
        self.path = path
        if not isinstance(value, Mapping):
            raise self.error(f"expected a mapping with keys {', '.join(allowed)}")
        unknown = [str(k) for k in value if k not in allowed]
        if unknown:
            raise self.error(f"unknown key(s) {', '.join(unknown)} (allowed: {', '.join(allowed)})")
        self.value = value

    def error(self, msg: str) -> PresetFormatError:
        return PresetFormatError(f"{self.source}: {self.path or 'top level'}: {msg}")

    def sub(self, key: str) -> str:
        return f"{self.path}.{key}" if self.path else key

    def has(self, key: str) -> bool:
        return key in self.value

    def get(self, key: str, kind: Callable[[Any, str], T], default: Any = ...) -> T:
        if key not in self.value:
            if default is ...:
                raise self.error(f"missing key {key!r}")
            return default
        return kind(self.value[key], self.sub(key))

    # value checkers: raise with the key path
    def int_(self, lo: int, hi: int) -> Callable[[Any, str], int]:
        def check(v: Any, where: str) -> int:
            if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
                raise PresetFormatError(f"{self.source}: {where}: expected an integer {lo}..{hi} "
                                        f"(hex as 0x..), got {v!r}")
            return v
        return check

    def str_(self, choices: Sequence[str] = ()) -> Callable[[Any, str], str]:
        def check(v: Any, where: str) -> str:
            if not isinstance(v, str) or not v.strip() or (choices and v not in choices):
                want = f"one of {', '.join(choices)}" if choices else "a non-empty string"
                raise PresetFormatError(f"{self.source}: {where}: expected {want}, got {v!r}")
            return v
        return check

    def float_(self, v: Any, where: str) -> float:
        if isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0:
            raise PresetFormatError(f"{self.source}: {where}: expected a number >= 0, got {v!r}")
        return float(v)

    def bool_(self, v: Any, where: str) -> bool:
        if not isinstance(v, bool) and v not in (0, 1):
            raise PresetFormatError(f"{self.source}: {where}: expected true/false, got {v!r}")
        return bool(v)

    def list_(self, v: Any, where: str) -> list[Any]:
        if not isinstance(v, list):
            raise PresetFormatError(f"{self.source}: {where}: expected a list, got {v!r}")
        return v


PCI_ID_KEYS = ("vendor", "device", "subsystem_vendor", "subsystem_device")
LINK_KEYS = ("link_speed", "link_width")
SWITCH_KEYS = (*PCI_ID_KEYS, *LINK_KEYS)
NIC_KEYS = ("name", "transport", "speed", "port", "latency", *PCI_ID_KEYS, *LINK_KEYS,
            "maxconn", "gdr")
NIC_OWN_KEYS = ("bus", "dev")  # a NIC's alone, never a section default
BUS = (0, 0xFF)
U16 = (0, 0xFFFF)


def _merged(defaults: Mapping[str, Any], entry: _Node, keys: Sequence[str]) -> dict[str, Any]:
    """The entry's own values over the section's defaults."""
    return {k: entry.value[k] if k in entry.value else defaults[k]
            for k in keys if k in entry.value or k in defaults}


def _identity(n: _Node) -> PciIdentity:
    u16 = n.int_(*U16)
    return PciIdentity(*(n.get(k, u16) for k in PCI_ID_KEYS))


def _link(n: _Node) -> PciLink:
    return PciLink(n.get("link_speed", n.str_(tuple(PCIE_LINK_SPEEDS.values()))),
                   n.get("link_width", n.int_(1, 32)))


def parse_preset(doc: Any, source: Path) -> Preset:
    top = _Node(doc, "", source, ("format", "name", "description", "gpu_model", "cpu",
                                  "pci_switch", "nic", "nvswitches", "multicast", "collnet", "gpu_nvlinks",
                                  "sockets"))
    version = top.get("format", top.int_(0, 1 << 30))
    if version != FORMAT_VERSION:
        raise top.error(f"format {version} is not supported (this ncclsim reads format "
                        f"{FORMAT_VERSION})")
    name = top.get("name", top.str_())
    if name != source.stem:
        raise top.error(f"name {name!r} must match the file name {source.stem!r}")
    description = " ".join(top.get("description", top.str_(), default="").split())
    nvswitches = tuple(top.int_(*BUS)(b, f"nvswitches[{i}]")
                       for i, b in enumerate(top.get("nvswitches", top.list_, default=[])))
    host = _HostParser(top)
    sockets = []
    for i, v in enumerate(top.get("sockets", top.list_)):
        n = _Node(v, f"sockets[{i}]", source, ("numaid", "affinity", "gpus", "nics", "switches"))
        sockets.append(SocketSpec(n.get("numaid", n.int_(0, 1023)),
                                  n.get("affinity", n.str_(), default=None), *host.devices(n)))
    if not sockets:
        raise top.error("a host needs at least one socket")
    multicast = top.get("multicast", top.bool_, default=None)
    collnet = top.get("collnet", top.bool_, default=False)
    preset = Preset(name, description, source, _cpu(top), nvswitches, tuple(sockets), multicast, collnet)
    _check_buses(preset, top)
    return preset


def _cpu(top: _Node) -> CpuSpec:
    n = _Node(top.value.get("cpu"), "cpu", top.source,
              ("arch", "vendor", "familyid", "modelid", "cores_per_socket", "threads_per_core"))
    return CpuSpec(
        arch=n.get("arch", n.str_(("x86_64", "arm64", "ppc64"))),
        vendor=n.get("vendor", n.str_()),
        family_id=n.get("familyid", n.int_(0, 0xFFFF)),
        model_id=n.get("modelid", n.int_(0, 0xFFFF)),
        cores_per_socket=n.get("cores_per_socket", n.int_(1, 4096)),
        threads_per_core=n.get("threads_per_core", n.int_(1, 8)))


class _HostParser:
    """Switches, GPUs and NICs, each with the section defaults applied."""

    def __init__(self, top: _Node) -> None:
        self.source = top.source
        self.gpu_model = top.get("gpu_model", top.str_())
        self.switch_defaults = _Node(top.value.get("pci_switch", {}), "pci_switch", self.source,
                                     SWITCH_KEYS).value
        self.nic_defaults = _Node(top.value.get("nic", {}), "nic", self.source, NIC_KEYS).value
        self.nvlinks = _nvlinks(top.value.get("gpu_nvlinks", []), "gpu_nvlinks", top)

    def devices(self, n: _Node) -> tuple[tuple[GpuSpec, ...], tuple[NicSpec, ...],
                                         tuple[SwitchSpec, ...]]:
        def each(key: str, parse: Callable[[Any, str], T]) -> tuple[T, ...]:
            return tuple(parse(v, f"{n.sub(key)}[{i}]")
                         for i, v in enumerate(n.get(key, n.list_, default=[])))
        return each("gpus", self.gpu), each("nics", self.nic), each("switches", self.switch)

    def gpu(self, v: Any, where: str) -> GpuSpec:
        n = _Node(v if isinstance(v, Mapping) else {"bus": v}, where, self.source,
                  ("bus", "model", "nvlinks", *LINK_KEYS))
        links = (_nvlinks(n.value["nvlinks"], n.sub("nvlinks"), n) if n.has("nvlinks")
                 else self.nvlinks)
        given = [k for k in LINK_KEYS if n.has(k)]
        if given and len(given) != len(LINK_KEYS):
            raise n.error(f"give {' and '.join(LINK_KEYS)} together (or neither: the model's)")
        return GpuSpec(n.get("bus", n.int_(*BUS)), n.get("model", n.str_(), default=self.gpu_model),
                       links, _link(n) if given else None)

    def nic(self, v: Any, where: str) -> NicSpec:
        entry = _Node(v if isinstance(v, Mapping) else {"bus": v}, where, self.source,
                      (*NIC_OWN_KEYS, *NIC_KEYS))
        missing = [k for k in NIC_KEYS if k not in ("maxconn", "gdr")
                   and k not in entry.value and k not in self.nic_defaults]
        if missing:
            raise entry.error(f"missing {', '.join(missing)} (give them here or in `nic`)")
        own = {k: entry.value[k] for k in NIC_OWN_KEYS if k in entry.value}
        n = _Node({**own, **_merged(self.nic_defaults, entry, NIC_KEYS)},
                  where, self.source, (*NIC_OWN_KEYS, *NIC_KEYS))
        return NicSpec(
            bus=n.get("bus", n.int_(*BUS)), name=n.get("name", n.str_()),
            transport=n.get("transport", n.str_(tuple(NIC_CLASSES))),
            speed_mbps=n.get("speed", n.int_(1, 100_000_000)), port=n.get("port", n.int_(1, 255)),
            latency_us=n.get("latency", n.float_), identity=_identity(n), link=_link(n),
            max_conn=n.get("maxconn", n.int_(1, 1 << 30), default=None),
            gdr=n.get("gdr", n.bool_, default=None),
            dev=n.get("dev", n.int_(0, 255), default=None))

    def switch(self, v: Any, where: str) -> SwitchSpec:
        entry = _Node(v, where, self.source, ("bus", "gpus", "nics", "switches", *SWITCH_KEYS))
        missing = [k for k in SWITCH_KEYS if k not in entry.value and k not in self.switch_defaults]
        if missing:
            raise entry.error(f"missing {', '.join(missing)} (give them here or in `pci_switch`)")
        ids = _Node(_merged(self.switch_defaults, entry, SWITCH_KEYS), where, self.source,
                    SWITCH_KEYS)
        gpus, nics, subs = self.devices(entry)
        if not (gpus or nics or subs):
            raise entry.error("a switch needs at least one GPU, NIC or switch below it")
        return SwitchSpec(entry.get("bus", entry.int_(*BUS)), _identity(ids), _link(ids),
                          gpus, nics, subs)


def _nvlinks(v: Any, where: str, n: _Node) -> tuple[tuple[int, int], ...]:
    links = []
    for i, pair in enumerate(n.list_(v, where)):
        at = f"{where}[{i}]"
        if not isinstance(pair, list) or len(pair) != 2:
            raise PresetFormatError(f"{n.source}: {at}: expected [target bus, count], got {pair!r}")
        links.append((n.int_(*BUS)(pair[0], f"{at}[0]"), n.int_(1, 18)(pair[1], f"{at}[1]")))
    return tuple(links)


def _check_buses(p: Preset, top: _Node) -> None:
    """Bus numbers are unique within the host, and NVLinks point at something."""
    seen: dict[int, str] = {}
    for kind, buses in (("NVSwitch", p.nvswitches), ("switch", p.switch_buses()),
                        ("GPU", [g.bus for g in p.gpus()]), ("NIC", [n.bus for n in p.nics()])):
        for b in buses:
            if b in seen:
                raise top.error(f"bus {b:#04x} is used twice ({seen[b]} and {kind})")
            seen[b] = kind
    if not p.gpus():
        raise top.error("a host needs at least one GPU")
    devs = [n.dev for n in p.nics()]
    if devs != [None] * len(devs) and (None in devs or sorted(devs) != list(range(len(devs)))):  # type: ignore[type-var]
        raise top.error(f"NIC dev numbers {', '.join('-' if d is None else str(d) for d in devs)}: "
                        f"give every NIC one, 0..{len(devs) - 1} each once, or none (bus order)")
    for g in p.gpus():
        for target, _ in g.nvlinks:
            if seen.get(target) not in ("NVSwitch", "GPU") or target == g.bus:
                raise top.error(f"GPU {g.bus:#04x}: NVLink target {target:#04x} is neither an "
                                "NVSwitch nor another GPU")
