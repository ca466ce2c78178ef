"""Decoding of NCCL's kernel launches with the per-release layout tables
(fake_cuda/device/layouts, fake_cuda/device/decode.c).

The unmodified NCCL runs the probe in one process over 8 simulated GPUs with
NCCLSIM_TRACE set; every NCCL kernel launch leaves one `nccl_launch` event
that says what the driver decoded. The decoded work must be the work the
probe asked for, and every connection it names must be simulated memory.
The kernels are then emulated (fake_cuda/device/emulation.c), and the probe
checks every output against what NCCL must compute: each release's table is
checked by NCCL's own results too.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Optional

import pytest

ROOT = Path(__file__).resolve().parent.parent
LAYOUTS = ROOT / "fake_cuda" / "device" / "layouts"
OPS = "allreduce,allgather,broadcast,reduce,reducescatter,sendrecv"
SIZES = (1024, 4 << 20)
COLL_OF_OP = {"allreduce": "AllReduce", "allgather": "AllGather", "broadcast": "Broadcast",
              "reduce": "Reduce", "reducescatter": "ReduceScatter", "sendrecv": "SendRecv"}
NRANKS = 8


def expected_count(op: str, size: int) -> int:
    """ncclDevWorkColl's element count for the probe's call (float32 data; AllGather
    and Broadcast move bytes, and the gathered/scattered counts are per rank)."""
    floats = size // 4
    return {"allreduce": floats, "reduce": floats, "broadcast": size, "allgather": floats // NRANKS * 4,
            "reducescatter": floats // NRANKS}[op]


def releases() -> dict:
    return json.loads((LAYOUTS / "layouts.json").read_text())["releases"]


def run_probe(build, sim_env, tmp_path: Path, name: str, extra_env: Optional[dict[str, str]] = None,
              ) -> tuple[subprocess.CompletedProcess, list[dict]]:
    trace = tmp_path / f"trace-{name}"
    trace.mkdir()
    env = {**sim_env(gpus=NRANKS, nccl_lib=build.lib_dir), "NCCLSIM_TRACE": str(trace), **(extra_env or {})}
    proc = subprocess.run(
        [sys.executable, "-m", "ncclsim.probe", "--gpus-per-process", str(NRANKS), "--ops", OPS,
         "--sizes", ",".join(map(str, SIZES))],
        env=env, capture_output=True, text=True, timeout=600)
    events = []
    for f in sorted(trace.glob("*.jsonl")):
        for line in f.read_text().splitlines():
            doc = json.loads(line)
            if doc.get("event", "").startswith("nccl_"):
                events.append(doc)
    return proc, events


def check_decoded(version: str, proc: subprocess.CompletedProcess, events: list[dict]) -> None:
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "not supported" not in proc.stderr and "cannot decode" not in proc.stderr, proc.stderr[-3000:]
    launches = [e["args"] for e in events if e["event"] == "nccl_launch"]
    assert not [e for e in events if e["event"] == "nccl_unsupported"]
    assert launches, "no NCCL kernel launch was decoded"
    by_rank: dict[int, list[dict]] = {}
    for a in launches:
        what = json.dumps(a)[:600]
        assert a["version"] == version, what
        assert a["error"] == "" and not a["truncated"], what
        assert a["nranks"] == NRANKS and 0 <= a["rank"] < NRANKS, what
        # block b runs the b-th channel of the mask: one block per channel
        assert bin(int(a["mask"], 16)).count("1") == a["grid"] == len(a["ring"]), what
        assert [ch for ch, _, _ in a["ring"]] == [i for i in range(64) if int(a["mask"], 16) >> i & 1], what
        # every connection the work uses is simulated memory (its ncclConnInfo, head, tail, FIFO)
        assert a["conns"] > 0 and a["conns_bad"] == 0, what
        # the function (from the batch's funcId) belongs to the collective of the kernel launched
        kernel_coll = re.match(r"ncclDevKernel_([A-Za-z]+)", a["kernel"]).group(1)
        assert a["coll"] == kernel_coll, what
        by_rank.setdefault(a["rank"], []).append(a)
    assert sorted(by_rank) == list(range(NRANKS))
    issued = [(op, size) for op in OPS.split(",") for size in SIZES]
    for rank, seen in by_rank.items():
        # one launch per call, in the order the probe issued them (one stream per rank)
        assert [a["coll"] for a in seen] == [COLL_OF_OP[op] for op, _ in issued], (rank, [a["func"] for a in seen])
        for a, (op, size) in zip(seen, issued):
            what = (rank, op, size, json.dumps(a)[:600])
            if op == "sendrecv":  # the probe sends to rank+1 and receives from rank-1
                assert a["p2p"] == [[(rank + 1) % NRANKS, size, (rank - 1) % NRANKS, size]], what
            else:
                assert a["count"] == expected_count(op, size), what
                assert all(prev in range(NRANKS) and nxt in range(NRANKS) and prev != rank != nxt
                           for _, prev, nxt in a["ring"]), what
                assert a["type"] == ("f32" if op in ("allreduce", "reduce", "reducescatter") else "")
                # one host of H100s with multicast: NVLS for large AllReduce
                assert a["algo"] in ("RING", "TREE", "NVLS") and a["proto"] in ("LL", "LL128", "SIMPLE"), what
    # the rings close: on each channel, rank r's next has r as its prev
    first = {r: seen[0] for r, seen in by_rank.items()}
    if all(a["mask"] == first[0]["mask"] for a in first.values()):
        for i in range(len(first[0]["ring"])):
            nxt = {r: first[r]["ring"][i][2] for r in first}
            prev = {r: first[r]["ring"][i][1] for r in first}
            assert all(prev[nxt[r]] == r for r in first)


# Oldest and newest release of each flavour; the others below when cached.
ALWAYS = ["2.32.3", "2.23.4", "cu13:2.32.3", "cu13:2.27.7"]


@pytest.mark.e2e
@pytest.mark.parametrize("spec", ALWAYS)
def test_launches_decoded(spec: str, sim_env, nccl_build, tmp_path: Path) -> None:
    build = nccl_build(spec)
    proc, events = run_probe(build, sim_env, tmp_path, spec.replace(":", "-"))
    check_decoded(spec.rpartition(":")[2], proc, events)


def cached_wheels() -> list[str]:
    from ncclsim.nccl.wheels import cache_root
    specs = []
    for ver, rel in releases().items():
        for flavour in rel["wheels"]:
            spec = ver if flavour == "cu12" else f"{flavour}:{ver}"
            if spec in ALWAYS:
                continue
            specs.append(pytest.param(spec, marks=pytest.mark.skipif(
                not (cache_root() / f"{flavour}-{ver}" / "lib" / "libnccl.so.2").exists(),
                reason=f"nvidia-nccl-{flavour}=={ver} is not in the cache (fetch it to check its table)")))
    return specs


@pytest.mark.e2e
@pytest.mark.parametrize("spec", cached_wheels())
def test_launches_decoded_cached_release(spec: str, sim_env, nccl_build, tmp_path: Path) -> None:
    build = nccl_build(spec)
    proc, events = run_probe(build, sim_env, tmp_path, spec.replace(":", "-"))
    check_decoded(spec.rpartition(":")[2], proc, events)


@pytest.mark.e2e
def test_unsupported_release_fails_fast(sim_env, nccl_build, tmp_path: Path) -> None:
    """2.21.5 is not in the table: its kernel launches fail at once with one
    line naming the release and the supported range, and NCCL reports the
    failed launch to the program (no hang)."""
    build = nccl_build("2.21.5")
    version = re.search(r"#define NCCL_VERSION_CODE (\d+)", (build.include_dir / "nccl.h").read_text())
    assert version and int(version.group(1)) not in {r["code"] for r in releases().values()}
    proc, events = run_probe(build, sim_env, tmp_path, "2.21.5")
    assert proc.returncode == 1, proc.stderr[-3000:]
    lines = [line for line in proc.stderr.splitlines() if "not supported" in line]
    assert len(lines) == 1, proc.stderr[-3000:]
    assert "NCCL 2.21.5 is not supported" in lines[0] and "supported: NCCL 2.23.4 to 2.32.3" in lines[0]
    assert "ncclGroupEnd (allreduce) failed" in proc.stderr  # NCCL returned the failed launch
    assert [e["event"] for e in events] == ["nccl_unsupported"]
    assert events[0]["args"]["version"] == "2.21.5"


def test_layout_data_generates_c(tmp_path: Path) -> None:
    """The data turns into a table that compiles warning-free against the
    emulation's header, and covers every release from 2.23.4 to 2.32.3."""
    out = tmp_path / "nccl_layouts_gen.c"
    subprocess.run([sys.executable, str(LAYOUTS / "gen_layouts.py"), str(out)], check=True)
    subprocess.run(["cc", "-std=gnu11", "-Wall", "-Wextra", "-Werror", "-fsyntax-only",
                    f"-I{ROOT / 'fake_cuda' / 'device'}", str(out)], check=True)
    text = out.read_text()
    rel = releases()
    cu12 = [v for v, r in rel.items() if "cu12" in r["wheels"]]
    assert cu12[0] == "2.23.4" and cu12[-1] == "2.32.3"
    for ver in rel:
        assert f'{{"{ver}", ' in text
    # funcId lists: 2.30.7's AllReduce f32 Sum entries are where NCCL put them
    names = dict(line.split(" ", 1) for line in (LAYOUTS / rel["2.30.7"]["functions"]).read_text().splitlines()
                 if not line.startswith("#"))
    assert (names["261"], names["263"], names["264"], names["266"]) == (
        "AllReduce_Sum_f32_RING_LL", "AllReduce_Sum_f32_RING_SIMPLE", "AllReduce_Sum_f32_TREE_LL",
        "AllReduce_Sum_f32_TREE_SIMPLE")


def test_layout_data_rejects_unknown_field(tmp_path: Path) -> None:
    """A field the C struct does not have stops the build with its name."""
    import shutil
    data = tmp_path / "data"
    shutil.copytree(LAYOUTS, data, ignore=shutil.ignore_patterns("__pycache__"))
    doc = json.loads((data / "layouts.json").read_text())
    doc["layouts"]["2.23.4"]["fields"]["conn.nosuch"] = [0, 4]
    (data / "layouts.json").write_text(json.dumps(doc))
    sys.path.insert(0, str(LAYOUTS))
    try:
        import gen_layouts
        with pytest.raises(gen_layouts.LayoutDataError, match="conn.nosuch"):
            gen_layouts.layouts_c(data)
    finally:
        sys.path.remove(str(LAYOUTS))
