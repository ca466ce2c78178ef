"""Read the output of `nvidia-smi topo -m` and infer the host it describes.

The matrix gives, for each pair of GPUs and NICs, how they are connected:
NV# (# bonded NVLinks), PIX (at most one PCIe switch between them), PXB
(several switches, no host bridge), PHB / NODE (through a host bridge of the
same NUMA node), SYS (across NUMA nodes); CPU and NUMA affinity of each GPU;
and NIC names. From that:

* NUMA nodes: devices related by anything but SYS share one; its CPUs are the
  GPUs' CPU affinity. A NIC that is SYS to every GPU gets a NUMA node of its
  own with the CPUs no GPU has.
* PCI tree: a PCIe switch for each set of devices that are PIX to each other;
  where several such sets are PXB to each other, a switch above them. A device
  PIX and PXB to nothing sits on a root port of its NUMA node. PHB and NODE
  are the same to NCCL (devices on root ports of one NUMA node).
* NVLinks: NV# to every other GPU, more than a GPU has, means NVSwitches (#
  per GPU, spread as on the reference preset); otherwise # direct links.

The tree is then checked against every relation of the matrix. Not shown by
nvidia-smi, so invented or taken from the reference preset of the GPU model
(each said in a note): bus numbers, the GPU model (unless NV# names one: 18
NVLinks to NVSwitches is an H100, 12 an A100; else --gpu-model), CPU vendor
and model, PCI switch and NIC ids, NIC speed and link layer. GPU pairs joined
by NVLink hide their PCI relation; they share a switch only when a NIC shows it.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from ncclsim.cluster.cpumask import cpumask
from ncclsim.cluster.model import MAX_NVLINKS
from ncclsim.platform.models import GpuCatalog
from ncclsim.topology.importers.raw import (
    Key, Notes, RawCpu, RawGpu, RawHost, RawNic, RawNode, RawSocket, RawSwitch, TopoImportError)
from ncclsim.topology.importers.reference import nvswitch_split, reference_for

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")  # nvidia-smi underlines the header
_NV = re.compile(r"^NV(\d+)$")
_LEGEND = re.compile(r"^\s*(NIC\d+)\s*:\s*(\S+)\s*$")
_CPUS = re.compile(r"^\d+(-\d+)?(,\d+(-\d+)?)*$")

# Distance as NCCL sees it: PHB and NODE both mean "through the CPU".
PIX, PXB, HOST, SYS = 1, 2, 3, 4
RELATIONS = {"PIX": PIX, "PXB": PXB, "PHB": HOST, "NODE": HOST, "SYS": SYS, "SOC": SYS}
REL_NAMES = {PIX: "PIX", PXB: "PXB", HOST: "PHB/NODE", SYS: "SYS"}
TRAILING = ("CPU Affinity", "NUMA Affinity", "GPU NUMA ID")
GPU, NIC, SWITCH, NVSWITCH = range(4)  # first element of the keys


@dataclass
class _Device:
    column: str  # "GPU0", "NIC3", "mlx5_0"
    key: Key
    line: int = 0
    name: Optional[str] = None  # NICs: the legend's name
    cpus: Optional[frozenset[int]] = None  # GPUs: CPU affinity
    numa: Optional[int] = None  # GPUs: NUMA affinity

    @property
    def is_gpu(self) -> bool:
        return self.key[0] == GPU


def read_nvidia_smi(path: Path, text: str, catalog: GpuCatalog,
                    gpu_model: Optional[str] = None) -> RawHost:
    matrix = _parse(path, text)
    return _Inference(path, matrix, catalog, gpu_model).host()


# ---- parsing ----

@dataclass
class _Matrix:
    devices: list[_Device]
    rel: dict[tuple[int, int], str]  # (row, column) index -> cell


def _parse(path: Path, text: str) -> _Matrix:
    lines = [_ANSI.sub("", line).rstrip() for line in text.splitlines()]
    header_at = next((i for i, line in enumerate(lines)
                      if line.split()[:1] == ["GPU0"] and line.split()[1:2] != ["X"]), None)
    if header_at is None:
        raise TopoImportError(f"{path}: no header line with GPU0, GPU1, ... : not the output of "
                              "`nvidia-smi topo -m`")
    header = lines[header_at]
    tokens = header.split()
    columns: list[str] = []
    for t in tokens:
        if t in ("CPU", "NUMA") or (t == "GPU" and "GPU NUMA" in header):
            break
        columns.append(t)
    trailing = sorted((header.find(name), name) for name in TRAILING if name in header)
    legend = {m.group(1): m.group(2) for line in lines if (m := _LEGEND.match(line))}

    devices, ngpu, nnic = [], 0, 0
    for c in columns:
        if re.match(r"^GPU\d+$", c):
            devices.append(_Device(c, (GPU, ngpu)))
            ngpu += 1
        else:  # NIC<i> with a legend, or the NIC's name itself (older nvidia-smi)
            devices.append(_Device(c, (NIC, nnic), name=legend.get(c, None if re.match(
                r"^NIC\d+$", c) else c)))
            nnic += 1
    if len(set(columns)) != len(columns):
        raise TopoImportError(f"{path}:{header_at + 1}: a column appears twice")

    rel: dict[tuple[int, int], str] = {}
    index = {d.column: i for i, d in enumerate(devices)}
    for n, line in enumerate(lines[header_at + 1:], start=header_at + 2):
        cells = line.split()
        if not cells or cells[0] not in index or devices[index[cells[0]]].line:
            continue
        i = index[cells[0]]
        d = devices[i]
        d.line = n
        if len(cells) < 1 + len(devices):
            raise TopoImportError(f"{path}:{n}: row {d.column} has {len(cells) - 1} entries for "
                                  f"{len(devices)} columns")
        for j, cell in enumerate(cells[1:1 + len(devices)]):
            rel[i, j] = cell
            ok = cell == "X" if i == j else (cell in RELATIONS or (
                _NV.match(cell) is not None and d.is_gpu and devices[j].is_gpu))
            if not ok:
                raise TopoImportError(
                    f"{path}:{n}: row {d.column}, column {devices[j].column}: {cell!r} is not "
                    "what nvidia-smi prints there (X on the diagonal; NV#, PIX, PXB, PHB, NODE, "
                    "SYS)")
        if d.is_gpu:
            _affinities(path, n, d, cells[1 + len(devices):], [t for _, t in trailing])
    for d in devices:
        if not d.line:
            raise TopoImportError(f"{path}: no row for {d.column}")
    for (i, j), cell in rel.items():
        if rel[j, i] != cell:
            raise TopoImportError(
                f"{path}:{devices[i].line}: {devices[i].column}/{devices[j].column} is {cell} but "
                f"{devices[j].column}/{devices[i].column} (line {devices[j].line}) is {rel[j, i]}")
    return _Matrix(devices, rel)


def _affinities(path: Path, line: int, d: _Device, values: list[str], names: list[str]) -> None:
    for name, value in zip(names, values):
        if name == "CPU Affinity" and value != "N/A":
            if not _CPUS.match(value):
                raise TopoImportError(f"{path}:{line}: row {d.column}: CPU Affinity {value!r} is "
                                      "not a CPU list (0-55,112-167)")
            cpus: set[int] = set()
            for part in value.split(","):
                lo, _, hi = part.partition("-")
                cpus.update(range(int(lo), int(hi or lo) + 1))
            d.cpus = frozenset(cpus)
        elif name == "NUMA Affinity" and value.isdigit():
            d.numa = int(value)


# ---- inference ----

class _UnionFind:
    def __init__(self, n: int) -> None:
        self.parent = list(range(n))

    def find(self, a: int) -> int:
        while self.parent[a] != a:
            self.parent[a] = self.parent[self.parent[a]]
            a = self.parent[a]
        return a

    def union(self, a: int, b: int) -> None:
        self.parent[self.find(a)] = self.find(b)

    def groups(self, members: list[int]) -> list[list[int]]:
        out: dict[int, list[int]] = {}
        for m in members:
            out.setdefault(self.find(m), []).append(m)
        return list(out.values())


class _Inference:
    def __init__(self, path: Path, m: _Matrix, catalog: GpuCatalog,
                 gpu_model: Optional[str]) -> None:
        self.path = path
        self.devices = m.devices
        self.cells = m.rel
        self.catalog = catalog
        self.forced_model = gpu_model
        self.notes = Notes()
        self.gpus = [i for i, d in enumerate(self.devices) if d.is_gpu]
        self.nics = [i for i, d in enumerate(self.devices) if not d.is_gpu]
        if not self.gpus:
            raise TopoImportError(f"{path}: no GPU columns")

    def rel(self, a: int, b: int) -> Optional[int]:
        """PIX..SYS, or None where NVLink hides the PCI relation."""
        return RELATIONS.get(self.cells[a, b])

    def nv(self, a: int, b: int) -> int:
        m = _NV.match(self.cells[a, b])
        return int(m.group(1)) if m else 0

    def host(self) -> RawHost:
        model, fabric = self.nvlinks()
        ref = reference_for(model)
        self.notes.add("nvidia-smi topo -m shows no bus ids: bus numbers are invented")
        sockets = self.sockets()
        ids = itertools.count(1)
        parents: dict[int, list[int]] = {}  # device -> its switches' ids, nearest first

        def make(i: int) -> RawNode:
            d = self.devices[i]
            if d.is_gpu:
                return RawGpu(d.key, d.key[1:], model, fabric[i])
            return RawNic(d.key, d.key[1:], d.name, ref.nic.transport, ref.nic.speed_mbps,
                          ref.nic.port, ref.nic.latency_us, ref.nic.identity, ref.nic.link,
                          None, None)

        def switch(members: list[int], children: list[RawNode]) -> RawSwitch:
            """A switch above `children`, the devices `members` somewhere below it."""
            sw = RawSwitch((SWITCH, next(ids)), ref.switch_identity, ref.switch_link, children)
            for i in members:
                parents.setdefault(i, []).append(sw.key[1])
            return sw

        raw_sockets = []
        for numa, cpus, members in sockets:
            sock = RawSocket(numa, cpus)
            for complex_ in self.grouped(members, PXB):
                classes = self.grouped(complex_, PIX)
                if len(complex_) == 1:  # on a root port
                    sock.children.append(make(complex_[0]))
                elif len(classes) == 1:
                    sock.children.append(switch(complex_, [make(i) for i in complex_]))
                else:
                    subs: list[RawNode] = [switch(c, [make(i) for i in c]) for c in classes]
                    sock.children.append(switch(complex_, subs))
            raw_sockets.append(sock)
        if parents:
            self.notes.add(f"PCI switch ids and links not shown: {ref.preset}'s "
                           f"({ref.switch_identity.vendor:#06x}:{ref.switch_identity.device:#06x}"
                           f", {ref.switch_link.speed} x{ref.switch_link.width})")
        if self.nics:
            self.notes.add(f"NIC speed, link layer and PCI ids not shown: {ref.preset}'s "
                           f"({ref.nic.speed_mbps} Mb/s {ref.nic.transport}, "
                           f"{ref.nic.identity.vendor:#06x}:{ref.nic.identity.device:#06x})")
        self.check(sockets, parents)
        self.notes.add(f"CPU vendor and model not shown: {ref.preset}'s ({ref.cpu.vendor}, "
                       f"family {ref.cpu.family_id}, model {ref.cpu.model_id})")
        nvswitches = sorted({t for links in fabric.values() for t, _ in links
                             if t[0] == NVSWITCH})
        return RawHost(RawCpu(ref.cpu.arch, ref.cpu.vendor, ref.cpu.family_id, ref.cpu.model_id),
                       raw_sockets, nvswitches, real_bus_ids=False,
                       fallback_cores=(ref.cpu.cores_per_socket, ref.cpu.threads_per_core),
                       reference=ref.preset, notes=self.notes)

    # -- NVLinks and the GPU model --

    def nvlinks(self) -> tuple[str, dict[int, list[tuple[Key, int]]]]:
        limit = (self.catalog.get(self.forced_model).nvlinks if self.forced_model
                 else MAX_NVLINKS)
        through_switch: dict[int, int] = {}  # GPU -> NVLinks to the NVSwitches
        direct: dict[int, list[tuple[int, int]]] = {}
        for g in self.gpus:
            peers = [(p, self.nv(g, p)) for p in self.gpus if p != g and self.nv(g, p)]
            if sum(n for _, n in peers) > limit:
                through_switch[g] = max(n for _, n in peers)
            else:
                direct[g] = peers
        model = self.model(through_switch)
        ref = reference_for(model)
        fabric: dict[int, list[tuple[Key, int]]] = {
            g: [(self.devices[p].key, n) for p, n in peers] for g, peers in direct.items()}
        if through_switch:
            split = nvswitch_split(ref, max(through_switch.values()))
            for g, links in through_switch.items():
                fabric[g] = [((NVSWITCH, k), n) for k, n in enumerate(nvswitch_split(ref, links))]
            self.notes.add(f"NV# between every pair of GPUs: NVLinks through NVSwitches, spread "
                           f"over {len(split)} NVSwitch(es) as on {ref.preset}")
        return model, fabric

    def model(self, through_switch: dict[int, int]) -> str:
        if self.forced_model:
            return self.catalog.get(self.forced_model).key
        counts = set(through_switch.values())
        if len(through_switch) == len(self.gpus) and len(counts) == 1:
            (n,) = counts
            # The catalog lists each link count's reference model first (h100: 18, a100: 12).
            found = [m for m in self.catalog if m.nvlinks == n]
            if found:
                others = f"; also {', '.join(m.key for m in found[1:])}" if found[1:] else ""
                self.notes.add(f"nvidia-smi does not name the GPU model: {found[0].key} "
                               f"({found[0].name}), the first model with {n} NVLinks to "
                               f"NVSwitches{others} (give --gpu-model otherwise)")
                return found[0].key
        raise TopoImportError(
            f"{self.path}: `nvidia-smi topo -m` does not name the GPU model and its NVLinks "
            f"do not tell it: give --gpu-model ({', '.join(self.catalog.keys())})")

    # -- NUMA nodes --

    def grouped(self, members: list[int], within: int) -> list[list[int]]:
        """Members joined by a relation of at most `within`, ordered by their
        first member (the matrix order: GPUs, then NICs)."""
        uf = _UnionFind(len(self.devices))
        for a in members:
            for b in members:
                r = self.rel(a, b)
                if a < b and r is not None and r <= within:
                    uf.union(a, b)
        return sorted((sorted(g) for g in uf.groups(members)), key=lambda g: g[0])

    def sockets(self) -> list[tuple[int, Optional[str], list[int]]]:
        """(NUMA id, CPU mask, members) per NUMA node."""
        uf = _UnionFind(len(self.devices))
        everyone = list(range(len(self.devices)))
        for a in everyone:
            for b in everyone:
                r = self.rel(a, b)
                if a < b and r is not None and r < SYS:
                    uf.union(a, b)
        self.join_by_numa(uf)
        groups = sorted((sorted(g) for g in uf.groups(everyone)), key=lambda g: g[0])

        known = [d.cpus for d in self.devices if d.cpus is not None]
        nr_cpus = max((max(c) for c in known if c), default=-1) + 1
        all_known = frozenset().union(*known) if known else frozenset()
        out: list[tuple[int, Optional[str], list[int]]] = []
        used = {n for g in self.gpus if (n := self.devices[g].numa) is not None}
        for members in groups:
            numas = {n for m in members if (n := self.devices[m].numa) is not None}
            names = ", ".join(self.devices[m].column for m in members)
            if len(numas) > 1:
                raise TopoImportError(f"{self.path}: {names} are not SYS to each other but give "
                                      f"NUMA nodes {', '.join(map(str, sorted(numas)))}")
            numa = numas.pop() if numas else None
            if numa is not None and numa in {n for n, _, _ in out}:
                # The matrix's SYS wins over the NUMA column: another CPU (join_by_numa).
                given, numa = numa, min(set(range(len(groups) + len(used) + 1)) - used)
                self.notes.add(f"{names} report NUMA node {given} but are SYS (across the "
                               f"inter-CPU link) to devices of it: placed on NUMA node {numa}, "
                               "a CPU of their own with the CPUs nvidia-smi gives them")
            elif numa is None:
                numa = min(set(range(len(groups) + len(used) + 1)) - used)
                self.notes.add(f"no NUMA affinity for {names}: NUMA node {numa}")
            used.add(numa)
            cpus = frozenset().union(*(self.devices[m].cpus or frozenset() for m in members))
            if not cpus and nr_cpus > 0:
                cpus = frozenset(range(nr_cpus)) - all_known or frozenset(range(nr_cpus))
                self.notes.add(f"no CPU affinity for {names} (NUMA node {numa}): given the CPUs "
                               "no GPU has")
            mask = cpumask(cpus, nr_cpus) if cpus else None
            out.append((numa, mask, members))
        return out

    def join_by_numa(self, uf: _UnionFind) -> None:
        """Put GPUs of the same NUMA affinity on one node, unless the matrix has a
        SYS between their devices: SYS crosses the inter-CPU link, whatever the
        NUMA column says (seen on real machines), so the matrix wins."""
        by_numa: dict[int, list[int]] = {}  # NUMA id -> a GPU of each group claiming it
        for g in self.gpus:
            numa = self.devices[g].numa
            if numa is None:
                continue
            mine = self.members(uf, g)
            joined = next((r for r in by_numa.get(numa, [])
                           if not any(self.rel(a, b) == SYS
                                      for a in mine for b in self.members(uf, r))), None)
            if joined is None:
                by_numa.setdefault(numa, []).append(g)
            else:
                uf.union(g, joined)

    def members(self, uf: _UnionFind, device: int) -> list[int]:
        root = uf.find(device)
        return [d for d in range(len(self.devices)) if uf.find(d) == root]

    # -- the check --

    def check(self, sockets: list[tuple[int, Optional[str], list[int]]],
              parents: dict[int, list[int]]) -> None:
        numa_of = {m: numa for numa, _, members in sockets for m in members}
        for a in range(len(self.devices)):
            for b in range(a + 1, len(self.devices)):
                want = self.rel(a, b)
                if want is None:
                    continue
                pa, pb = parents.get(a, []), parents.get(b, [])
                got = (SYS if numa_of[a] != numa_of[b] else
                       PIX if pa[:1] and pa[:1] == pb[:1] else
                       PXB if set(pa) & set(pb) else HOST)
                if got != want:
                    da, db = self.devices[a], self.devices[b]
                    raise TopoImportError(
                        f"{self.path}:{da.line}: {da.column}/{db.column} is {self.cells[a, b]}, "
                        f"which no PCI tree agreeing with the other relations gives "
                        f"(inferred: {REL_NAMES[got]})")
