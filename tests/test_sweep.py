"""`ncclsim sweep`: launch over a matrix of shapes, NCCL releases and
settings, with expectations checked on every run's report."""

from __future__ import annotations

import csv
import json
import signal
import subprocess
import time
from pathlib import Path

import pytest

from ncclsim.sweep import expect, matrix


def _sweep(run_cli, tmp_path: Path, *args: str, timeout: float = 900):
    out = tmp_path / "sweep"
    proc = run_cli("sweep", "--out", str(out), "--json", str(tmp_path / "s.json"), *args, timeout=timeout)
    doc = json.loads((tmp_path / "s.json").read_text()) if (tmp_path / "s.json").exists() else None
    return proc, doc


@pytest.mark.e2e
def test_shapes_write_json_and_csv(run_cli, tmp_path: Path) -> None:
    proc, doc = _sweep(run_cli, tmp_path, "--hosts", "1,2", "--gpus", "4", "--csv", str(tmp_path / "s.csv"),
                       "--expect", "channels>=4", "--expect", "intra_transport==P2P")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert doc["schema_version"] == 1 and doc["summary"] == {"points": 2, "ok": 2, "failed": 0, "violations": 0}
    by_hosts = {p["point"]["hosts"]: p for p in doc["points"]}
    assert by_hosts[1]["metrics"]["nNodes"] == 1 and by_hosts[2]["metrics"]["nNodes"] == 2
    assert by_hosts[2]["metrics"]["inter_transport"] == ["NET"]
    for p in doc["points"]:
        assert p["ok"] and p["metrics"]["nranks"] == 4 * p["point"]["hosts"]
        assert Path(p["run_dir"], "run.json").exists()
        assert any("AllReduce" in a for a in p["metrics"]["algorithms"])  # the default probe's AllReduce
    rows = list(csv.DictReader((tmp_path / "s.csv").open()))
    assert [(r["hosts"], r["ok"], r["nNodes"]) for r in rows] == [("1", "1", "1"), ("2", "1", "2")]
    table = proc.stdout.splitlines()
    assert table[0].split()[:3] == ["point", "result", "nNodes"]
    assert [line.split()[1] for line in table[1:]] == ["ok", "ok"]


@pytest.mark.e2e
def test_a_false_expectation_fails_the_sweep(run_cli, tmp_path: Path) -> None:
    proc, doc = _sweep(run_cli, tmp_path, "--hosts", "2", "--gpus", "2", "--expect", "nNodes==3",
                       "--expect", "inter_transport==NET")
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert "expectation not met: dgx-h100_2x2: nNodes==3: nNodes is 2" in proc.stderr
    assert doc["points"][0]["ok"] and doc["points"][0]["violations"] == ["nNodes==3: nNodes is 2"]
    assert doc["summary"]["violations"] == 1


@pytest.mark.e2e
def test_each_nccl_release_runs_its_own_library(run_cli, tmp_path: Path) -> None:
    proc, doc = _sweep(run_cli, tmp_path, "--hosts", "2", "--gpus", "2", "--nccl", "installed,2.23.4",
                       "--env", "NCCL_ALGO=Ring")
    assert proc.returncode == 0, proc.stderr[-3000:]
    versions = {p["point"]["nccl"]: p["metrics"]["nccl_version"] for p in doc["points"]}
    assert versions == {"installed": "2.30.7", "2.23.4": "2.23.4"}
    for p in doc["points"]:
        assert p["point"]["env"] == {"NCCL_ALGO": "Ring"}
        assert {a.split()[-1].split("/")[0] for a in p["metrics"]["algorithms"]} == {"RING"}


@pytest.mark.parametrize("args,message", [
    pytest.param(["--nccl", "2.99.1"], "cannot fetch nvidia-nccl-cu12==2.99.1", marks=pytest.mark.e2e),
    (["--expect", "nNodes=2"], "expected NAME OP VALUE"),
    (["--expect", "speed>1"], "unknown name 'speed'"),
    (["--env", "NCCL_ALGO"], "--env expects NAME=value1,value2"),
    (["--preset", "no-such-preset"], "no-such-preset"),
    (["--hosts", "1,x"], "--hosts: 'x' is not a number"),
])
def test_bad_input_stops_before_anything_runs(run_cli, tmp_path: Path, args: list[str], message: str) -> None:
    proc, doc = _sweep(run_cli, tmp_path, *args)
    assert proc.returncode == 2, proc.stderr
    assert message in proc.stderr.strip().splitlines()[-1], proc.stderr
    assert doc is None and not (tmp_path / "sweep").exists()


def test_bad_input_leaves_no_default_sweep_directory(run_cli, tmp_path: Path) -> None:
    proc = run_cli("sweep", "--hosts", "1,x")  # no --out: a directory under ncclsim-sweeps/ is made, then taken back
    assert proc.returncode == 2, proc.stderr
    assert "--hosts: 'x' is not a number" in proc.stderr.strip().splitlines()[-1], proc.stderr
    assert not (tmp_path / "ncclsim-sweeps").exists(), list((tmp_path / "ncclsim-sweeps").rglob("*"))


def test_expectations_and_points_units() -> None:
    e = expect.parse("channels >= 16")
    assert e.violation({"channels": 16}) is None and e.violation({"channels": 8}) == "channels >= 16: channels is 8"
    t = expect.parse("inter_transport==NET")
    assert t.violation({"inter_transport": ["NET"]}) is None
    assert t.violation({"inter_transport": []}) == "inter_transport==NET: inter_transport is "
    assert "did not get that far" in (t.violation({"ok": 0}) or "")
    pts = matrix.points(["dgx-h100"], [1, 2], [None], ["installed"], [("NCCL_ALGO", ["Ring", "Tree"])])
    assert [p.name for p in pts] == ["dgx-h100_1xall_NCCL_ALGO=Ring", "dgx-h100_1xall_NCCL_ALGO=Tree",
                                     "dgx-h100_2xall_NCCL_ALGO=Ring", "dgx-h100_2xall_NCCL_ALGO=Tree"]
    with pytest.raises(matrix.SweepError, match="repeats a point"):
        matrix.points(["dgx-h100"], [2, 2], [None], ["installed"], [])


@pytest.mark.e2e
def test_a_stopped_sweep_stops_its_launches(ncclsim_exe: Path, clean_env: dict[str, str], leftovers,
                                            tmp_path: Path) -> None:
    """SIGTERM to a sweep (a CI job cancelled): the running launch stops its
    ranks, the next point is not run, the results say so, exit 128 + 15."""
    out = tmp_path / "sweep"
    proc = subprocess.Popen([str(ncclsim_exe), "sweep", "--out", str(out), "--hosts", "1,2", "--gpus", "1",
                             "--jobs", "1", "--", "sh", "-c", "echo started; sleep 300"],
                            cwd=tmp_path, env=clean_env, text=True, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    first = out / "dgx-h100_1x1"
    deadline = time.monotonic() + 60
    while not ((first / "ranks" / "0" / "stdout").exists() and (first / "ranks" / "0" / "stdout").read_text()):
        assert time.monotonic() < deadline and proc.poll() is None, "the first launch did not start its rank"
        time.sleep(0.1)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signal.SIGTERM, err
    assert "ncclsim sweep: stopped by SIGTERM" in err, err
    points = {p["name"]: p for p in json.loads((out / "sweep.json").read_text())["points"]}
    assert points["dgx-h100_1x1"]["metrics"]["status"] == 128 + signal.SIGTERM, points
    assert points["dgx-h100_2x1"]["error"] == "not run: the sweep was stopped", points
    leftovers.assert_none(first)
