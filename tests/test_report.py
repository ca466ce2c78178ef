"""`ncclsim report`: NCCL's logs and dumps of a run read into a report.

The two recorded cases in tests/data/report are NCCL 2.32.3's own output (see
the README there); the expected values below are read off those logs by hand or
recomputed from their lines independently of the report code. Older formats
(2.21-style lines, several communicators, real hostnames) are written here.
"""

from __future__ import annotations

import argparse
import dataclasses
import io
import json
import re
import shutil
from pathlib import Path

import pytest

from ncclsim import NcclsimError, rundir
from ncclsim.cluster.build import build_cluster
from ncclsim.launch import launcher
from ncclsim.report.build import build_report, write_run_json
from ncclsim.report.model import TreeNode
from ncclsim.report.summary import summary_text
from ncclsim.report import cli as report_cli
from ncclsim.report import nics as nics_module
from ncclsim.report import parse_log as pl
from ncclsim.topology.host_artifacts import write_host_artifacts
from ncclsim.topology.graph_paths import best_path, host_part, nic_paths
from ncclsim.topology.graph_xml import from_xml_files

DATA = Path(__file__).parent / "data" / "report"
TWO_HOSTS = DATA / "two-hosts"
ONE_HOST = DATA / "one-host"


@pytest.fixture(scope="module")
def two_hosts():
    return build_report(TWO_HOSTS)


@pytest.fixture(scope="module")
def one_host():
    return build_report(ONE_HOST)


def _ring_lines(run_dir: Path) -> dict[int, dict[int, tuple[int, int]]]:
    """{channel: {rank: (prev, next)}} straight from the `Ring cc : p -> r -> n` lines."""
    out: dict[int, dict[int, tuple[int, int]]] = {}
    for log in run_dir.glob("*.log"):
        for m in re.finditer(r"NCCL INFO Ring (\d+) : (\d+) -> (\d+) -> (\d+)$", log.read_text(), re.M):
            out.setdefault(int(m[1]), {})[int(m[3])] = (int(m[2]), int(m[4]))
    return out


# --- two hosts x 8 GPUs, init only --------------------------------------------

def test_two_hosts_shape(two_hosts):
    r = two_hosts
    assert r.nccl_version == "2.32.3+cuda12.9"
    assert (r.nranks, r.nnodes, r.local_ranks) == (16, 2, 8)
    assert r.hosts == ("ncclsim-h0", "ncclsim-h1")
    assert [x.rank for x in r.ranks] == list(range(16))
    assert {x.rank for x in r.ranks if x.host == "ncclsim-h1"} == set(range(8, 16))
    assert all(x.init_complete for x in r.ranks)
    assert r.ranks[8].busid == "0001:18:00.0" and r.ranks[8].device == 0
    assert r.ranks[3].log == "nccl.vm.17424.log" and r.ranks[3].pid == 17424
    assert (r.channels, r.p2p_channels) == (2, 2)
    assert all(c.ok for c in r.checks), [c for c in r.checks if not c.ok]


def test_two_hosts_rings_cover_all_ranks_and_agree_with_ring_lines(two_hosts):
    links = _ring_lines(TWO_HOSTS)
    assert sorted(two_hosts.rings) == sorted(links) == [0, 1]
    for channel, ring in two_hosts.rings.items():
        assert sorted(ring) == list(range(16)), channel
        for i, rank in enumerate(ring):
            prev, nxt = links[channel][rank]
            assert ring[(i + 1) % 16] == nxt and ring[i - 1] == prev, (channel, rank)
    # and as rank 0 printed it whole
    assert two_hosts.rings[0] == (0, 7, 6, 5, 4, 3, 2, 1, 8, 15, 14, 13, 12, 11, 10, 9)


def test_two_hosts_trees(two_hosts):
    trees = two_hosts.trees
    assert sorted(trees) == [0, 1]
    for channel, nodes in trees.items():
        assert sorted(nodes) == list(range(16))
        assert [r for r, n in nodes.items() if n.up is None] == [0 if channel == 0 else 8]
        for r, n in nodes.items():
            assert all(nodes[c].up == r for c in n.down)
    # `Trees [0] 1/8/-1->0->-1 [1] 1/-1/-1->0->8` in rank 0's log
    assert trees[0][0].down == (1, 8) and trees[1][0].up == 8
    assert trees[1][8].down == (9, 0)


def test_two_hosts_transports(two_hosts):
    t = two_hosts.transports
    assert t.inter_host == ("NET/Socket",)
    assert t.intra_host == ("P2P/CUMEM",)
    assert t.unknown_scope == ()
    # Ring: 2 NET hops per channel; tree: 0<->8 both ways per channel.
    assert t.counts["NET/Socket"] == 8
    net = {(c.channel, c.src, c.dst) for c in two_hosts.connections if c.transport == "NET/Socket"}
    assert net == {(ch, a, b) for ch in (0, 1) for a, b in ((9, 0), (1, 8), (0, 8), (8, 0))}
    # each NET link is logged by both ends and reported once
    assert all(c.direction == "both" for c in two_hosts.connections if c.transport == "NET/Socket")
    assert len({(c.channel, c.conn_index, c.src, c.dst) for c in two_hosts.connections}) == len(two_hosts.connections)
    # every ring hop inside a host is a P2P connection
    conns = {(c.channel, c.src, c.dst): c.transport for c in two_hosts.connections}
    ring = two_hosts.rings[0]
    for a, b in zip(ring, ring[1:] + ring[:1]):
        assert conns[(0, a, b)] == ("P2P/CUMEM" if a // 8 == b // 8 else "NET/Socket")


def test_two_hosts_features_and_graphs(two_hosts):
    assert not two_hosts.nvls.used and two_hosts.nvls.supported is False
    # NCCL logs `2 collnet channels` with no CollNet device: not in use
    assert two_hosts.collnet.channels == 2 and not two_hosts.collnet.used
    ring = next(g for g in two_hosts.graphs if g.kind == "ring")
    assert (ring.pattern, ring.nchannels, ring.speed_intra, ring.type_intra, ring.type_inter) == (4, 1, 1.2, "NVL", "PHB")
    assert ring.channels[0].gpus == (0, 7, 6, 5, 4, 3, 2, 1)
    assert {g.kind for g in two_hosts.graphs} == {"ring", "tree", "collnet_chain", "collnet_direct", "nvls"}
    assert two_hosts.topology is not None and len(two_hosts.topology.gpus) == 8
    assert two_hosts.tuning == ()  # init only
    # 8 ranks on each host: NCCL offers PAT only with one rank per host
    assert (two_hosts.pat.available, two_hosts.pat.used_by) == (False, ())
    assert two_hosts.pat.why_not == "8 ranks per host; NCCL uses PAT with one rank per host"
    assert "PAT: not available (8 ranks per host; NCCL uses PAT with one rank per host)" in summary_text(two_hosts)


def test_warn_line_names_rank_and_file(two_hosts):
    # rank 8 is pid 17429: its WARN comes before it knows its rank
    errs = [e for e in two_hosts.errors if e.log == "nccl.vm.17429.log"]
    assert {e.rank for e in errs} == {8}
    assert any("rma_socket requires GDRCopy" in e.message for e in errs)
    assert all(e.source and e.line for e in errs)
    assert {e.rank for e in two_hosts.errors} == set(range(16))
    assert "rma_socket requires GDRCopy" in summary_text(two_hosts)


def test_two_hosts_summary(two_hosts):
    text = summary_text(two_hosts)
    assert "NCCL 2.32.3+cuda12.9" in text
    assert "channel 0-1: 0 7 6 5 4 3 2 1 | 8 15 14 13 12 11 10 9" in text
    assert "-- ncclsim-h0: ranks 0-7; ncclsim-h1: ranks 8-15\n" in text
    assert re.search(r"inter-host\s+NET/Socket\s+8", text)
    assert "Checks: " in text and "FAILED" not in text


def test_many_hosts_summary_shows_rings_and_trees_where_they_cross_hosts(two_hosts):
    """Past 8 hosts a line of every rank would be kilobytes: a ring shows each
    host's first and last rank, a tree the ranks linked to another host, the
    hosts' ranks and NVLS heads their first and last."""
    hosts = 10
    ranks = tuple(dataclasses.replace(two_hosts.ranks[0], rank=r, host=f"ncclsim-h{r // 4}") for r in range(4 * hosts))
    ring = tuple(r for h in range(hosts) for r in (4 * h, 4 * h + 3, 4 * h + 2, 4 * h + 1))
    # within a host a chain from its first rank; between hosts a chain of the first ranks
    nodes = {r: _chained(r, 4 * hosts) for r in range(4 * hosts)}
    many = dataclasses.replace(two_hosts, ranks=ranks, hosts=tuple(f"ncclsim-h{h}" for h in range(hosts)),
                               rings={0: ring}, trees={0: nodes})
    text = summary_text(many)
    assert "Rings, in order, a host's ranks as first..last (| = next host; 10 hosts, every rank: run.json):" in text
    assert "  channel 0: 0..1 | 4..5 | 8..9 | 12..13 | 16..17 | 20..21 | 24..25 | 28..29 | 32..33 | 36..37\n" in text
    assert "Trees, rank(parent>children) of the ranks linked to another host (10 hosts, every rank: run.json):" in text
    assert "  channel 0: 0(root>1,4) 4(0>5,8) 8(4>9,12) 12(8>13,16) 16(12>17,20) 20(16>21,24) 24(20>25,28) " \
           "28(24>29,32) 32(28>33,36) 36(32>37)\n" in text
    assert "-- 4 per host in host order: ncclsim-h0: ranks 0-3; ...; ncclsim-h9: ranks 36-39\n" in text
    heads = tuple(tuple(4 * h + k for h in range(hosts)) for k in range(2))
    nvls = dataclasses.replace(many.nvls, used=True, heads=heads)
    assert "heads: ranks 0/4/.../36 1/5/.../37)" in summary_text(dataclasses.replace(many, nvls=nvls))
    logged = dataclasses.replace(nvls, heads=tuple(h[:8] for h in heads))  # NCCL logs 20 hosts at most
    assert "heads: ranks 0/4/.../28 1/5/.../29 (on the first 8 hosts: NCCL logs no more))" \
        in summary_text(dataclasses.replace(many, nvls=logged))
    whole = summary_text(dataclasses.replace(many, hosts=many.hosts[:8]))  # 8 hosts: every rank
    assert "  channel 0: 0 3 2 1 | 4 7 6 5 | 8 11 10 9 |" in whole and " 1(0>2) 2(1>3) 3(2)" in whole


def _chained(r: int, nranks: int) -> TreeNode:
    """Rank r of 4 per host: a chain within the host, the hosts' first ranks a chain of their own."""
    first = r % 4 == 0
    up = (r - 4 if r >= 4 else None) if first else r - 1
    down = ((r + 1,) + ((r + 4,) if r + 4 < nranks else ())) if first else ((r + 1,) if r % 4 < 3 else ())
    return TreeNode(up, down)


def test_the_nccl_each_rank_loaded(two_hosts):
    version = two_hosts.nccl_version
    assert version and {r.nccl_version for r in two_hosts.ranks} == {version}
    assert summary_text(two_hosts).startswith(f"NCCL {version} -- ")
    # Ranks that loaded different NCCLs are named by version.
    mixed = dataclasses.replace(two_hosts, ranks=tuple(
        dataclasses.replace(r, nccl_version="2.32.3+cuda13.0") if r.rank >= 2 else r for r in two_hosts.ranks))
    assert summary_text(mixed).startswith(f"NCCL {version} (ranks 0-1), 2.32.3+cuda13.0 (ranks 2-15) -- ")


def test_json_schema(two_hosts):
    doc = json.loads(json.dumps(two_hosts.to_json()))
    assert doc["schema_version"] == 1
    assert doc["rings"]["0"][:3] == [0, 7, 6]
    assert doc["trees"]["0"]["0"] == {"up": None, "down": [1, 8]}
    assert doc["trees"]["1"]["0"] == {"up": 8, "down": [1]}
    assert doc["transports"]["inter_host"] == ["NET/Socket"]
    conn = next(c for c in doc["connections"] if c["from"] == 9 and c["to"] == 0 and c["channel"] == 0)
    assert conn == {"channel": 0, "from": 9, "to": 0, "transport": "NET/Socket", "via": "NET/Socket/0",
                    "conn_index": 0, "scope": "inter_host", "direction": "both"}
    assert doc["ranks"][0]["busid"] == "0000:18:00.0" and doc["ranks"][0]["init_complete"] is True
    assert {"nccl_version", "hosts", "nranks", "nnodes", "local_ranks", "channels", "nvls", "collnet", "pat",
            "tuning", "graphs", "errors", "checks"} <= set(doc)
    assert doc["pat"] == {"available": False, "used_by": [], "why_not": two_hosts.pat.why_not}


def test_missing_rank_log_fails_checks(tmp_path):
    run = tmp_path / "run"
    shutil.copytree(TWO_HOSTS, run)
    (run / "nccl.vm.17426.log").unlink()  # rank 5
    r = build_report(run)
    failed = {c.name: c.detail for c in r.checks if not c.ok}
    assert "missing ranks [5]" in failed["every rank logged"]
    assert "channel 0" in failed["rings cover every rank once"]
    assert "FAILED" in summary_text(r)


def test_unfinished_init_and_broken_tree_fail_checks(tmp_path):
    run = tmp_path / "run"
    shutil.copytree(TWO_HOSTS, run)
    rank4 = run / "nccl.vm.17425.log"
    rank4.write_text("".join(x for x in rank4.read_text().splitlines(True) if "Init COMPLETE" not in x))
    rank12 = run / "nccl.vm.17433.log"  # channel 0: rank 12 claims to be a root
    rank12.write_text(rank12.read_text().replace("Trees [0] 13/-1/-1->12->11", "Trees [0] 13/-1/-1->12->-1"))
    r = build_report(run)
    assert [x.rank for x in r.ranks if not x.init_complete] == [4]
    failed = {c.name: c.detail for c in r.checks if not c.ok}
    assert failed["every rank completed init"] == "no Init COMPLETE from ranks [4]"
    assert failed["trees cover every rank with one root"].startswith("channel 0: 2 roots [0, 12]")
    assert "channel 1" not in failed["trees cover every rank with one root"]
    assert "Init complete: 15/16" in summary_text(r)


def test_ring_disagreeing_with_rank0_line_fails_check(tmp_path):
    run = tmp_path / "run"
    shutil.copytree(TWO_HOSTS, run)
    rank0 = run / "nccl.vm.17421.log"
    text = rank0.read_text()
    assert "Channel 01/02 :  0  7  6" in text
    rank0.write_text(text.replace("Channel 01/02 :  0  7  6", "Channel 01/02 :  0  6  7"))
    failed = {c.name: c.detail for c in build_report(run).checks if not c.ok}
    assert failed == {"rings agree with rank 0's Channel lines": "differ on channel 1"}


def test_hosts_without_hostid_fall_back_to_transport(tmp_path):
    """Simulated hosts share a hostname; without NCCL_HOSTID in the logs the
    report cannot place ranks on hosts and says so."""
    run = tmp_path / "run"
    shutil.copytree(TWO_HOSTS, run)
    for log in run.glob("*.log"):
        log.write_text("".join(x for x in log.read_text().splitlines(True) if "NCCL_HOSTID" not in x))
    r = build_report(run)
    assert r.hosts == ("vm",) and r.nnodes == 2
    failed = {c.name: c.detail for c in r.checks if not c.ok}
    assert failed["hosts match NCCL's node count"].startswith("1 host name(s) for nNodes 2")
    assert (r.transports.inter_host, r.transports.intra_host) == (("NET/Socket",), ("P2P/CUMEM",))
    assert r.nics is None  # ranks cannot be placed on hosts


# --- NICs between hosts, against the topology graph -----------------------------

NIC_CHECK = "inter-host connections leave by the GPU's nearest NIC"


def _nic_check(report):
    return next(c for c in report.checks if c.name == NIC_CHECK)


def test_two_hosts_nics_from_nccl_dump(two_hosts):
    """No hosts/ files: rank 0's dump (one socket NIC, `lo`, on the CPU) stands for both hosts."""
    nics = two_hosts.nics
    assert nics.topology == ("topo.xml", "topo.xml")
    assert [(r.rank, r.gpu) for r in nics.ranks] == [(i, f"h{i // 8}/gpu{i % 8}") for i in range(16)]
    assert {r.nearest.nic for r in nics.ranks} == {"h0/nic0", "h1/nic0"}
    # the senders of test_two_hosts_transports' NET links, each by NIC 0 on both channels
    used = {r.rank: [(u.nic, u.channels, u.nearest) for u in r.used] for r in nics.ranks if r.used}
    assert used == {0: [("h0/nic0", (0, 1), True)], 1: [("h0/nic0", (0, 1), True)],
                    8: [("h1/nic0", (0, 1), True)], 9: [("h1/nic0", (0, 1), True)]}
    check = _nic_check(two_hosts)
    assert check.ok and check.detail == "4 sending rank(s), 2 NIC(s)"
    doc = json.loads(json.dumps(two_hosts.to_json()))["nics"]
    assert doc["topology"] == ["topo.xml", "topo.xml"]
    assert doc["ranks"][0] == {"rank": 0, "gpu": "h0/gpu0", "nearest": {"nic": "h0/nic0", "path_gbps": None, "hops": 2},
                               "used": [{"nic": "h0/nic0", "path_gbps": None, "hops": 2, "channels": [0, 1],
                                         "nearest": True}]}
    assert doc["ranks"][2]["used"] == []
    assert "NICs between hosts: 4 of 4 sending rank(s) use their GPU's nearest (topology: topo.xml)" \
        in summary_text(two_hosts)


def _with_dgx_h100_hosts(run: Path) -> None:
    """The recorded run with ncclsim's host files of 2 x dgx-h100 (GPU i beside NIC i
    on a PCI switch; the logs' bus ids are that preset's)."""
    shutil.copytree(TWO_HOSTS, run)
    write_host_artifacts(build_cluster("dgx-h100", hosts=2), run / "hosts")


def test_a_nic_shared_under_the_same_switches_is_near(tmp_path):
    # dgx-a100: 2 GPUs and 2 NICs per PCIe switch complex. A ring entering by GPU 1's
    # NIC leaves by that NIC from GPU 0 (NCCL keeps a ring's NIC): more hops, no CPU crossed.
    write_host_artifacts(build_cluster("dgx-a100", hosts=1), tmp_path)
    g = from_xml_files([tmp_path / "h0" / "topo.xml"])
    assert best_path(g, "h0/gpu0", "h0/nic1").hops > best_path(g, "h0/gpu0", "h0/nic0").hops
    r = nics_module._rank_nics(g, 0, "h0/gpu0", {"h0/nic0": {0}, "h0/nic1": {1}, "h0/nic2": {2}})
    assert r.nearest is not None and r.nearest.nic == "h0/nic0"
    assert [(u.nic, u.nearest) for u in r.used] == [("h0/nic0", True), ("h0/nic1", True), ("h0/nic2", False)]


def test_nic_paths_in_a_hosts_part_are_the_whole_graphs(tmp_path):
    # The report searches each host's part of the graph alone: the paths, hops and
    # bandwidths must be those of the whole graph of several hosts joined by the network.
    write_host_artifacts(build_cluster("dgx-a100", hosts=3), tmp_path)
    g = from_xml_files([tmp_path / f"h{i}" / "topo.xml" for i in range(3)])
    part = host_part(g, g.nodes["h1/gpu0"]["host"])
    assert "h0/gpu0" not in part and "h2/nic0" not in part and "h1/nic7" in part
    for gpu in ("h1/gpu0", "h1/gpu5"):
        got = [(p.nodes[-1], p.hops, p.bottleneck_gbps) for p in nic_paths(g, gpu, part)]
        want = [(p.nodes[-1], p.hops, p.bottleneck_gbps)
                for p in sorted((best_path(g, gpu, f"h1/nic{i}") for i in range(8)),
                                key=lambda p: (-(p.bottleneck_gbps or 0.0), p.hops))]
        assert got == want and len(got) == 8
        assert got[0][1] < got[-1][1]  # the nearest NIC is nearer than the farthest


def test_nic_check_fails_for_another_gpus_nic(tmp_path):
    # The recorded run sent everything by socket NIC 0: rank 1 (GPU 1) leaves by GPU 0's NIC.
    run = tmp_path / "run"
    _with_dgx_h100_hosts(run)
    r = build_report(run)
    assert r.nics.topology == ("hosts/h0/topo.xml", "hosts/h1/topo.xml")
    g = from_xml_files([run / "hosts" / "h0" / "topo.xml", run / "hosts" / "h1" / "topo.xml"])
    used, near = best_path(g, "h0/gpu1", "h0/nic0"), best_path(g, "h0/gpu1", "h0/nic1")
    assert near.hops == 2 and used.hops > near.hops  # GPU 1 -> its switch -> NIC 1
    check = _nic_check(r)
    assert not check.ok
    assert check.detail == (f"rank 1 (h0/gpu1) channel 0: leaves by h0/nic0 ({used.bottleneck_gbps:g} GB/s, "
                            f"{used.hops} hops), nearest h0/nic1 ({near.bottleneck_gbps:g} GB/s, 2 hops); "
                            "1 more rank(s)")
    bad = {x.rank: [(u.nic, u.nearest) for u in x.used] for x in r.nics.ranks if x.used}
    assert bad == {0: [("h0/nic0", True)], 1: [("h0/nic0", False)], 8: [("h1/nic0", True)],
                   9: [("h1/nic0", False)]}
    text = summary_text(r)
    assert f"  {NIC_CHECK}: rank 1 (h0/gpu1)" in text
    assert "NICs between hosts: 2 of 4 sending rank(s) use their GPU's nearest " \
           "(topology: hosts/h0/topo.xml, hosts/h1/topo.xml)" in text


def test_nic_check_passes_when_each_gpu_sends_by_its_own_nic(tmp_path):
    run = tmp_path / "run"
    _with_dgx_h100_hosts(run)
    # The sender's line names the link's NIC: make it the sending GPU's own (cudaDev in brackets).
    send = re.compile(r"(: \d+\[(\d+)\] -> \d+\[\d+\] \[send\] via NET/Socket/)0")
    for log in run.glob("*.log"):
        log.write_text(send.sub(lambda m: m[1] + m[2], log.read_text()))
    r = build_report(run)
    check = _nic_check(r)
    assert check.ok and check.detail == "4 sending rank(s), 4 NIC(s)"
    used = {x.rank: [u.nic for u in x.used] for x in r.nics.ranks if x.used}
    assert used == {0: ["h0/nic0"], 1: ["h0/nic1"], 8: ["h1/nic0"], 9: ["h1/nic1"]}
    assert all(x.used[0].hops == 2 and x.used[0].path_gbps == x.nearest.path_gbps
               for x in r.nics.ranks if x.used)


def test_nic_check_left_out_without_a_topology(tmp_path):
    run = tmp_path / "run"
    shutil.copytree(TWO_HOSTS, run)
    (run / "topo.xml").unlink()
    r = build_report(run)
    assert r.nics is None and NIC_CHECK not in {c.name for c in r.checks}
    assert "NICs not checked: no topology (hosts/h<i>/topo.xml or NCCL's topo dump)" in r.notes
    assert json.loads(json.dumps(r.to_json()))["nics"] is None
    # one that cannot be read: a note naming the file, the rest of the report as before
    (run / "hosts" / "h0").mkdir(parents=True)
    (run / "hosts" / "h1").mkdir(parents=True)
    (run / "hosts" / "h0" / "topo.xml").write_text("<system><cpu><pci busid='zz'/></cpu></system>\n")
    (run / "hosts" / "h1" / "topo.xml").write_text("<system/>\n")
    r = build_report(run)
    assert r.nics is None and NIC_CHECK not in {c.name for c in r.checks}
    assert any(n.startswith("NICs not checked: ") and "hosts/h0/topo.xml:1" in n for n in r.notes), r.notes
    assert r.nranks == 16 and all(c.ok for c in r.checks)


# --- one host, collectives -----------------------------------------------------

def test_one_host_tuning(one_host):
    entry = next(t for t in one_host.tuning if t.collective == "AllReduce" and t.nbytes == 8)
    # `AllReduce: 8 Bytes -> Algo RING proto LL channel{Lo..Hi}={0..0}`
    assert (entry.algorithm, entry.protocol, entry.channels, entry.source) == ("RING", "LL", 1, "tuning")
    big = next(t for t in one_host.tuning if t.collective == "AllReduce" and t.nbytes == 4 << 20)
    assert (big.algorithm, big.protocol, big.channels) == ("RING", "LL128", 24)
    bcast = next(t for t in one_host.tuning if t.collective == "Broadcast" and t.nbytes == 4 << 20)
    assert (bcast.protocol, bcast.channels) == ("SIMPLE", 22)
    assert len(one_host.tuning) == 15
    assert re.search(r"AllReduce\s+4 MiB\s+RING/LL128\s+24 ch", summary_text(one_host))


def test_one_host_shape(one_host):
    r = one_host
    assert (r.nranks, r.nnodes, r.local_ranks, r.channels) == (8, 1, 8, 24)
    assert r.hosts == ("ncclsim-h0",)
    assert set(r.rings) == set(range(24)) and all(ring == tuple(range(8)) for ring in r.rings.values())
    assert r.transports.inter_host == () and r.transports.intra_host == ("P2P/CUMEM",)
    assert r.transports.counts == {"P2P/CUMEM": 192}  # connected at the first AllReduce: 24 channels x 8
    assert all(c.ok for c in r.checks)


def test_best_tuning_stands_in_without_rank0_lines(tmp_path):
    run = tmp_path / "run"
    shutil.copytree(ONE_HOST, run)
    (run / "nccl.vm.17611.log").unlink()  # rank 0: the only one with `Bytes -> Algo` lines
    r = build_report(run)
    entry = next(t for t in r.tuning if t.collective == "AllReduce" and t.nbytes == 8)
    assert (entry.algorithm, entry.protocol, entry.channels, entry.source) == ("RING", "LL", None, "best_tuning")
    assert next(t for t in r.tuning if t.collective == "AllGather" and t.nbytes == 4).protocol == "LL"


# --- launcher layout, run.json, CLI --------------------------------------------

def _as_launcher_layout(src: Path, dst: Path) -> None:
    """ranks/<i>/nccl.log (+ exit), the dumps renamed as the launcher names them."""
    for i, log in enumerate(sorted(src.glob("*.log"))):
        d = dst / "ranks" / str(i)
        d.mkdir(parents=True)
        shutil.copy(log, d / "nccl.log")
        (d / "exit").write_text("1\n" if i == 3 else "0\n")
    shutil.copy(src / "graph.xml", dst / "graph-dump.xml")
    shutil.copy(src / "topo.xml", dst / "topo-dump.xml")
    (dst / "hosts" / "h0").mkdir(parents=True)
    (dst / "hosts" / "h0" / "topo.xml").write_text("<system version=\"1\"/>")  # an input, not a dump


def test_launcher_layout_and_run_json(tmp_path):
    run = tmp_path / "run"
    _as_launcher_layout(ONE_HOST, run)
    launch = {"hosts": 1, "command": ["ncclsim", "probe"], "exit": [0, 0, 0, 1, 0, 0, 0, 0]}
    (run / "launch.json").write_text(json.dumps(launch))
    path = write_run_json(run)
    assert path == run / "run.json"
    doc = json.loads(path.read_text())
    assert doc["schema_version"] == 1 and doc["launch"] == launch
    assert doc["logs"][:2] == ["ranks/0/nccl.log", "ranks/1/nccl.log"]
    assert doc["graphs"][0]["nchannels"] == 12
    assert doc["topology"]["file"] == "topo-dump.xml" and len(doc["topology"]["gpus"]) == 8
    assert doc["nics"] is None  # one host: nothing leaves it
    exits = {r["rank"]: r.get("exit_status") for r in doc["ranks"]}
    assert exits[3] == 1 and exits[0] == 0
    assert "Non-zero exit: ranks 3" in summary_text(build_report(run))


def test_cli(tmp_path, capsys):
    run = tmp_path / "run"
    shutil.copytree(TWO_HOSTS, run)
    p = argparse.ArgumentParser()
    report_cli.add_arguments(p)
    assert report_cli.execute(p.parse_args([str(run), "--json"])) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["nranks"] == 16 and (run / "run.json").is_file()
    (run / "run.json").unlink()
    assert report_cli.execute(p.parse_args([str(run), "--no-write"])) == 0
    assert "ncclsim-h1: ranks 8-15" in capsys.readouterr().out
    assert not (run / "run.json").exists()
    with pytest.raises(NcclsimError, match="does not exist"):
        report_cli.execute(p.parse_args([str(tmp_path / "nope")]))
    assert report_cli.main([str(tmp_path / "nope")]) == 2
    assert "ncclsim report: run directory" in capsys.readouterr().err


def test_missing_or_empty_run_dir(tmp_path):
    with pytest.raises(NcclsimError, match="does not exist"):
        build_report(tmp_path / "missing")
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(NcclsimError, match="no NCCL logs in .*NCCL_DEBUG=INFO"):
        build_report(empty)
    (empty / "ranks" / "0").mkdir(parents=True)
    (empty / "ranks" / "0" / "nccl.log").write_text("hello\n")  # a log without NCCL lines
    with pytest.raises(NcclsimError, match="no NCCL logs"):
        build_report(empty)
    a_file = tmp_path / "file"
    a_file.write_text("")
    with pytest.raises(NcclsimError, match="not a directory"):
        build_report(a_file)


# --- older formats, real hostnames, several communicators ------------------------

def _old_style_logs(run: Path) -> None:
    """Four ranks on two real hosts, 2.21-style lines: busIds in brackets, PXN,
    SHM, numeric tuning; rank 0's process also builds a 2-rank communicator."""
    def line(r: int, body: str, level: str = "INFO") -> str:
        host = "nodeA" if r < 2 else "nodeB"
        return f"{host}:{100 + r}:{100 + r} [{r % 2}] NCCL {level} {body}\n"

    ring = {0: (3, 1), 1: (0, 2), 2: (1, 3), 3: (2, 0)}
    trees = {0: "1/2/-1->0->-1", 1: "-1/-1/-1->1->0", 2: "3/-1/-1->2->0", 3: "-1/-1/-1->3->2"}
    conns = {0: ["Channel 00/0 : 0[1b000] -> 1[1c000] via P2P/IPC/read",
                 "Channel 00/0 : 3[1c000] -> 0[1b000] [receive] via NET/IB/0/GDRDMA"],
             1: ["Channel 00/0 : 1[1c000] -> 2[1b000] [send] via NET/IB/1/GDRDMA"],
             2: ["Channel 00/0 : 1[1c000] -> 2[1b000] [receive] via NET/IB/0/GDRDMA",
                 "Channel 00/0 : 2[1b000] -> 3[1c000] via SHM/direct/direct"],
             3: ["Channel 00/0 : 3[1c000] -> 0[1b000] [send] via NET/IB/0(2)/GDRDMA"]}
    for r in range(4):
        text = [line(r, "NCCL version 2.21.5+cuda12.4"),
                line(r, "misc/socket.cc:50 -> 2", "WARN") if r == 2 else "",
                line(r, f"comm 0x55d0{r} rank {r} nRanks 4 nNodes 2 localRanks 2 localRank {r % 2} MNNVL 0")]
        if r == 0:
            text.append(line(r, "Channel 00/01 :    0   1   2   3"))
        text += [line(r, f"Ring 00 : {ring[r][0]} -> {r} -> {ring[r][1]}"), line(r, f"Trees [0] {trees[r]}")]
        text += [line(r, c) for c in conns[r]]
        text.append(line(r, "1 coll channels, 0 collnet channels, 0 nvls channels, 2 p2p channels, 2 p2p channels per peer"))
        text.append(line(r, f"comm 0x55d0{r} rank {r} nranks 4 cudaDev {r % 2} busId {'1b000' if r % 2 == 0 else '1c000'}"
                            f" commId 0xfeed - Init COMPLETE"))
        if r == 0:
            text += [line(r, "AllReduce: opCount 0 sendbuff 0x1 recvbuff 0x2 count 262144 datatype 7 op 0 root 0 "
                             "comm 0x55d00 [nranks=4] stream 0x3"),
                     line(r, "1048576 Bytes -> Algo 0 proto 2 time 45.2"),
                     # a second, smaller communicator in the same process
                     line(r, "comm 0x77 rank 0 nranks 2 cudaDev 0 busId 1b000 commId 0xbeef - Init START"),
                     line(r, "comm 0x77 rank 0 nRanks 2 nNodes 1 localRanks 2 localRank 0 MNNVL 0"),
                     line(r, "Ring 00 : 1 -> 0 -> 1"),
                     line(r, "NET/IB : Got async event : port error", "WARN")]
        (run / f"nccl.{r}.log").write_text("".join(text))


def test_older_format_and_several_communicators(tmp_path):
    _old_style_logs(tmp_path)
    r = build_report(tmp_path)
    assert r.nccl_version == "2.21.5+cuda12.4"
    assert (r.nranks, r.nnodes, r.hosts) == (4, 2, ("nodeA", "nodeB"))
    assert r.rings == {0: (0, 1, 2, 3)}
    assert r.trees[0][0].down == (1, 2) and r.trees[0][3].up == 2
    assert r.transports.inter_host == ("NET/IB/GDRDMA",)
    assert r.transports.intra_host == ("P2P/IPC/read", "SHM/direct/direct")
    pxn = next(c for c in r.connections if (c.src, c.dst) == (3, 0))
    assert pxn.via == "NET/IB/0(2)/GDRDMA" and pxn.direction == "both"
    assert pl.parse_via(pxn.via) == pl.Via("NET/IB/GDRDMA", 0, 2)
    assert [(t.collective, t.nbytes, t.algorithm, t.protocol) for t in r.tuning] == [("AllReduce", 1048576, "TREE", "SIMPLE")]
    assert [(c.comm_id, c.nranks, c.primary) for c in r.communicators] == [("0xfeed", 4, True), ("0xbeef", 2, False)]
    assert r.ranks[0].busid == "0000:1b:00.0"
    by_message = {e.message: e for e in r.errors}
    assert by_message["NET/IB : Got async event : port error"].rank == 0
    assert by_message["misc/socket.cc:50 -> 2"].rank == 2
    assert by_message["misc/socket.cc:50 -> 2"].log == "nccl.2.log"
    assert all(c.ok for c in r.checks), [c for c in r.checks if not c.ok]


# --- line parsers ----------------------------------------------------------------

def test_parse_line_prefixes():
    warn = pl.parse_line("[2026-11-21 22:03:17] vm:17421:17421 [0] misc/ibvwrap.cc:190 (wrap_ibv_alloc_pd) "
                         "NCCL WARN lib wrapper not initialized.\n")
    assert warn == pl.LogLine("vm", 17421, 17421, 0, "WARN", "lib wrapper not initialized.",
                              "misc/ibvwrap.cc:190", "2026-11-21 22:03:17")
    info = pl.parse_line("gpu-node-3.cluster:77:81 [5] NCCL INFO Ring 03 : 4 -> 5 -> 6")
    assert (info.host, info.pid, info.tid, info.dev, info.level) == ("gpu-node-3.cluster", 77, 81, 5, "INFO")
    assert pl.parse_ring_link(info.body) == pl.RingLink(3, 4, 5, 6)
    assert pl.parse_line("ncclsim probe: initialised 16 ranks") is None


def test_parse_connection_variants():
    c = pl.parse_connection("Channel 00/0 : 9[1] -> 0[0] [receive] via NET/Socket/0")
    assert c == pl.ConnLine(0, 0, 9, 0, "NET/Socket/0", "receive")
    c = pl.parse_connection("Channel 05 : 2[2a000] -> 3[3a000] via P2P/IPC")
    assert (c.channel, c.conn_index, c.src, c.dst, c.via, c.side) == (5, None, 2, 3, "P2P/IPC", None)
    c = pl.parse_connection("Channel 01/1 : 0[0] -> 8[0] [send] via NET/ncclsim/3/GDRDMA/Shared")
    assert pl.parse_via(c.via) == pl.Via("NET/ncclsim/GDRDMA/Shared", 3, None)
    c = pl.parse_connection("CollNet 02/1 : 4 [send] via COLLNET/SHARP/1/GDRDMA")
    assert (c.channel, c.src, c.dst, pl.parse_via(c.via).transport) == (2, 4, None, "COLLNET/SHARP/GDRDMA")
    assert pl.parse_connection("Ring 00 : 9 -> 0 -> 7") is None
    assert pl.parse_ring_order("Channel 00/0 : 9[1] -> 0[0] via P2P/CUMEM") is None


def test_parse_misc_lines():
    assert pl.parse_tuning("AllGather: 524288 Bytes -> Algo RING proto LL channel{Lo..Hi}={0..23} cgaClusterSize 4") \
        == pl.TuningLine("AllGather", 524288, "RING", "LL", 24)
    assert pl.parse_tuning("Broadcast: 8 Bytes -> Algo 4 proto 1 nchannels 3") \
        == pl.TuningLine("Broadcast", 8, "NVLS", "LL128", 3)
    assert pl.parse_channel_counts("24 coll channels, 24 collnet channels, 0 nvls channels, 32 p2p channels, "
                                   "32 p2p channels per peer") == {"coll": 24, "collnet": 24, "nvls": 0, "p2p": 32}
    assert pl.parse_channel_counts("2 coll channels, 2 p2p channels, 2 p2p channels per peer") == {"coll": 2, "p2p": 2}
    assert pl.parse_tree_line("Tree 1 : 8 -> 0 -> 1/-1/-1") == pl.TreeLink(1, 0, 8, (1,))
    assert pl.parse_trees("Trees [0] 1/8/-1->0->-1 [1] 1/-1/-1->0->8") == [
        pl.TreeLink(0, 0, -1, (1, 8)), pl.TreeLink(1, 0, 8, (1,))]
    assert pl.parse_trees("Tree 1 : 8 -> 0 -> 1/-1/-1") is None and pl.parse_trees("Trees") is None  # no tree in them
    assert pl.busid_text("118000") == "0001:18:00.0"
    assert pl.parse_hostid("NCCL_HOSTID set by environment to ncclsim-h1") == "ncclsim-h1"
    assert pl.parse_nvls_support("NVLS multicast support is not available on dev 0, transport disabled") is False
    init = pl.parse_init("[Rank 8] ncclCommInitRank comm 0x7f77610db010 rank 8 nranks 16 cudaDev 0 nvmlDev 0 "
                         "busId 118000 commId 0x9c26a9c7e9d9f949 - Init START")
    assert (init.rank, init.nranks, init.stage, init.comm_id, init.busid) == (8, 16, "START", "0x9c26a9c7e9d9f949",
                                                                            "0001:18:00.0")


def test_each_line_is_one_kind() -> None:
    """parse_body gives each body the one parser that reads it, whether the parser is
    asked by the line's first word or of every line, and None for other lines."""
    kinds = {
        "NCCL version 2.30.7+cuda12.9": (pl.parse_version, "2.30.7+cuda12.9"),
        "comm 0x5 rank 3 nRanks 16 nNodes 2 localRanks 8 localRank 3 MNNVL 0":
            (pl.parse_comm, pl.CommLine("0x5", 3, 16, 2, 8, 3)),
        "Channel 00/0 : 9[1] -> 0[0] [receive] via NET/Socket/0":
            (pl.parse_connection, pl.ConnLine(0, 0, 9, 0, "NET/Socket/0", "receive")),
        "Channel 00/02 :  0  7  6": (pl.parse_ring_order, pl.RingOrder(0, 2, (0, 7, 6))),
        "Ring 03 : 4 -> 5 -> 6": (pl.parse_ring_link, pl.RingLink(3, 4, 5, 6)),
        "Trees [0] 1/-1/-1->0->-1": (pl.parse_trees, [pl.TreeLink(0, 0, -1, (1,))]),
        "2 coll channels, 2 p2p channels, 2 p2p channels per peer": (pl.parse_channel_counts, {"coll": 2, "p2p": 2}),
        "NVLS Head  1:  2 10": (pl.parse_nvls_head, (1, (2, 10))),
        "8 Bytes -> Algo 1 proto 0 time 5.2": (pl.parse_tuning, pl.TuningLine(None, 8, "RING", "LL", None)),
        "Best tuning, algorithm, RING, protocol, LL": (pl.parse_best_tuning, ("RING", "LL")),
    }
    for body, kind in kinds.items():
        assert pl.parse_body(body) == kind, body
    init = pl.parse_body("ncclCommInitRank comm 0x7 rank 1 nranks 2 cudaDev 1 busId 19000 commId 0x9 - Init COMPLETE")
    assert init is not None and init[0] is pl.parse_init and (init[1].rank, init[1].stage) == (1, "COMPLETE")
    for other in ("", "Trees", "Channel 00 bandwidth", "Allocated 4 bytes", "NVLS enabled"):
        assert pl.parse_body(other) is None, other


def test_rank0_ring_line_cut_by_nccl_still_agrees() -> None:
    """NCCL prints rank 0's ring in at most 128 characters: with 64 ranks the
    Channel line holds the ring's first ranks only, which must agree, and a
    wrong start must not."""
    from ncclsim.report import parse_log as pl
    from ncclsim.report.structure import build_rings
    n = 64
    ring = [0, *range(n - 1, 0, -1)]  # 0 63 62 ... 1
    links = {0: [pl.RingLink(0, ring[i - 1], ring[i], ring[(i + 1) % n]) for i in range(n)]}
    shown = tuple(ring[:28])
    _, checks = build_rings(links, {0: pl.RingOrder(0, 1, shown)}, n)
    assert [c.ok for c in checks] == [True, True], checks
    _, checks = build_rings(links, {0: pl.RingOrder(0, 1, (0, 1, 2))}, n)
    assert [c.ok for c in checks] == [True, False], checks


def test_launch_says_it_reads_many_ranks_logs(tmp_path):
    # A report of hundreds of ranks takes seconds after the last rank's line: launch says why.
    run = tmp_path / "run"
    shutil.copytree(TWO_HOSTS, run)
    for nranks, notice in ((4, False), (launcher.REPORT_NOTICE_RANKS, True)):
        out, err = io.StringIO(), io.StringIO()
        launcher._print_report(rundir.RunDir(run), out, err, nranks)
        assert ("reading the logs of" in err.getvalue()) == notice
        assert "Checks:" in out.getvalue()
