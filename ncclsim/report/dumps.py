"""NCCL's XML dumps: the graphs it searched (NCCL_GRAPH_DUMP_FILE) and the
topology it saw (NCCL_TOPO_DUMP_FILE)."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any, Optional

from ncclsim import NcclsimError
from ncclsim.report.model import Graph, GraphChannel, Topology
from ncclsim.rundir import GRAPH_DUMP, TOPO_DUMP

# Where NCCL logs go when NCCL_DEBUG_FILE is not set: the rank's own output.
_OUTPUT_FILES = re.compile(r"(stdout|stderr|output)|\.(out|err|txt)$")


def _natural(path: Path) -> list[Any]:
    """ranks/2 before ranks/10."""
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", str(path))]


def under(run_dir: Path, pattern: str) -> list[Path]:
    """The files below run_dir matching `pattern`, in natural order."""
    return sorted((p for p in run_dir.rglob(pattern) if p.is_file()), key=_natural)


def output_files(run_dir: Path) -> list[Path]:
    """The programs' own output files (stdout, stderr, *.out ...)."""
    return [p for p in under(run_dir, "*") if _OUTPUT_FILES.search(p.name) and p.suffix != ".log"]


def find_dump(run_dir: Path, prefix: str) -> Optional[Path]:
    """NCCL's dump (prefix "topo" or "graph"): the one `ncclsim launch` asks
    for, else one at the top of the directory (a name with `dump` first), else
    one deeper that says `dump` (hosts/*/topo.xml are the inputs, not dumps).
    Other launchers name their dumps as they like."""
    ours = run_dir / {"topo": TOPO_DUMP, "graph": GRAPH_DUMP}.get(prefix, "")
    if ours.is_file():
        return ours
    top = sorted(run_dir.glob(f"{prefix}*.xml"), key=lambda p: ("dump" not in p.name, p.name))
    if top:
        return top[0]
    deep = under(run_dir, f"{prefix}*dump*.xml")
    return deep[0] if deep else None

# NCCL_TOPO_PATTERN_*: what a searched graph is for.
PATTERNS = {1: "balanced_tree", 2: "split_tree", 3: "tree", 4: "ring", 5: "nvls", 6: "collnet_direct"}


def graph_kind(graph_id: Optional[int], pattern: int) -> str:
    """The algorithm a graph serves. The tree search may fall back from pattern 1
    to 2 or 3 and collnet-chain also uses pattern 3, so the id decides where the
    pattern cannot (ids: 0 ring, 1 tree, 2 collnet chain, 3 nvls, 4 collnet direct;
    releases before 2.19 gave collnet direct id 2 as well)."""
    if pattern == 4:
        return "ring"
    if pattern == 5:
        return "nvls"
    if pattern == 6:
        return "collnet_direct"
    if graph_id == 2:
        return "collnet_chain"
    if graph_id == 1 or pattern in (1, 2, 3):
        return "tree"
    return f"pattern_{pattern}"


def _xml_root(path: Path, tag: str) -> ET.Element:
    try:
        root = ET.parse(path).getroot()
    except (ET.ParseError, OSError) as e:
        raise NcclsimError(f"{path}: not readable as NCCL's XML dump: {e}") from None
    if root.tag != tag:
        raise NcclsimError(f"{path}: expected <{tag}> at the top, found <{root.tag}>")
    return root


def _num(attrs: dict[str, str], name: str, kind: type = int) -> Any:
    value = attrs.get(name)
    if value is None:
        return None
    for parse in ((float,) if kind is float else (lambda v: int(v, 0), int)):
        try:
            return parse(value)
        except ValueError:
            pass
    return None


def read_graphs(path: Path) -> tuple[Graph, ...]:
    """`<graphs><graph id pattern nchannels speedintra ..><channel><net/><gpu rank/>..`."""
    graphs = []
    for g in _xml_root(path, "graphs").iter("graph"):
        a = g.attrib
        pattern = _num(a, "pattern") or 0
        graph_id = _num(a, "id")
        channels = tuple(
            GraphChannel(gpus=tuple(r for r in (_num(gpu.attrib, "rank") for gpu in ch.iter("gpu")) if r is not None),
                         nets=tuple(n.attrib.get("dev", "?") for n in ch.iter("net")))
            for ch in g.iter("channel"))
        graphs.append(Graph(kind=graph_kind(graph_id, pattern), graph_id=graph_id, pattern=pattern,
                            nchannels=_num(a, "nchannels") or 0,
                            speed_intra=_num(a, "speedintra", float), speed_inter=_num(a, "speedinter", float),
                            type_intra=a.get("typeintra"), type_inter=a.get("typeinter"),
                            crossnic=_num(a, "crossnic"), same_channels=_num(a, "samechannels"),
                            channels=channels))
    return tuple(sorted(graphs, key=lambda x: (x.graph_id is None, x.graph_id)))


def read_topology(path: Path, name: str) -> Topology:
    """GPUs, NICs and NVLink count of the host in `<system>` (rank 0's, for the dump)."""
    root = _xml_root(path, "system")
    gpus = []
    for pci in root.iter("pci"):
        for gpu in pci.findall("gpu"):
            gpus.append({"busid": pci.attrib.get("busid"), "dev": _num(gpu.attrib, "dev"),
                         "rank": _num(gpu.attrib, "rank"), "sm": _num(gpu.attrib, "sm"),
                         "gdr": _num(gpu.attrib, "gdr")})
    nics = [{"name": n.attrib.get("name"), "dev": _num(n.attrib, "dev"), "speed": _num(n.attrib, "speed"),
             "gdr": _num(n.attrib, "gdr"), "collsupport": _num(n.attrib, "coll")}
            for n in root.iter("net")]
    nvlinks = sum(_num(n.attrib, "count") or 0 for n in root.iter("nvlink"))
    return Topology(file=name, gpus=tuple(gpus), nics=tuple(nics), nvlinks=nvlinks)
