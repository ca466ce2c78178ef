"""Check an NCCL topology XML (NCCL_TOPO_FILE) before NCCL reads it.

Two readers must accept the file: a real XML parser (lxml), and NCCL's own
hand-written one (src/graph/xml.cc), which is stricter in its lexing and has
fixed limits. On top of that, every device must carry the attributes that keep
NCCL from looking the device up in /sys, CPUID or NVML, where a simulated
device does not exist. Errors name the line, element and attribute.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable, Optional

from lxml import etree

from ncclsim import NcclsimError

# Limits of NCCL's reader (src/graph/xml.h), the smallest across supported releases.
MAX_ATTRS = 16  # MAX_ATTR_COUNT; NCCL adds its own at run time, see RUNTIME_ATTRS
# MAX_STR_LEN is 255, but xmlGetValue stores the closing quote and fails when it
# reaches index 254: a value may have 253 characters, an element name as many.
MAX_VALUE_LEN = 253
MAX_NAME_LEN = 253
MAX_CHILDREN = 32  # MAX_SUBS: 32 in 2.18-2.19, 128 in 2.21, 640 in 2.30
MAX_NVLINKS = 18

GRAMMAR: dict[str, frozenset[str]] = {
    "system": frozenset({"cpu"}),
    "cpu": frozenset({"pci", "nic"}),
    "pci": frozenset({"pci", "gpu", "nic", "pcilink"}),
    "gpu": frozenset({"nvlink", "c2c"}),
    "nic": frozenset({"net"}),
    "net": frozenset(), "nvlink": frozenset(), "c2c": frozenset(), "pcilink": frozenset(),
}

# NCCL's kvDictPciGen keys; anything else silently becomes Gen3 speed.
LINK_SPEEDS = frozenset({"2.5 GT/s", "5 GT/s", "8 GT/s", "16 GT/s", "32 GT/s", "2.5 GT/s PCIe",
                         "5.0 GT/s PCIe", "8.0 GT/s PCIe", "16.0 GT/s PCIe", "32.0 GT/s PCIe",
                         "64.0 GT/s PCIe"})
BRIDGE_CLASSES = frozenset({"0x060400", "0x080100"})  # PCI switch; CX8 data direct
NVLINK_TCLASSES = frozenset({"0x068000", "0x030200", "0x068001"})  # NVSwitch, GPU, CPU
GPU_TCLASS, NVSWITCH_TCLASS = "0x030200", "0x068000"
INVISIBLE_NVLINK_TARGET = "fffffff:ffff:ff"  # what NCCL writes for an NVSwitch it cannot see

_BUSID = re.compile(r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")
_HEX = re.compile(r"^0x[0-9a-fA-F]+$")
_INT = re.compile(r"^-?[0-9]+$")
_FLOAT = re.compile(r"^[0-9]+(\.[0-9]+)?$")
_CPUMASK = re.compile(r"^[0-9a-f]{1,8}(,[0-9a-f]{8})*$")
_BAD_VALUE_CHARS = re.compile(r'[&<"\x00-\x1f\x7f]')
# A tag as NCCL lexes it: name, then each attribute after exactly one space,
# double-quoted, then "/>" or ">" with nothing in between.
_TAG = re.compile(r'<(/?)([A-Za-z][A-Za-z0-9_]*)((?: [A-Za-z_][A-Za-z0-9_]*="[^"]*")*)(/?)>')


class TopologyXmlError(NcclsimError, ValueError):
    pass


@dataclass(frozen=True)
class _Attr:
    check: Callable[[str], Optional[str]]  # returns the problem, or None
    required: bool = True


def _int(v: str) -> Optional[str]:
    return None if _INT.match(v) else "must be a decimal integer"


def _count(v: str) -> Optional[str]:
    return None if _INT.match(v) and int(v) >= 0 else "must be an integer >= 0"


def _hex(v: str) -> Optional[str]:
    return None if _HEX.match(v) else "must be hexadecimal, 0x..."


def _bool(v: str) -> Optional[str]:
    return None if v in ("0", "1") else "must be 0 or 1"


def _float(v: str) -> Optional[str]:
    return None if _FLOAT.match(v) else "must be a number >= 0"


def _text(v: str) -> Optional[str]:
    return None if v.strip() else "must not be empty"


def _busid(v: str) -> Optional[str]:
    if not _BUSID.match(v) or int(v[8:10], 16) > 0x1F:
        return 'must be a lowercase PCI bus id "%04x:%02x:%02x.%x" (NCCL compares them as strings)'
    return None


def is_bus_id(v: str) -> bool:
    """A bus id as NCCL writes one (an NVLink target may be none: an invisible NVSwitch)."""
    return _busid(v) is None


def _pci_class(v: str) -> Optional[str]:
    return None if re.match(r"^0x[0-9a-f]{6}$", v) else "must be a 6-digit PCI class, e.g. 0x030200"


def _link_speed(v: str) -> Optional[str]:
    if v in LINK_SPEEDS:
        return None
    return f"is not a speed NCCL knows (it would assume 8 GT/s): use one of {sorted(LINK_SPEEDS)}"


def _cpumask(v: str) -> Optional[str]:
    if _CPUMASK.match(v):
        return None
    return "must be a Linux cpumask: 32-bit hex words, most significant first"


def _one_of(*choices: str) -> Callable[[str], Optional[str]]:
    return lambda v: None if v in choices else f"must be one of {', '.join(choices)}"


def _optional(check: Callable[[str], Optional[str]]) -> _Attr:
    return _Attr(check, required=False)


# What each element may carry in an input file: everything NCCL reads, required
# where a missing value would send NCCL to /sys, CPUID or NVML.
ATTRS: dict[str, dict[str, _Attr]] = {
    "system": {"version": _Attr(_one_of("1")), "name": _optional(_text)},
    "cpu": {"numaid": _Attr(_count), "affinity": _Attr(_cpumask),
            "arch": _Attr(_one_of("x86_64", "arm64", "ppc64")), "vendor": _Attr(_text),
            "familyid": _Attr(_count), "modelid": _Attr(_count)},
    "pci": {"busid": _Attr(_busid), "class": _Attr(_pci_class), "vendor": _Attr(_hex),
            "device": _Attr(_hex), "subsystem_vendor": _Attr(_hex), "subsystem_device": _Attr(_hex),
            "link_speed": _Attr(_link_speed), "link_width": _Attr(_count)},
    "gpu": {"dev": _Attr(_count), "sm": _Attr(_count), "gdr": _optional(_bool)},
    # The target is read only behind a GPU's tclass (check_nvlink).
    "nvlink": {"target": _Attr(_text), "count": _Attr(_count),
               "tclass": _Attr(_one_of(*sorted(NVLINK_TCLASSES)))},
    "c2c": {"count": _Attr(_count), "bw": _Attr(_count)},
    "pcilink": {"target": _Attr(_busid)},
    "nic": {},
    "net": {"name": _Attr(_text), "dev": _optional(_count), "speed": _optional(_int),
            "port": _optional(_count), "latency": _optional(_float), "guid": _optional(_hex),
            "maxconn": _optional(_count), "gdr": _optional(_bool), "coll": _optional(_bool),
            "net": _optional(_bool), "gin": _optional(_bool), "rma": _optional(_bool),
            "rail": _optional(_int), "plane": _optional(_int)},
}
# Set by NCCL itself while it builds the topology. `keep` in a file would keep
# devices the run does not have (NCCL trims every node without it): refused.
RUNTIME_ATTRS: dict[str, frozenset[str]] = {
    "gpu": frozenset({"keep"}), "net": frozenset({"keep"}), "pci": frozenset({"keep"}),
}
# What NCCL's own dumps carry and NCCL replaces when it reads a file (topo.cc
# ncclTopoGetSystem: every <cpu>'s host_hash; its GPU's rank and mlopart):
# accepted, with a note.
REPLACED_ATTRS: dict[str, frozenset[str]] = {
    "cpu": frozenset({"host_hash"}), "gpu": frozenset({"rank", "mlopart"}),
}
# What NCCL reads from the machine where a file leaves it out (ncclTopoGetXmlFromSys,
# ncclTopoGetXmlFromCpu, ncclTopoGetXmlFromGpu): hand-written files (cloud providers')
# often give only bus ids and classes. Required in ncclsim's own files, where the
# simulated devices have no /sys; a note in a user's file.
MACHINE_ATTRS: dict[str, tuple[str, str]] = {
    "pci": ("class,vendor,device,subsystem_vendor,subsystem_device,link_speed,link_width", "/sys"),
    "cpu": ("numaid,affinity,arch,vendor,familyid,modelid", "/sys and CPUID"),
    "gpu": ("dev,sm", "NVML"),
}


def validate_topology(text: str, *, domain: Optional[int] = None,
                      source: str = "<topology>", complete: bool = True) -> list[str]:
    """Raise TopologyXmlError for anything NCCL would reject, misread or look up
    elsewhere. `domain`: every bus id must be in this PCI domain (the host's).
    `complete=False` (a real machine's file): what NCCL reads from the machine
    or takes its own way (MACHINE_ATTRS, an unknown link speed) is a note.
    Returns notes on what NCCL reads in its own way (each once)."""
    _check_lexing(text, source)
    try:
        root = etree.fromstring(text.encode(), etree.XMLParser(resolve_entities=False))
    except etree.XMLSyntaxError as e:
        raise TopologyXmlError(f"{source}:{e.lineno}: not well-formed XML: {e.msg}") from e
    checker = _Checker(source, domain, complete)
    checker.check(root)
    return list(dict.fromkeys(checker.notes))


def _get(el: etree._Element, key: str) -> str:
    """An attribute already checked to be there."""
    return str(el.attrib[key])


def _line(text: str, pos: int) -> int:
    return text.count("\n", 0, pos) + 1


def _check_lexing(text: str, source: str) -> None:
    """What NCCL's reader accepts, beyond XML: tags with single-space separated,
    double-quoted attributes; only spaces and newlines between tags."""
    pos = 0
    while True:
        while pos < len(text) and text[pos] in " \n\r":
            pos += 1
        if pos == len(text):
            return
        line = _line(text, pos)
        if text[pos] != "<":
            raise TopologyXmlError(f"{source}:{line}: NCCL expects '<' here, got {text[pos]!r} "
                                   "(only spaces and newlines may separate tags; no text, no tabs)")
        if text.startswith("<!--", pos):
            end = text.find("-->", pos)
            if end < 0 or text[pos + 4:pos + 5] not in (" ", "\n"):
                raise TopologyXmlError(f"{source}:{line}: comments must read '<!-- ... -->' "
                                       "(a space after '<!--')")
            pos = end + 3
            continue
        m = _TAG.match(text, pos)
        if not m:
            snippet = text[pos:text.find(">", pos) + 1 or pos + 60]
            raise TopologyXmlError(
                f"{source}:{line}: NCCL cannot read the tag {snippet[:120]!r}: write "
                '<name key="value" ...> with one space before each attribute, double quotes, '
                "no space around '=' or before '/>', and no <?xml?> declaration")
        closing, name, attrs, single = m.groups()
        if closing and (attrs or single):
            raise TopologyXmlError(f"{source}:{line}: closing tag </{name}> has extra content")
        if len(name) > MAX_NAME_LEN:
            raise TopologyXmlError(f"{source}:{line}: element name longer than {MAX_NAME_LEN}")
        pos = m.end()


class _Checker:
    def __init__(self, source: str, domain: Optional[int], complete: bool) -> None:
        self.source = source
        self.domain = domain
        self.complete = complete
        self.gpu_busids: set[str] = set()
        self.gpu_links: list[tuple[etree._Element, str]] = []  # nvlinks to a GPU, checked last
        self.unique: dict[tuple[str, str], dict[str, int]] = {}
        self.notes: list[str] = []

    def fail(self, el: etree._Element, msg: str, attr: Optional[str] = None) -> TopologyXmlError:
        what = f"<{el.tag}>"
        if attr:
            what += f' {attr}="{el.get(attr)}"' if el.get(attr) is not None else f" {attr}"
        return TopologyXmlError(f"{self.source}:{el.sourceline}: {what}: {msg}")

    def check(self, root: etree._Element) -> None:
        if root.tag != "system":
            raise self.fail(root, "the top element must be <system version=\"1\">")
        self.element(root)
        for link, target in self.gpu_links:
            if target not in self.gpu_busids:
                raise self.fail(link, "tclass 0x030200 says the target is a GPU, but no GPU "
                                "of this file has that bus id", "target")

    def element(self, el: etree._Element) -> None:
        allowed = ATTRS.get(el.tag)
        if allowed is None:
            raise self.fail(el, f"unknown element (NCCL reads {', '.join(GRAMMAR)})")
        self.attributes(el, allowed)
        children = [c for c in el if isinstance(c.tag, str)]  # not comments
        if len(children) > MAX_CHILDREN:
            raise self.fail(el, f"{len(children)} children; NCCL's reader holds at most "
                            f"{MAX_CHILDREN}")
        for c in children:
            if c.tag not in GRAMMAR:
                raise self.fail(c, f"unknown element (NCCL reads {', '.join(GRAMMAR)})")
            if c.tag not in GRAMMAR[el.tag]:
                want = ", ".join(sorted(GRAMMAR[el.tag])) or "nothing"
                raise self.fail(c, f"cannot be inside <{el.tag}> (it holds {want})")
        getattr(self, f"check_{el.tag}", lambda _e, _c: None)(el, children)
        for c in children:
            self.element(c)

    def attributes(self, el: etree._Element, allowed: dict[str, _Attr]) -> None:
        if len(el.attrib) > MAX_ATTRS:
            raise self.fail(el, f"{len(el.attrib)} attributes; NCCL keeps at most {MAX_ATTRS}")
        for raw_key, raw_value in el.attrib.items():
            key, value = str(raw_key), str(raw_value)
            if key in RUNTIME_ATTRS.get(el.tag, ()):
                raise self.fail(el, "NCCL sets this attribute itself at run time; an input "
                                "topology must not", key)
            if key in REPLACED_ATTRS.get(el.tag, ()):
                self.notes.append(f"<{el.tag}> {key}: NCCL replaces it with its own when it reads "
                                  "the file (as in NCCL's own dumps)")
                continue
            if key not in allowed:
                raise self.fail(el, f"unknown attribute (<{el.tag}> takes "
                                f"{', '.join(allowed) or 'none'})", key)
            if len(value) > MAX_VALUE_LEN:
                raise self.fail(el, f"value longer than {MAX_VALUE_LEN} characters", key)
            if _BAD_VALUE_CHARS.search(value):
                raise self.fail(el, "NCCL reads values verbatim: no &, <, \", or control "
                                "characters", key)
            problem = allowed[key].check(value)
            if problem and key == "link_speed" and not self.complete:
                self.notes.append(f'<{el.tag}> {key}="{value}" {problem.split(":")[0]}')
            elif problem:
                raise self.fail(el, problem, key)
        missing = [k for k, a in allowed.items() if a.required and k not in el.attrib]
        fillable, where = MACHINE_ATTRS.get(el.tag, ("", ""))
        if missing and not self.complete and set(missing) <= set(fillable.split(",")):
            self.notes.append(f"<{el.tag}> without {', '.join(missing)}: NCCL reads them from the "
                              f"machine ({where})")
        elif missing:
            raise self.fail(el, f"missing {', '.join(missing)} (without it NCCL would look for the "
                            "device in /sys, CPUID or NVML)")

    def once(self, el: etree._Element, attr: str, value: str, scope: str) -> None:
        seen = self.unique.setdefault((scope, attr), {})
        if value in seen:
            raise self.fail(el, f"already used on line {seen[value]}; must be unique per host",
                            attr)
        seen[value] = getattr(el, "sourceline", None) or 0

    def in_domain(self, el: etree._Element, attr: str) -> None:
        value = _get(el, attr)
        if (self.domain is not None and value != INVISIBLE_NVLINK_TARGET
                and int(value[:4], 16) != self.domain):
            raise self.fail(el, f"not in this host's PCI domain {self.domain:04x}", attr)

    def check_cpu(self, el: etree._Element, _children: list[etree._Element]) -> None:
        if "numaid" in el.attrib:  # else NCCL reads it (complete=False)
            self.once(el, "numaid", _get(el, "numaid"), "cpu")

    def check_pci(self, el: etree._Element, children: list[etree._Element]) -> None:
        self.in_domain(el, "busid")
        self.once(el, "busid", _get(el, "busid"), "pci")
        kinds = {c.tag for c in children}
        cls = el.get("class")  # None: NCCL reads it from /sys (complete=False)
        if "gpu" in kinds or (cls or "").startswith("0x03"):
            self.gpu_busids.add(_get(el, "busid"))
        if cls is None:
            return
        if "pci" in kinds and cls not in BRIDGE_CLASSES:
            raise self.fail(el, "holds PCI devices, so it must be a bridge (0x060400)", "class")
        if "gpu" in kinds and not cls.startswith("0x03"):
            raise self.fail(el, "holds a <gpu>, so its class must be 0x03xxxx", "class")
        if "nic" in kinds and not cls.startswith("0x02"):
            raise self.fail(el, "holds a <nic>, so its class must be 0x02xxxx", "class")

    def check_gpu(self, el: etree._Element, children: list[etree._Element]) -> None:
        if "dev" in el.attrib:  # else NCCL asks NVML (complete=False)
            self.once(el, "dev", _get(el, "dev"), "gpu")
        links = [c for c in children if c.tag == "nvlink"]
        total = sum(int(c.get("count", "0")) for c in links if _INT.match(c.get("count", "")))
        if total > MAX_NVLINKS:
            raise self.fail(el, f"{total} NVLinks; NCCL counts at most {MAX_NVLINKS} per GPU")
        targets = [c.get("target") for c in links]
        for c in links:
            if targets.count(c.get("target")) > 1:
                raise self.fail(c, "one <nvlink> per target; add up the counts", "target")

    def check_nvlink(self, el: etree._Element, _children: list[etree._Element]) -> None:
        target = _get(el, "target")
        if is_bus_id(target):
            self.in_domain(el, "target")
        elif el.get("tclass") == GPU_TCLASS:
            raise self.fail(el, _busid(target) or "", "target")
        elif el.get("tclass") == NVSWITCH_TCLASS:
            # NCCL reads no target behind an NVSwitch's tclass (nor a CPU's): its
            # target for an NVSwitch a VM does not show is no bus id.
            self.notes.append(f'<nvlink> target="{target}" is no bus id: NCCL takes it for an '
                              "NVSwitch that is not visible (as in VMs), by its tclass")
        if el.get("tclass") == GPU_TCLASS:
            self.gpu_links.append((el, target))

    def check_pcilink(self, el: etree._Element, _children: list[etree._Element]) -> None:
        self.in_domain(el, "target")

    def check_net(self, el: etree._Element, _children: list[etree._Element]) -> None:
        self.once(el, "name", _get(el, "name"), "net")
        if "guid" in el.attrib:
            self.once(el, "guid", f"{int(_get(el, 'guid'), 16):#x}", "net")
        if "dev" in el.attrib:
            self.once(el, "dev", _get(el, "dev"), "net")
