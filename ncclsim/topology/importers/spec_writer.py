"""A preset as YAML text in the preset format (topologies/README.md), the way
the presets of topologies/ are written: section defaults taken from the most
common value, each device listing only what differs, bus numbers and PCI ids
in hex, and a comment header."""

from __future__ import annotations

import json
import re
import textwrap
from dataclasses import dataclass
from typing import Any, Optional, Sequence

from ncclsim.cluster.presets import FORMAT_VERSION, GpuSpec, NicSpec, Preset, SwitchSpec
from ncclsim.topology.importers.reference import most_common

WIDTH = 100


def _hex(v: int, digits: int = 2) -> str:
    return f"0x{v:0{digits}x}"


def _id(v: int) -> str:
    return _hex(v, 4)


def _str(s: str) -> str:
    """Double-quoted: a JSON string is a YAML one, and no value is misread
    (a cpumask of only digits, "yes", a leading 0)."""
    return json.dumps(s)


def _number(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else repr(float(x))


def _flow(items: Sequence[tuple[str, str]]) -> str:
    return "{" + ", ".join(f"{k}: {v}" for k, v in items) + "}"


# ---- section defaults ----

NIC_FIELDS = ("name", "transport", "speed", "port", "latency", "vendor", "device",
              "subsystem_vendor", "subsystem_device", "link_speed", "link_width", "maxconn",
              "gdr")


def _switch_values(s: SwitchSpec) -> dict[str, str]:
    i = s.identity
    return {"vendor": _id(i.vendor), "device": _id(i.device),
            "subsystem_vendor": _id(i.subsystem_vendor),
            "subsystem_device": _id(i.subsystem_device),
            "link_speed": _str(s.link.speed), "link_width": str(s.link.width)}


def _nic_values(n: NicSpec) -> dict[str, str]:
    i = n.identity
    values = {"name": _str(n.name), "transport": n.transport, "speed": str(n.speed_mbps),
              "port": str(n.port), "latency": _number(n.latency_us),
              "vendor": _id(i.vendor), "device": _id(i.device),
              "subsystem_vendor": _id(i.subsystem_vendor),
              "subsystem_device": _id(i.subsystem_device),
              "link_speed": _str(n.link.speed), "link_width": str(n.link.width)}
    if n.max_conn is not None:
        values["maxconn"] = str(n.max_conn)
    if n.gdr is not None:
        values["gdr"] = "true" if n.gdr else "false"
    return values


def _name_template(nics: list[NicSpec]) -> Optional[str]:
    """"prefix{index}" when NIC i is named prefix<i> for every i (index order)."""
    m = re.match(r"^(.*?)0$", nics[0].name) if nics else None
    if m is None or "{" in m.group(1):
        return None
    prefix = m.group(1)
    if all(n.name == f"{prefix}{i}" for i, n in enumerate(nics)):
        return f"{prefix}{{index}}"
    return None


@dataclass(frozen=True)
class _Defaults:
    model: str
    nvlinks: tuple[tuple[int, int], ...]
    switch: dict[str, str]
    nic: dict[str, str]


def _switches(nodes: Sequence[Any]) -> list[SwitchSpec]:
    return [s for n in nodes for s in (*n.switches, *_switches(n.switches))]


def _defaults(p: Preset) -> _Defaults:
    gpus = p.gpus()
    nics = p.nics()  # NIC index order
    switches = _switches(p.sockets)
    switch = (dict(most_common([tuple(_switch_values(s).items()) for s in switches]))
              if switches else {})
    nic: dict[str, str] = {}
    per_nic = [_nic_values(n) for n in nics]
    for k in NIC_FIELDS:
        values = [v.get(k) for v in per_nic]
        if values and None not in values:
            nic[k] = most_common(values)
    template = _name_template(nics)
    if template is not None:
        nic["name"] = _str(template)
    else:
        nic.pop("name", None)  # names differ: each NIC gives its own
    return _Defaults(most_common([g.model for g in gpus]),
                     most_common([g.nvlinks for g in gpus]), switch, nic)


# ---- entries ----

def _links(links: tuple[tuple[int, int], ...]) -> str:
    return "[" + ", ".join(f"[{_hex(t)}, {c}]" for t, c in links) + "]"


def _gpu(g: GpuSpec, d: _Defaults) -> str:
    items = [("bus", _hex(g.bus))]
    if g.model != d.model:
        items.append(("model", g.model))
    if g.nvlinks != d.nvlinks:
        items.append(("nvlinks", _links(g.nvlinks)))
    if g.link is not None:
        items += [("link_speed", _str(g.link.speed)), ("link_width", str(g.link.width))]
    return items[0][1] if len(items) == 1 else _flow(items)


def _nic(n: NicSpec, d: _Defaults) -> str:
    values = _nic_values(n)
    if "name" not in d.nic:
        values["name"] = _str(n.name)
    else:
        values.pop("name")  # follows the template, checked by _name_template
    items = [("bus", _hex(n.bus))] + ([("dev", str(n.dev))] if n.dev is not None else []) + \
        [(k, v) for k, v in values.items() if d.nic.get(k) != v]
    return items[0][1] if len(items) == 1 else _flow(items)


def _entries(key: str, entries: list[str], pad: str) -> list[str]:
    if not entries:
        return []
    if all(not e.startswith("{") for e in entries):
        return [f"{pad}{key}: [{', '.join(entries)}]"]
    return [f"{pad}{key}:"] + [f"{pad}  - {e}" for e in entries]


def _node(gpus: Sequence[GpuSpec], nics: Sequence[NicSpec], switches: Sequence[SwitchSpec],
          d: _Defaults, pad: str) -> list[str]:
    lines = _entries("gpus", [_gpu(g, d) for g in gpus], pad)
    lines += _entries("nics", [_nic(n, d) for n in nics], pad)
    if switches:
        lines.append(f"{pad}switches:")
        for s in switches:
            lines += _switch(s, d, pad + "  ")
    return lines


def _switch(s: SwitchSpec, d: _Defaults, pad: str) -> list[str]:
    """One list item: a flow mapping when it fits on a line, else a block."""
    overrides = [(k, v) for k, v in _switch_values(s).items() if d.switch.get(k) != v]
    body = _node(s.gpus, s.nics, s.switches, d, "")
    simple = not s.switches and all(": [" in line for line in body)
    if simple:
        entries = [(k, v) for k, _, v in (line.partition(": ") for line in body)]
        line = f"{pad}- " + _flow([("bus", _hex(s.bus)), *overrides, *entries])
        if len(line) <= WIDTH:
            return [line]
    return ([f"{pad}- bus: {_hex(s.bus)}"] + [f"{pad}  {k}: {v}" for k, v in overrides] +
            _node(s.gpus, s.nics, s.switches, d, pad + "  "))


# ---- the document ----

def _comment(paragraphs: Sequence[str]) -> list[str]:
    lines = []
    for text in paragraphs:
        if not text:
            lines.append("#")
            continue
        bullet = text.startswith("* ")
        lines += textwrap.wrap(text, WIDTH - 2, initial_indent="# ",
                               subsequent_indent="#   " if bullet else "# ",
                               break_on_hyphens=False, break_long_words=False)
    return lines


def render_spec(p: Preset, header: Sequence[str] = ()) -> str:
    """The preset as a spec file; `header`: paragraphs of the leading comment
    ("* " starts a bullet)."""
    d = _defaults(p)
    c = p.cpu
    out = _comment(header) + ([""] if header else []) + [
        f"format: {FORMAT_VERSION}",
        f"name: {_str(p.name)}",
        f"description: {_str(p.description)}",
        "",
        f"gpu_model: {d.model}",
        "",
        "cpu:",
        f"  arch: {c.arch}",
        f"  vendor: {_str(c.vendor)}",
        f"  familyid: {c.family_id}",
        f"  modelid: {c.model_id}",
        f"  cores_per_socket: {c.cores_per_socket}",
        f"  threads_per_core: {c.threads_per_core}",
    ]
    if d.switch:
        out += ["", "pci_switch:"] + [f"  {k}: {v}" for k, v in d.switch.items()]
    if d.nic:
        out += ["", "nic:"] + [f"  {k}: {v}" for k, v in d.nic.items()]
    if p.nvswitches:
        out += ["", f"nvswitches: [{', '.join(_hex(b) for b in p.nvswitches)}]"]
    if p.multicast is not None:
        out += [f"multicast: {'true' if p.multicast else 'false'}    # NVSwitch multicast (NVLS)"]
    if p.collnet:
        out += ["collnet: true    # the network reduces in its switches (CollNet)"]
    if d.nvlinks:
        out += ["", "gpu_nvlinks:"] + [f"  - [{_hex(t)}, {n}]" for t, n in d.nvlinks]
    out += ["", "sockets:"]
    for s in p.sockets:
        out.append(f"  - numaid: {s.numa_id}")
        if s.affinity is not None:
            out.append(f"    affinity: {_str(s.affinity)}")
        out += _node(s.gpus, s.nics, s.switches, d, "    ")
    return "\n".join(out) + "\n"
