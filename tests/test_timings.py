"""Modelled timings (--clock model): the ranks' timeline files read into
run.json's `timings` and merged into timeline.json; the sweep's timing
expectations; `ncclsim diff` of timings; the launch and probe options.

The run directories are written here: NCCL logs from tests/data/report (the
report needs a communicator) and timeline files shaped as the driver writes
them, numbers chosen so that medians and maxima are easy to follow by hand.
No launch runs.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from ncclsim.launch import cli as launch_cli
from ncclsim.launch import rank_script
from ncclsim.launch.options import LaunchError, LaunchOptions
from ncclsim.probe import cli as probe_cli
from ncclsim.report import cli as report_cli
from ncclsim.report import diff
from ncclsim.report.build import build_report, write_run_json
from ncclsim.report.model import Timing
from ncclsim.report.summary import summary_text
from ncclsim.rundir import RunDir
from ncclsim.sweep import expect
from ncclsim.sweep.matrix import SweepError
from ncclsim.sweep.metrics import collect

LOGS = Path(__file__).parent / "data" / "report" / "two-hosts"
NRANKS = 3
MIB = 1 << 20

# Per rank: AllReduce of 1 MiB (262144 floats) three times; medians 20, 25, 6 us.
ALLREDUCE_US = {0: [10.0, 20.0, 100.0], 1: [12.0, 25.0, 26.0], 2: [5.0, 6.0, 7.0]}
# AllGather of 65536 floats per rank (768 KiB in all), once: rank 2 starts 5 us
# late and ends last, 35 us after it started (rank 1 waited for it).
ALLGATHER_US = {0: [30.0], 1: [40.0], 2: [35.0]}
ALLGATHER_START = {0: 1000.0, 1: 1000.0, 2: 1005.0}


def _kernel(rank: int, coll: str, count: int, dur: float, ts: float, works: int = 1,
            algo: str = "RING", proto: str = "SIMPLE", type_size: int = 4) -> dict[str, Any]:
    return {"ph": "X", "cat": "kernel", "name": f"{coll} {algo}/{proto}", "ts": ts, "dur": dur, "tid": 1,
            "args": {"coll": coll, "algo": algo, "proto": proto, "type": "float", "redop": "Sum", "count": count,
                     "type_size": type_size, "rank": rank, "nranks": NRANKS, "device": rank, "stream": "0x5",
                     "comm": "0x7f00", "channels": 2, "works": works}}


def _step(channel: int, ts: float) -> dict[str, Any]:
    return {"ph": "X", "cat": "step", "name": "recv 4 send 5", "ts": ts, "dur": 1.5, "tid": 1000 + channel,
            "args": {"bytes": 524288, "coll": "AllReduce", "proto": "SIMPLE"}}


def _timeline_lines(rank: int) -> list[str]:
    events = [_kernel(rank, "AllReduce", 262144, d, 100.0 * i) for i, d in enumerate(ALLREDUCE_US[rank])]
    events += [_kernel(rank, "AllGather", 65536, d, ALLGATHER_START[rank]) for d in ALLGATHER_US[rank]]
    events += [_kernel(rank, "SendRecv", 4096, 3.0, 1100.0, algo="", proto="", type_size=1)]
    # Two grouped collectives in one kernel: no timing of its own (a count no other kernel has).
    events += [_kernel(rank, "AllReduce", 999, 500.0, 1200.0, works=2)]
    events += [_step(3, 1.0), _step(4, 2.0)]
    lines = [json.dumps(e) for e in events]
    if rank == 2:
        lines.append(json.dumps({"ph": "i", "cat": "note", "name": "steps truncated", "ts": 1300.0, "tid": 0,
                                 "s": "p", "args": {"kept": 2}}))
    return lines + ['{"ph": "X", "cat": "kernel", "name": "AllRed']  # killed while writing


PARSED_LINES = sum(len(_timeline_lines(r)) - 1 for r in range(NRANKS))


def _run_dir(tmp_path: Path, name: str = "run", timelines: bool = True) -> Path:
    root = tmp_path / name
    shutil.copytree(LOGS, root)
    run = RunDir(root)
    launch = {"options": {"clock": "model" if timelines else "wall"},
              "ranks": [{"rank": r, "host": r // 2, "status": 0} for r in range(NRANKS)]}
    run.launch_json.write_text(json.dumps(launch))
    if timelines:
        for r in range(NRANKS):
            run.rank(r).directory.mkdir(parents=True)
            (run.rank(r).directory / f"timeline.{4000 + r}.jsonl").write_text("\n".join(_timeline_lines(r)))
    return root


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    return _run_dir(tmp_path)


def _timing(doc: dict[str, Any], coll: str) -> dict[str, Any]:
    found = [t for t in doc["timings"] if t["collective"] == coll]
    assert len(found) == 1, doc["timings"]
    return found[0]


def test_run_json_timings(run_dir: Path) -> None:
    write_run_json(run_dir)
    doc = json.loads(RunDir(run_dir).run_json.read_text())
    assert doc["clock"] == "model" and doc["timeline"] == "timeline.json"
    ar = _timing(doc, "AllReduce")  # the 2-works kernel left no entry of its own
    assert ar["bytes"] == MIB and ar["type"] == "float" and (ar["algorithm"], ar["protocol"]) == ("RING", "SIMPLE")
    # calls end at 12, 125 and 300 us, each started at 0, 100, 200 by every rank: 12, 25, 100
    assert ar["time_us"] == 25.0 and ar["samples"] == 9
    assert ar["algbw_GBps"] == pytest.approx(MIB / 25e-6 / 1e9, abs=1e-3)
    assert ar["busbw_GBps"] == pytest.approx(MIB / 25e-6 / 1e9 * 2 * 2 / 3, abs=1e-3)  # 2(n-1)/n
    ag = _timing(doc, "AllGather")
    assert ag["bytes"] == 65536 * 4 * NRANKS and ag["time_us"] == 35.0  # from the last start, 1005, to 1040
    assert ag["busbw_GBps"] == pytest.approx(ag["bytes"] / 35e-6 / 1e9 * 2 / 3, abs=1e-3)  # (n-1)/n
    sr = _timing(doc, "SendRecv")
    assert sr["bytes"] == 4096 and sr["busbw_GBps"] == sr["algbw_GBps"]
    assert [t["collective"] for t in doc["timings"]] == ["AllGather", "AllReduce", "SendRecv"]  # NCCL's order
    assert any("rank(s) 2" in n and "cap" in n for n in doc["notes"]), doc["notes"]


def test_timeline_json_merges_ranks(run_dir: Path) -> None:
    write_run_json(run_dir)
    trace = json.loads(RunDir(run_dir).timeline_json.read_text())
    assert trace["displayTimeUnit"] == "ns"
    events = [e for e in trace["traceEvents"] if e["ph"] != "M"]
    assert len(events) == PARSED_LINES  # every line but the half-written ones
    assert {e["pid"] for e in events} == set(range(NRANKS))
    assert {e["args"]["rank"] for e in events if e["cat"] == "kernel" and e["pid"] == 1} == {1}
    meta = {(e["name"], e["pid"], e.get("tid")): e["args"] for e in trace["traceEvents"] if e["ph"] == "M"}
    assert meta[("process_name", 1, 0)] == {"name": "rank 1 (host 0, GPU 1)"}
    assert meta[("process_name", 2, 0)] == {"name": "rank 2 (host 1, GPU 2)"}
    assert meta[("process_sort_index", 2, 0)] == {"sort_index": 2}
    assert meta[("thread_name", 0, 1)] == {"name": "stream 1 (0x5)"}
    assert meta[("thread_name", 0, 1003)] == {"name": "channel 3"}
    assert meta[("thread_name", 0, 1004)] == {"name": "channel 4"}


def test_summary_shows_modelled_time(run_dir: Path) -> None:
    text = summary_text(build_report(run_dir))
    table = text[text.index("Modelled time"):].splitlines()
    assert table[2].split() == ["AllGather", "768", "KiB", "RING/SIMPLE", "35.0", "15.0"]
    assert table[3].split() == ["AllReduce", "1", "MiB", "RING/SIMPLE", "25.0", "55.9"]
    assert "timeline.json" in text and "ui.perfetto.dev" in text


def test_summary_of_many_sizes_stays_short(run_dir: Path) -> None:
    report = build_report(run_dir)
    many = tuple(Timing("AllReduce", 8 << i, "float", "RING", "LL", NRANKS, 10.0 + i, 1.0, 1.0, 3)
                 for i in range(31))
    text = summary_text(dataclasses.replace(report, timings=many))
    rows = [line for line in text.splitlines() if line.startswith("  AllReduce ")]
    assert len(rows) == 12 and rows[0].split()[1:3] == ["8", "B"] and rows[-1].split()[1:3] == ["8", "GiB"]
    assert "... 19 more (all of them: run.json)" in text


def test_a_wall_clock_run_has_no_timings(tmp_path: Path) -> None:
    root = _run_dir(tmp_path, timelines=False)
    report = build_report(root)
    assert (report.clock, report.timings, report.timeline) == ("wall", (), None)
    assert "Modelled time" not in summary_text(report)
    write_run_json(root)
    assert not RunDir(root).timeline_json.exists()


def test_a_run_without_payload_says_its_results_are_unchecked(tmp_path: Path) -> None:
    root = _run_dir(tmp_path)
    launch = json.loads(RunDir(root).launch_json.read_text())
    launch["options"]["no_payload"] = True
    RunDir(root).launch_json.write_text(json.dumps(launch))
    assert "results not checked: launch --no-payload" in summary_text(build_report(root))
    assert not any("no-payload" in n for n in build_report(_run_dir(tmp_path, "with")).notes)


def test_report_no_write_writes_no_timeline(run_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert report_cli.main([str(run_dir), "--no-write"]) == 0
    out = capsys.readouterr().out
    assert "Modelled time" in out and "timeline.json" not in out
    assert not RunDir(run_dir).timeline_json.exists() and not RunDir(run_dir).run_json.exists()


# --- sweep expectations -------------------------------------------------------

def test_timing_expectations(run_dir: Path) -> None:
    write_run_json(run_dir)
    metrics = collect(run_dir)
    assert expect.parse("busbw(allreduce,1M)>=55").violation(metrics) is None  # any case, binary suffix
    assert expect.parse("time(AllReduce, 1048576) <= 25").violation(metrics) is None
    assert expect.parse("algbw(AllGather,768K)>19").violation(metrics) is None
    assert expect.parse("busbw(AllReduce,1M)>=300").violation(metrics) == \
        "busbw(AllReduce,1M)>=300: busbw is 55.924 GB/s (RING/SIMPLE)"
    assert expect.parse("time(AllReduce,8)<=20").violation(metrics) == \
        "time(AllReduce,8)<=20: no AllReduce timing at 8 B (sizes timed: 1 MiB)"
    assert "timed no Broadcast (it timed AllGather, AllReduce, SendRecv)" in (
        expect.parse("time(Broadcast,1M)<5").violation(metrics) or "")
    assert "no modelled timings" in (expect.parse("time(AllReduce,1M)<5").violation({"ok": 1}) or "")
    assert expect.parse("channels>=2").violation(metrics) is None  # NAME OP VALUE as before


@pytest.mark.parametrize("text,message", [
    ("busbw(AllRedux,1M)>=1", "unknown collective 'AllRedux'"),
    ("busbw(AllReduce,1X)>=1", "not a size: '1X'"),
    ("speed(AllReduce,1M)>=1", "unknown timing 'speed'"),
    ("busbw(AllReduce,1M)>=fast", "'fast' is not a number"),
])
def test_bad_timing_expectations(text: str, message: str) -> None:
    with pytest.raises(SweepError, match=message.replace("(", r"\(")):
        expect.parse(text)


def test_sweep_refuses_timings_without_model_clock(run_cli, tmp_path: Path) -> None:
    proc = run_cli("sweep", "--out", str(tmp_path / "s"), "--expect", "busbw(AllReduce,1M)>=1")
    assert proc.returncode == 2
    assert "need --clock model" in proc.stderr.strip().splitlines()[-1], proc.stderr
    assert not (tmp_path / "s").exists()


# --- diff ---------------------------------------------------------------------

def _changed_copy(run_dir: Path, tmp_path: Path) -> Path:
    doc = json.loads(RunDir(run_dir).run_json.read_text())
    for t in doc["timings"]:
        if t["collective"] == "AllReduce":
            t.update(time_us=12.5, busbw_GBps=111.848, algorithm="TREE")
    doc["timings"] = [t for t in doc["timings"] if t["collective"] != "SendRecv"]
    other = tmp_path / "b.json"
    other.write_text(json.dumps(doc))
    return other


def test_diff_shows_timings_side_by_side(run_dir: Path, tmp_path: Path) -> None:
    write_run_json(run_dir)
    other = _changed_copy(run_dir, tmp_path)
    diffs = diff.diff_paths(RunDir(run_dir).run_json, other)
    lines = diff.to_text(diffs).splitlines()
    assert lines[0] == "modelled time (A -> B):"
    assert "  AllReduce 1 MiB float: 25.0 us 55.9 GB/s RING/SIMPLE -> 12.5 us 111.8 GB/s TREE/SIMPLE  (time x0.50)" \
        in lines
    assert "  SendRecv 4 KiB float: 3.0 us 1.4 GB/s -> -" in lines
    doc = diff.to_json(diffs)
    assert doc["same"] is False
    by_what = {t["what"]: t for t in doc["runs"][0]["timings"]}
    assert by_what["AllReduce 1 MiB float"]["time_ratio"] == 0.5
    assert by_what["AllGather 768 KiB float"]["before"] == by_what["AllGather 768 KiB float"]["after"]


def test_diff_without_timings_shows_none(tmp_path: Path) -> None:
    a, b = _run_dir(tmp_path, "a", timelines=False), _run_dir(tmp_path, "b", timelines=False)
    diffs = diff.diff_paths(a, b)
    assert diff.to_text(diffs) == "no difference\n" and diffs[0].timings == []


# --- launch and probe options -------------------------------------------------

def _launch_options(*argv: str) -> LaunchOptions:
    p = argparse.ArgumentParser()
    launch_cli.add_arguments(p)
    return launch_cli.options(p.parse_args(list(argv)))


def test_launch_timeline_and_payload_options() -> None:
    opts = _launch_options("--clock", "model", "--timeline", "--no-payload")
    assert (opts.clock, opts.timeline, opts.no_payload) == ("model", True, True)
    opts.check()
    _launch_options("--no-payload").check()  # with the wall clock too
    with pytest.raises(LaunchError, match="--timeline .* needs --clock model"):
        _launch_options("--timeline").check()


def test_launch_timeline_needs_model_clock(run_cli, tmp_path: Path) -> None:
    run = tmp_path / "run"
    proc = run_cli("launch", "--run-dir", str(run), "--timeline")
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "--timeline" in lines[0] and "--clock model" in lines[0], proc.stderr
    assert not run.exists()


def test_rank_script_names_the_timeline(tmp_path: Path) -> None:
    run = RunDir(tmp_path)
    with_timeline = rank_script.write(run, 8, timeline=True).read_text()
    assert 'export NCCLSIM_TIMELINE="$run/ranks/$rank/timeline.%p.jsonl"\n' in with_timeline
    assert "NCCLSIM_TIMELINE" not in rank_script.write(run, 8).read_text()


def test_rank_script_gives_the_topology_dump_to_host_0_only(tmp_path: Path) -> None:
    """NCCL detects the topology twice in every rank with NCCL_TOPO_DUMP_FILE
    set: rank.sh sets it for the processes of host 0 (which holds NCCL's rank
    0), not for the others, whatever the caller set. Two processes per host,
    run by a real shell, without the variable and with a caller's own."""
    run = RunDir(tmp_path)
    script = rank_script.write(run, 2)
    for host in range(2):
        run.host(host).env.parent.mkdir(parents=True)
        run.host(host).env.write_text(f"export NCCLSIM_HOSTNAME=h{host}\n")
    dump = str(run.topo_dump)
    for callers in (None, "/elsewhere.xml"):
        env = {k: v for k, v in os.environ.items() if k != "NCCL_TOPO_DUMP_FILE"}
        if callers:
            env["NCCL_TOPO_DUMP_FILE"] = callers
        seen = {}
        for rank in range(4):
            run.rank(rank).directory.mkdir(parents=True, exist_ok=True)
            proc = subprocess.run(["sh", str(script), "sh", "-c",
                                   'echo "$NCCLSIM_HOSTNAME ${NCCL_TOPO_DUMP_FILE:-none}"'],
                                  env={**env, "PMI_RANK": str(rank)}, timeout=30)
            assert proc.returncode == 0 and run.rank(rank).status() == 0
            seen[rank] = run.rank(rank).stdout.read_text().split()
        assert seen == {0: ["h0", dump], 1: ["h0", dump], 2: ["h1", "none"], 3: ["h1", "none"]}, (callers, seen)


@pytest.mark.parametrize("environ,no_check,checked", [
    ({}, False, True), ({"NCCLSIM_NO_PAYLOAD": "1"}, False, False), ({}, True, False)])
def test_probe_checks_nothing_without_payload(environ: dict[str, str], no_check: bool, checked: bool) -> None:
    p = argparse.ArgumentParser()
    probe_cli.add_arguments(p)
    args = p.parse_args(["--ops", "allreduce"] + (["--no-check"] if no_check else []))
    assert probe_cli.options(args, environ).check is checked


def test_probe_says_it_checks_nothing_without_payload(monkeypatch: pytest.MonkeyPatch,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("NCCLSIM_NO_PAYLOAD", "1")
    ran: list[bool] = []
    monkeypatch.setattr(probe_cli, "load", lambda: None)  # no NCCL here: the workload is not the point
    monkeypatch.setattr(probe_cli, "run", lambda libs, opts, world, log: ran.append(opts.check))
    p = argparse.ArgumentParser()
    probe_cli.add_arguments(p)
    assert probe_cli.execute(p.parse_args(["--ops", "allreduce"])) == 0
    assert ran == [False]
    assert "results not checked: no payload moves" in capsys.readouterr().out
