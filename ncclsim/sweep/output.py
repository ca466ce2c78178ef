"""A sweep's results as a table, JSON (schema_version 1) and CSV."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any, Sequence

from ncclsim.sweep.runner import Outcome

SCHEMA_VERSION = 1
COLUMNS = ("point", "result", "nNodes", "channels", "rings", "trees", "inter", "algorithms", "wall s", "note")


def _algos(o: Outcome) -> str:
    """The distinct algorithm/protocol pairs NCCL chose, e.g. RING/LL128,TREE/LL."""
    seen = sorted({a.split(" ")[-1] for a in o.metrics.get("algorithms", []) or []})
    return ",".join(seen) or "-"


def row(o: Outcome) -> list[str]:
    m = o.metrics
    note = "; ".join(o.violations) if o.violations else o.error
    return [o.point.name, o.result, str(m.get("nNodes", "-")), str(m.get("channels", "-")),
            str(m.get("rings") or "-"), str(m.get("trees") or "-"),
            ",".join(m.get("inter_transport", []) or []) or "-", _algos(o), f"{o.wall:.1f}", note]


def table(outcomes: Sequence[Outcome]) -> str:
    rows = [list(COLUMNS)] + [row(o) for o in outcomes]
    widths = [max(len(r[i]) for r in rows) for i in range(len(COLUMNS) - 1)]
    lines = []
    for r in rows:
        lines.append("  ".join(c.ljust(w) for c, w in zip(r, widths)) + "  " + r[-1])
    return "\n".join(line.rstrip() for line in lines) + "\n"


def to_json(outcomes: Sequence[Outcome], axes: dict[str, Any]) -> dict[str, Any]:
    return {"schema_version": SCHEMA_VERSION, "axes": axes,
            "summary": {"points": len(outcomes), "ok": sum(o.ok for o in outcomes),
                        "failed": sum(not o.ok for o in outcomes),
                        "violations": sum(len(o.violations) for o in outcomes)},
            "points": [o.to_json() for o in outcomes]}


def write_json(path: Path, doc: dict[str, Any]) -> None:
    path.write_text(json.dumps(doc, indent=1) + "\n")


def write_csv(path: Path, outcomes: Sequence[Outcome]) -> None:
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(["name", "preset", "hosts", "gpus", "nccl", "env", "ok", "status", "nNodes", "nranks",
                "channels", "p2p_channels", "rings", "trees", "inter_transport", "intra_transport",
                "nccl_version", "algorithms", "wall_seconds", "violations", "error"])
    for o in outcomes:
        m, p = o.metrics, o.point
        w.writerow([p.name, p.preset, p.hosts, p.gpus or "", p.nccl,
                    " ".join(f"{k}={v}" for k, v in p.env), int(o.ok), m.get("status", ""),
                    m.get("nNodes", ""), m.get("nranks", ""), m.get("channels", ""), m.get("p2p_channels", ""),
                    m.get("rings", ""), m.get("trees", ""), ",".join(m.get("inter_transport", []) or []),
                    ",".join(m.get("intra_transport", []) or []), m.get("nccl_version", ""),
                    "; ".join(m.get("algorithms", []) or []), round(o.wall, 2), "; ".join(o.violations),
                    o.error])
    path.write_text(buf.getvalue())
