"""What a sweep records of each run, from its run directory (launch.json and
the report, run.json): the values tables, JSON/CSV and expectations use."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, Union

from ncclsim.rundir import RunDir

Value = Union[int, float, str, list]

# name -> what it is (the help of --expect lists these)
METRICS = {
    "ok": "1 when every rank exited 0, else 0",
    "status": "launch's exit status",
    "nranks": "NCCL ranks",
    "nNodes": "hosts NCCL saw (distinct host hashes)",
    "localRanks": "ranks per host NCCL saw",
    "channels": "collective channels",
    "p2p_channels": "point-to-point channels",
    "inter_transport": "transport kinds between hosts (NET, ...)",
    "intra_transport": "transport kinds inside a host (P2P, SHM, ...)",
    "nccl_version": "the NCCL release that ran",
    "rings": "digest of every channel's ring",
    "trees": "digest of every channel's tree",
    "algorithms": "algorithm/protocol NCCL chose, per collective and size",
    "seconds": "launch's wall time",
}
# The run's modelled timings (run.json's, --clock model): what busbw(...), algbw(...) and time(...) read.
TIMINGS = "timings"
TIMING_KEYS = ("collective", "bytes", "type", "algorithm", "protocol", "nranks", "time_us", "algbw_GBps",
               "busbw_GBps")


def _digest(value: Any) -> str:
    return hashlib.sha1(json.dumps(value, sort_keys=True).encode()).hexdigest()[:10] if value else ""


def _kinds(transports: list[str]) -> list[str]:
    return sorted({t.split("/")[0] for t in transports})


def _read(path: Path) -> dict[str, Any]:
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return doc if isinstance(doc, dict) else {}


def collect(run_dir: Path) -> dict[str, Value]:
    """The metrics of one finished run; missing parts (a run that failed before
    NCCL started) are left out."""
    run = RunDir(run_dir)
    r = _read(run.run_json)  # the report, launch.json included
    launch = r.get("launch") or _read(run.launch_json)
    m: dict[str, Value] = {"ok": 0}
    try:
        m["status"] = int(launch["status"])
        m["ok"] = int(launch["status"] == 0)
        m["seconds"] = float(launch["seconds"])
    except (KeyError, TypeError, ValueError):
        pass
    if not r:
        return m
    m["nranks"] = r.get("nranks") or 0
    m["nNodes"] = r.get("nnodes") or 0
    m["localRanks"] = r.get("local_ranks") or 0
    m["channels"] = r.get("channels") or 0
    m["p2p_channels"] = r.get("p2p_channels") or 0
    transports = r.get("transports") or {}
    m["inter_transport"] = _kinds(transports.get("inter_host") or [])
    m["intra_transport"] = _kinds(transports.get("intra_host") or [])
    m["nccl_version"] = (r.get("nccl_version") or "").split("+")[0]
    m["rings"] = _digest(r.get("rings"))
    m["trees"] = _digest(r.get("trees"))
    m["algorithms"] = [f"{t['collective']} {t['bytes']}B {t['algorithm']}/{t['protocol']}"
                       for t in r.get("tuning") or []]
    timings = [{k: t.get(k) for k in TIMING_KEYS} for t in r.get("timings") or [] if isinstance(t, dict)]
    if timings:
        m[TIMINGS] = timings
    return m
