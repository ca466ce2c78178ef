"""What `topo render` can draw, from one SOURCE argument: a preset name, a
spec YAML, a topology XML, a directory of host XMLs (DIR/h<i>/topo.xml, as
`topo generate` writes) or a run directory."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import networkx as nx

from ncclsim import NcclsimError
from ncclsim.cluster.build import build_cluster
from ncclsim.cluster.presets import load_preset
from ncclsim.platform.models import GpuCatalog
from ncclsim.topology.graph import from_cluster, hosts
from ncclsim.topology.graph_xml import from_xml_files
from ncclsim.report.run_view import RunView, is_run_dir, load_run
from ncclsim.rundir import host_topologies

SPEC_SUFFIXES = (".yaml", ".yml")


class SourceError(NcclsimError):
    """A SOURCE that is none of the things `topo render` draws."""


@dataclass(frozen=True)
class LoadedSource:
    kind: str  # preset, spec, xml, xml_dir, run
    source: str
    title: str
    graph: nx.Graph
    run: Optional[RunView] = None


@dataclass(frozen=True)
class ClusterShape:
    """--hosts/--gpus/--nics: only a preset or a spec is built to a shape."""
    hosts: Optional[int] = None
    gpus: Optional[int] = None
    nics: Optional[int] = None

    def given(self) -> bool:
        return any(v is not None for v in (self.hosts, self.gpus, self.nics))


def load_source(text: str, catalog: GpuCatalog,
                shape: ClusterShape = ClusterShape()) -> LoadedSource:
    path = Path(text).expanduser()
    if path.suffix in SPEC_SUFFIXES or ("/" not in text and not path.suffix
                                        and not path.exists()):
        return _cluster(text, path, catalog, shape)
    if not path.exists():
        raise SourceError(f"{text}: no such file or directory (SOURCE: a preset name, a spec "
                          ".yaml, a topology .xml, a directory of h<i>/topo.xml or a run "
                          "directory)")
    if shape.given():
        raise SourceError(f"--hosts/--gpus/--nics shape a preset or a spec; {text} has its own "
                          "hosts")
    if path.is_dir():
        return _directory(path, catalog)
    return LoadedSource("xml", text, f"{path.name}: NCCL topology", from_xml_files([path], catalog))


def _cluster(text: str, path: Path, catalog: GpuCatalog, shape: ClusterShape) -> LoadedSource:
    if path.suffix in SPEC_SUFFIXES:
        if not path.is_file():
            raise SourceError(f"{text}: no such spec file")
        # An absolute path is always read as a file, never as a preset name.
        preset, kind = load_preset(str(path.resolve())), "spec"
    else:
        preset, kind = load_preset(text), "preset"
    cluster = build_cluster(preset, hosts=1 if shape.hosts is None else shape.hosts,
                            gpus=shape.gpus, nics=shape.nics, catalog=catalog)
    n = len(cluster.hosts)
    title = f"{preset.name}: {n} host{'s' if n > 1 else ''} of {len(cluster.hosts[0].gpus)} GPUs"
    return LoadedSource(kind, text, title, from_cluster(cluster, catalog))


def _directory(path: Path, catalog: GpuCatalog) -> LoadedSource:
    if is_run_dir(path):
        run = load_run(path, catalog)
        nhosts = len(hosts(run.graph))
        version = run.report.get("nccl_version")
        title = (f"{path.resolve().name}: {nhosts} host{'s' if nhosts > 1 else ''}, "
                 f"{len(run.rank_gpu)} ranks" + (f", NCCL {version}" if version else ""))
        return LoadedSource("run", str(path), title, run.graph, run)
    files = host_topologies(path)
    if not files:
        raise SourceError(f"{path}: neither a run directory (launch.json, run.json, NCCL logs) "
                          "nor a directory of host topologies (h<i>/topo.xml)")
    return LoadedSource("xml_dir", str(path), f"{path.resolve().name}: {len(files)} host "
                        "topologies", from_xml_files(files, catalog))
