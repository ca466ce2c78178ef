"""`ncclsim diff`: what changed between two runs or two sweeps."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

DATA = Path(__file__).parent / "data" / "report"


def _copy(tmp_path: Path, name: str) -> Path:
    dest = tmp_path / name
    shutil.copytree(DATA / "two-hosts", dest)
    return dest


def test_same_run_has_no_difference(run_cli, tmp_path: Path) -> None:
    a = _copy(tmp_path, "a")
    proc = run_cli("diff", str(a), str(a))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "no difference\n"


def test_changes_are_named(run_cli, tmp_path: Path) -> None:
    """A run whose report differs in channels, one ring, a transport and an
    algorithm choice: each change is one line, exit 1."""
    a, b = _copy(tmp_path, "a"), _copy(tmp_path, "b")
    assert run_cli("report", str(a), "--json").returncode == 0  # writes a/run.json
    report = json.loads((a / "run.json").read_text())
    changed = json.loads(json.dumps(report))
    changed["channels"] = report["channels"] * 2
    ring0 = list(reversed(report["rings"]["0"]))
    changed["rings"]["0"] = ring0
    changed["transports"]["counts"]["SHM/direct"] = 4
    if report["tuning"]:
        changed["tuning"][0] = {**report["tuning"][0], "algorithm": "RING", "protocol": "SIMPLE"}
    (b / "run.json").write_text(json.dumps(changed))
    proc = run_cli("diff", str(a / "run.json"), str(b), "--json")
    assert proc.returncode == 1, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["schema_version"] == 1 and doc["same"] is False
    changes = {c["what"]: (c["before"], c["after"]) for c in doc["runs"][0]["changes"]}
    assert changes["channels"] == (str(report["channels"]), str(report["channels"] * 2))
    assert changes["ring 0"][1] == " ".join(map(str, ring0))
    assert changes["connections SHM/direct"] == ("0", "4")
    if report["tuning"]:
        t = report["tuning"][0]
        key = f"{t['collective']} {t['bytes']} B"
        assert changes[key][1].startswith("RING/SIMPLE")
    text = run_cli("diff", str(a), str(b)).stdout
    assert f"channels: {report['channels']} -> {report['channels'] * 2}\n" in text


@pytest.mark.e2e
def test_sweeps_point_by_point_and_bad_input(run_cli, tmp_path: Path) -> None:
    a = _copy(tmp_path, "run")
    assert run_cli("report", str(a), "--json").returncode == 0
    metrics = {"ok": 1, "nNodes": 2, "channels": 2}

    def sweep(name: str, channels: int) -> Path:
        doc = {"schema_version": 1, "axes": {}, "summary": {},
               "points": [{"name": "p1", "ok": True, "run_dir": str(tmp_path / "gone"),
                           "metrics": {**metrics, "channels": channels}}]}
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps(doc))
        return path

    proc = run_cli("diff", str(sweep("s1", 2)), str(sweep("s2", 4)))
    assert proc.returncode == 1 and proc.stdout == "p1: channels: 2 -> 4\n", proc.stdout
    proc = run_cli("diff", str(sweep("s3", 2)), str(a))
    assert proc.returncode == 2 and "cannot compare a sweep with a single run" in proc.stderr
    proc = run_cli("diff", str(tmp_path / "nosuch"), str(a))
    assert proc.returncode == 2 and "no such run directory" in proc.stderr
