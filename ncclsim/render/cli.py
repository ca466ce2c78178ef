"""`ncclsim topo render SOURCE -o OUT.svg|OUT.png`: a picture of a cluster, a
topology XML or a run (with the rings and trees NCCL built over it)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional, Sequence, TextIO

from ncclsim import NcclsimError
from ncclsim.platform.models import GpuCatalog

# networkx and matplotlib (most of a second) load when a picture is drawn, not
# with every ncclsim command.
if TYPE_CHECKING:
    from ncclsim.topology.drawing import Drawing, Segment
    from ncclsim.render.sources import LoadedSource

Channels = list[tuple[str, int, tuple[int, ...], Sequence["Segment"]]]
LAYOUTS = ("auto", "grid", "dot")  # ncclsim.topology.layout.compute_layout's names


class RenderCliError(NcclsimError):
    """Options that do not fit the SOURCE."""


def add_parser(sub: Any) -> None:
    """The `render` action under `ncclsim topo`."""
    r = sub.add_parser(
        "render", help="draw a cluster, a topology XML or a run's rings and trees (SVG, PNG)",
        description="Draw SOURCE: hosts as boxes, CPUs, PCIe switches, GPUs, NICs, NVLinks and "
                    "NVSwitches, and the network joining the hosts' NICs. SOURCE is a preset name, "
                    "a spec .yaml, an NCCL topology XML (a host file or NCCL's dump), a directory "
                    "of h<i>/topo.xml (as `topo generate` writes) or a run directory (as `launch` "
                    "writes), for which the rings NCCL built are drawn over the topology, one "
                    "colour per channel. Every drawn element has an id in the SVG "
                    "(node:h0/gpu3, edge:h0/gpu3--h0/nvsw1, ring:ch2:h0/gpu3->h0/gpu4); --json "
                    "prints the same drawing model.")
    r.add_argument("source", metavar="SOURCE")
    r.add_argument("-o", "--output", type=Path, metavar="OUT",
                   help="the picture: OUT.svg or OUT.png")
    r.add_argument("--channel", type=int, metavar="N",
                   help="run directory: draw channel N's ring and tree only (default: the rings "
                        "of every channel, no trees: trees of all channels at once hide each "
                        "other)")
    r.add_argument("--hosts", type=int, metavar="N", help="preset/spec: hosts (default 1)")
    r.add_argument("--gpus", type=int, metavar="G", help="preset/spec: keep the first G GPUs")
    r.add_argument("--nics", type=int, metavar="M", help="preset/spec: keep the first M NICs")
    r.add_argument("--layout", choices=LAYOUTS, default="grid",
                   help="grid (default): ncclsim's own, hosts side by side, the same on every "
                        "machine; dot: Graphviz's (needs `dot` installed); auto: dot when "
                        "installed, else grid")
    r.add_argument("--json", action="store_true",
                   help="print the drawing model (nodes, edges, ring/tree segments with their "
                        "ids; schema_version 1) instead of a summary")
    r.set_defaults(topo_run=cmd_render)


def _channels(src: "LoadedSource", channel: Optional[int]) -> Channels:
    run = src.run
    if run is None:
        if channel is not None:
            raise RenderCliError(f"--channel {channel}: only a run directory has channels; "
                                 f"{src.source} is a {src.kind.replace('_', ' ')}")
        return []
    if channel is None:
        return [("ring", c, run.rings[c], run.segments("ring", [c])) for c in sorted(run.rings)]
    if channel not in run.rings and channel not in run.trees:
        known = sorted(set(run.rings) | set(run.trees))
        raise RenderCliError(f"--channel {channel}: {src.source} has channels "
                             f"{_ranges(known) if known else 'none'}")
    found: Channels = []
    if channel in run.rings:
        found.append(("ring", channel, run.rings[channel], run.segments("ring", [channel])))
    if channel in run.trees:
        found.append(("tree", channel, (), run.segments("tree", [channel])))
    return found


def _ranges(values: Sequence[int]) -> str:
    """[0, 1, 2, 5] -> "0-2, 5"."""
    out: list[str] = []
    for v in values:
        if out and v == int(out[-1].split("-")[-1]) + 1:
            out[-1] = f"{out[-1].split('-')[0]}-{v}"
        else:
            out.append(str(v))
    return ", ".join(out)


def make_drawing(source: str, catalog: GpuCatalog, hosts: Optional[int] = None,
                 gpus: Optional[int] = None, nics: Optional[int] = None,
                 channel: Optional[int] = None, layout: str = "grid") -> "Drawing":
    from ncclsim.topology.drawing import build_drawing
    from ncclsim.topology.layout import compute_layout
    from ncclsim.render.sources import ClusterShape, load_source

    src = load_source(source, catalog, ClusterShape(hosts, gpus, nics))
    channels = _channels(src, channel)
    used, pos = compute_layout(src.graph, layout)
    title = src.title + (f", channel {channel}" if channel is not None else
                         f", rings of channels {_ranges([c for _, c, _, _ in channels])}"
                         if channels else "")
    return build_drawing(src.graph, pos, title=title, source=src.source, source_kind=src.kind,
                         layout=used, channels=channels,
                         notes=src.run.notes if src.run else ())


def cmd_render(args: argparse.Namespace, out: TextIO, catalog: GpuCatalog) -> int:
    output: Optional[Path] = args.output
    if output is None and not args.json:
        raise RenderCliError("give -o OUT.svg or -o OUT.png (or --json for the drawing model)")
    from ncclsim.topology.render import picture_format, render

    if output is not None:
        picture_format(output)  # before any work
    drawing = make_drawing(args.source, catalog, args.hosts, args.gpus, args.nics, args.channel,
                           args.layout)
    if output is not None:
        render(drawing, output)
    if args.json:
        json.dump({**drawing.to_json(), "output": str(output) if output else None}, out, indent=1)
        out.write("\n")
        return 0
    nhosts = len(drawing.hosts)
    segments = sum(len(c.segments) for c in drawing.channels)
    out.write(f"{output}: {nhosts} host{'s' if nhosts != 1 else ''}, {len(drawing.nodes)} nodes, "
              f"{len(drawing.edges)} links" +
              (f", {segments} ring/tree hops in {len(drawing.channels)} channel drawings"
               if drawing.channels else "") + f" ({drawing.layout} layout)\n")
    for note in drawing.notes:
        out.write(f"note: {note}\n")
    return 0

