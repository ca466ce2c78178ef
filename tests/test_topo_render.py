"""`ncclsim topo render` and the graph behind it (ncclsim.topology.graph):
pictures checked by structure, the ids every drawn element carries in the
SVG, against the cluster model, NCCL's dumps and a run's rings and trees."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any, Callable

import pytest
from lxml import etree

from ncclsim.cli import main
from ncclsim.cluster.build import build_cluster
from ncclsim.platform.models import load_models
from ncclsim.report.build import build_report
from ncclsim.topology.host_artifacts import write_host_artifacts
from ncclsim.topology.graph import (
    from_cluster, gpu_node, nic_node, nodes_of, nvswitch_node, switch_node)
from ncclsim.topology.graph_paths import gpu_path, nic_paths, nvlink_flow_gbps
from ncclsim.topology.graph_xml import from_xml_files
from ncclsim.topology.render import render
from ncclsim.render.cli import make_drawing

RunCli = Callable[..., "subprocess.CompletedProcess[str]"]

DATA = Path(__file__).resolve().parent / "data" / "report"
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
PRESETS = ("dgx-h100", "dgx-a100", "hgx-h100-4nic", "pcie-l40s")


def svg_ids(path: Path) -> list[str]:
    """Our ids only (matplotlib names its other elements figure_1, text_3...)."""
    ours = re.compile(r"^(node|edge|host|ring|tree):")
    return [i for e in etree.parse(str(path)).iter() if (i := e.get("id")) and ours.match(i)]


def by_prefix(ids: list[str], prefix: str) -> set[str]:
    return {i for i in ids if i.startswith(prefix)}


def run_main(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """`ncclsim ARGS` in this process (the console script is tested below)."""
    rc = main(list(args))
    captured = capsys.readouterr()
    return rc, captured.out, captured.err


# ---- the graph ----

@pytest.mark.parametrize("preset", PRESETS)
def test_graph_of_the_model_equals_the_graph_of_its_xml(preset: str, tmp_path: Path) -> None:
    cluster = build_cluster(preset, hosts=2)
    write_host_artifacts(cluster, tmp_path)
    model = from_cluster(cluster)
    xml = from_xml_files([tmp_path / "h0" / "topo.xml", tmp_path / "h1" / "topo.xml"])
    assert set(model.nodes) == set(xml.nodes)
    edges = {e["id"]: (e["kind"], e.get("count"), e["bandwidth_gbps"])
             for _, _, e in model.edges(data=True)}
    assert edges == {e["id"]: (e["kind"], e.get("count"), e["bandwidth_gbps"])
                     for _, _, e in xml.edges(data=True)}


def test_dgx_h100_graph() -> None:
    (host,) = build_cluster("dgx-h100").hosts
    g = from_cluster(build_cluster("dgx-h100"))
    kinds = Counter(kind for _, kind in g.nodes(data="kind"))
    assert kinds == {"host": 1, "cpu": 2, "pci_switch": 8, "gpu": 8, "nic": 8, "nvswitch": 4,
                     "network": 1}
    gpu0 = g.nodes[gpu_node(0, 0)]
    assert (gpu0["bus_id"], gpu0["model"], gpu0["nvlinks"]) == (
        str(host.gpus[0].bus_id), "h100", 18)
    # 18 NVLinks per GPU, one edge per GPU-NVSwitch pair carrying the count (5+5+4+4).
    for gpu in nodes_of(g, "gpu"):
        links = [g.edges[gpu, n] for n in g[gpu] if g.edges[gpu, n]["kind"] == "nvlink"]
        assert sorted(e["count"] for e in links) == [4, 4, 5, 5]
        assert {e["bandwidth_gbps"] for e in links} == {100.0, 125.0}  # 25 GB/s per NVLink 4
    pcie = g.edges[switch_node(0, host.switches[0].bus_id), gpu_node(0, 0)]
    assert pcie["kind"] == "pcie" and pcie["bandwidth_gbps"] == pytest.approx(63.02)  # Gen5 x16
    assert g.edges["h0/cpu0", "h0/cpu1"]["bandwidth_gbps"] == 22.0  # NCCL's Sapphire Rapids UPI
    assert g.edges[nic_node(0, 3), "net"]["bandwidth_gbps"] == 50.0  # 400 Gb/s


def test_paths_and_bottlenecks() -> None:
    g = from_cluster(build_cluster("dgx-h100", hosts=2))
    p = gpu_path(g, gpu_node(0, 0), gpu_node(0, 5))
    assert p.kinds == ("nvlink", "nvlink") and p.nodes[1] == nvswitch_node(0, 0)
    assert p.bottleneck_gbps == 125.0  # one NVSwitch, 5 links
    assert nvlink_flow_gbps(g, gpu_node(0, 0), gpu_node(0, 5)) == 450.0  # all four switches
    best = nic_paths(g, gpu_node(0, 3))[0]
    assert best.nodes[-1] == nic_node(0, 3) and best.hops == 2  # the NIC on its PCIe switch
    across = gpu_path(g, gpu_node(0, 0), gpu_node(1, 5))
    assert "net" in across.nodes and across.bottleneck_gbps == 50.0  # the NIC's 400 Gb/s
    # No NVLink on an L40S box: GPUs on different sockets meet through the CPUs, not the network.
    l40s = from_cluster(build_cluster("pcie-l40s"))
    p = gpu_path(l40s, gpu_node(0, 0), gpu_node(0, 7))
    assert "inter_cpu" in p.kinds and "net" not in p.nodes and p.bottleneck_gbps == 22.0
    assert nvlink_flow_gbps(l40s, gpu_node(0, 0), gpu_node(0, 7)) == 0.0
    a100 = from_cluster(build_cluster("dgx-a100"))
    assert nvlink_flow_gbps(a100, gpu_node(0, 0), gpu_node(0, 7)) == 300.0


def test_nccl_dump_graph() -> None:
    # NCCL's own dump: GPUs right under the CPU, the NVSwitch it cannot see
    # (fffffff:ffff:ff), a socket NIC without a PCI device.
    g = from_xml_files([DATA / "two-hosts" / "topo.xml"])
    assert Counter(kind for _, kind in g.nodes(data="kind")) == {
        "host": 1, "cpu": 1, "gpu": 8, "nvswitch": 1, "nic": 1, "network": 1}
    assert all(g.edges[gpu, nvswitch_node(0, 0)]["count"] == 18 for gpu in nodes_of(g, "gpu"))
    assert g.nodes[nic_node(0, 0)]["name"] == "lo"


# ---- pictures ----

def test_preset_svg_ids_match_the_cluster(capsys: pytest.CaptureFixture[str],
                                          tmp_path: Path) -> None:
    out = tmp_path / "dgx.svg"
    rc, stdout, err = run_main(capsys, "topo", "render", "dgx-h100", "-o", str(out), "--json")
    assert rc == 0, err
    doc = json.loads(stdout)
    assert doc["schema_version"] == 1 and doc["source_kind"] == "preset"
    ids = svg_ids(out)
    assert len(ids) == len(set(ids))
    assert sorted(ids) == sorted(doc_gid for part in ("hosts", "nodes", "edges")
                                 for doc_gid in (x["gid"] for x in doc[part]))
    (host,) = build_cluster("dgx-h100").hosts
    assert by_prefix(ids, "node:") == {
        "node:net", *(f"node:h0/cpu{s.numa_id}" for s in host.sockets),
        *(f"node:{switch_node(0, s.bus_id)}" for s in host.switches),
        *(f"node:{gpu_node(0, g.index)}" for g in host.gpus),
        *(f"node:{nic_node(0, n.index)}" for n in host.nics),
        *(f"node:{nvswitch_node(0, k)}" for k in range(4))}
    kind = re.compile(r"node:h0/(nvsw|cpu|gpu|nic|sw)")
    kinds = Counter(m.group(1) for i in by_prefix(ids, "node:h0/") if (m := kind.match(i)))
    assert kinds == {"gpu": 8, "nic": 8, "nvsw": 4, "sw": 8, "cpu": 2}
    assert by_prefix(ids, "host:") == {"host:h0"}
    nvlinks = [e for e in doc["edges"] if e["kind"] == "nvlink"]
    assert len(nvlinks) == 32 and by_prefix(ids, "edge:h0/gpu0--h0/nvsw") == {
        f"edge:h0/gpu0--h0/nvsw{k}" for k in range(4)}
    per_gpu: Counter[str] = Counter()
    for e in nvlinks:
        per_gpu[e["source"]] += e["count"]
    assert per_gpu == {gpu_node(0, i): 18 for i in range(8)}
    assert len(by_prefix(ids, "edge:")) == 32 + 8 * 2 + 8 + 1 + 8  # NVLink, PCIe, CPU link, network


@pytest.mark.e2e
def test_png_by_the_console_script(run_cli: RunCli, tmp_path: Path) -> None:
    proc = run_cli("topo", "render", "hgx-h100-4nic", "--hosts", "2", "-o", "pics/hgx.png")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("pics/hgx.png: 2 hosts, ")
    data = (tmp_path / "pics" / "hgx.png").read_bytes()
    assert data.startswith(PNG_SIGNATURE) and 20_000 < len(data) < 5_000_000


def test_svg_is_reproducible(tmp_path: Path) -> None:
    drawing = make_drawing("pcie-l40s", load_models(), hosts=2)
    render(drawing, tmp_path / "a.svg")
    render(drawing, tmp_path / "b.svg")
    assert (tmp_path / "a.svg").read_bytes() == (tmp_path / "b.svg").read_bytes()
    assert sorted(svg_ids(tmp_path / "a.svg")) == sorted(drawing.gids())


def test_directory_of_host_xmls_and_one_xml(capsys: pytest.CaptureFixture[str],
                                            tmp_path: Path) -> None:
    write_host_artifacts(build_cluster("dgx-a100", hosts=2), tmp_path / "topo")
    rc, _, err = run_main(capsys, "topo", "render", str(tmp_path / "topo"), "-o",
                          str(tmp_path / "dir.svg"))
    assert rc == 0, err
    ids = svg_ids(tmp_path / "dir.svg")
    assert by_prefix(ids, "host:") == {"host:h0", "host:h1"}
    assert len(by_prefix(ids, "node:h1/gpu")) == 8 and len(by_prefix(ids, "node:h1/nvsw")) == 6
    rc, _, err = run_main(capsys, "topo", "render", str(DATA / "two-hosts" / "topo.xml"), "-o",
                          str(tmp_path / "dump.svg"))
    assert rc == 0, err
    assert "edge:h0/gpu7--h0/nvsw0" in svg_ids(tmp_path / "dump.svg")


def _ring_ids(rings: dict[int, tuple[int, ...]], gpu_of: dict[int, str]) -> set[str]:
    return {f"ring:ch{c}:{gpu_of[a]}->{gpu_of[b]}" for c, order in rings.items()
            for a, b in zip(order, order[1:] + order[:1])}


def test_checked_in_run_draws_every_ring(capsys: pytest.CaptureFixture[str],
                                         tmp_path: Path) -> None:
    # NCCL's output without ncclsim's hosts/ files: rank 0's topology dump
    # stands for both hosts; 8 ranks per host.
    run = DATA / "two-hosts"
    report = build_report(run)
    gpu_of = {r.rank: f"h{0 if r.host == 'ncclsim-h0' else 1}/gpu{r.device}" for r in report.ranks}
    rc, stdout, err = run_main(capsys, "topo", "render", str(run), "-o", str(tmp_path / "r.svg"),
                               "--json")
    assert rc == 0, err
    ids = svg_ids(tmp_path / "r.svg")
    assert by_prefix(ids, "ring:") == _ring_ids(report.rings, gpu_of)
    assert {c["channel"] for c in json.loads(stdout)["channels"]} == set(report.rings) == {0, 1}
    # The hop between hosts leaves through the NIC NCCL logged and the network.
    hop = next(s for c in json.loads(stdout)["channels"] for s in c["segments"]
               if s["id"] == "ring:ch0:h0/gpu1->h1/gpu0")
    assert hop["path"] == ["h0/gpu1", "h0/nic0", "net", "h1/nic0", "h1/gpu0"]


# ---- a run of ncclsim launch ----

@pytest.fixture(scope="module")
def launched_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """2 hosts x 2 GPUs of dgx-h100 (a few seconds)."""
    base = tmp_path_factory.mktemp("render-run")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NCCLSIM_", "NCCL_", "CUDA_"))}
    env["XDG_CACHE_HOME"] = str(base / "cache")
    run = base / "run"
    proc = subprocess.run([str(Path(sys.executable).parent / "ncclsim"), "launch", "--hosts", "2",
                           "--gpus", "2", "--run-dir", str(run)],
                          cwd=base, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return run


def _report_gpus(doc: dict[str, Any]) -> dict[int, str]:
    return {r["rank"]: f"h{int(r['host'][-1])}/gpu{r['device']}" for r in doc["ranks"]}


@pytest.mark.e2e
def test_launched_run_every_channel(capsys: pytest.CaptureFixture[str], launched_run: Path,
                                    tmp_path: Path) -> None:
    report = json.loads((launched_run / "run.json").read_text())
    rings = {int(c): tuple(r) for c, r in report["rings"].items()}
    assert len(rings) >= 2
    rc, stdout, err = run_main(capsys, "topo", "render", str(launched_run), "-o",
                               str(tmp_path / "run.svg"))
    assert rc == 0, err
    assert "2 hosts" in stdout and "ring/tree hops" in stdout
    ids = svg_ids(tmp_path / "run.svg")
    assert by_prefix(ids, "ring:") == _ring_ids(rings, _report_gpus(report))
    assert by_prefix(ids, "tree:") == set()  # trees only for one channel
    assert {f"host:h{i}" for i in (0, 1)} == by_prefix(ids, "host:")


@pytest.mark.e2e
def test_launched_run_one_channel(capsys: pytest.CaptureFixture[str], launched_run: Path,
                                  tmp_path: Path) -> None:
    report = json.loads((launched_run / "run.json").read_text())
    gpu_of = _report_gpus(report)
    rc, stdout, err = run_main(capsys, "topo", "render", str(launched_run), "--channel", "1",
                               "-o", str(tmp_path / "ch1.png"), "--json")
    assert rc == 0, err
    doc = json.loads(stdout)
    assert [(c["algorithm"], c["channel"]) for c in doc["channels"]] == [("ring", 1), ("tree", 1)]
    ring, tree = doc["channels"]
    assert {s["id"] for s in ring["segments"]} == _ring_ids({1: tuple(report["rings"]["1"])},
                                                             gpu_of)
    assert {s["id"] for s in tree["segments"]} == {
        f"tree:ch1:{gpu_of[int(r)]}->{gpu_of[d]}" for r, n in report["trees"]["1"].items()
        for d in n["down"]}
    assert (tmp_path / "ch1.png").read_bytes().startswith(PNG_SIGNATURE)


# ---- errors: one line, exit 2 ----

def _bad_inputs(tmp: Path) -> dict[str, tuple[list[str], str]]:
    (tmp / "broken.xml").write_text("<system>\n<cpu>\n<pci busid=\"0000:01:00.0\">\n</cpu>\n")
    (tmp / "busid.xml").write_text('<system>\n<cpu numaid="0">\n<pci busid="zz"/>\n</cpu>\n'
                                   "</system>\n")
    (tmp / "graphs.xml").write_text("<graphs/>\n")
    (tmp / "bad.yaml").write_text("format: 1\nname: [\n")
    (tmp / "empty").mkdir()
    (tmp / "run").mkdir()
    (tmp / "run" / "run.json").write_text("{")
    out = str(tmp / "out.svg")
    return {
        "broken xml": ([str(tmp / "broken.xml"), "-o", out], r"broken\.xml:4: not well-formed"),
        "bad busid": ([str(tmp / "busid.xml"), "-o", out], r"busid\.xml:3: <pci>: busid"),
        "not a topology": ([str(tmp / "graphs.xml"), "-o", out], r"graphs\.xml: expected an NCCL"),
        "bad spec": ([str(tmp / "bad.yaml"), "-o", out], r"bad\.yaml:\d+:\d+: not valid YAML"),
        "empty directory": ([str(tmp / "empty"), "-o", out], r"empty: neither a run directory"),
        "broken run.json": ([str(tmp / "run"), "-o", out], r"run\.json: not readable as a report"),
        "no such source": ([str(tmp / "nothing.xml"), "-o", out], r"nothing\.xml: no such file"),
        "unknown format": (["dgx-h100", "-o", str(tmp / "out.pdf")], r"out\.pdf: unknown picture"),
        "no output": (["dgx-h100"], r"give -o OUT\.svg"),
        "channel of a preset": (["dgx-h100", "--channel", "0", "-o", out], r"only a run directory"),
        "hosts of a file": ([str(DATA / "two-hosts" / "topo.xml"), "--hosts", "2", "-o", out],
                            r"--hosts/--gpus/--nics shape a preset or a spec"),
        "missing channel": ([str(DATA / "two-hosts"), "--channel", "9", "-o", out],
                            r"--channel 9: .*two-hosts has channels 0-1"),
    }


def test_bad_inputs_are_one_line(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    for name, (args, message) in _bad_inputs(tmp_path).items():
        rc, stdout, err = run_main(capsys, "topo", "render", *args)
        lines = err.splitlines()
        assert (rc, stdout, len(lines)) == (2, "", 1), (name, err)
        assert re.search(message, lines[0]), (name, lines[0])
    assert not (tmp_path / "out.svg").exists()


@pytest.mark.e2e
def test_dot_layout_needs_graphviz(run_cli: RunCli, tmp_path: Path) -> None:
    (tmp_path / "bin").mkdir()
    proc = run_cli("topo", "render", "dgx-h100", "--layout", "dot", "-o", "x.svg",
                   env={"PATH": str(tmp_path / "bin")})
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.splitlines() == [
        "ncclsim: error: --layout dot: Graphviz's `dot` is not on PATH (install graphviz), "
        "or use --layout grid"]
