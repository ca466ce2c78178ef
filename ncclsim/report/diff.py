"""`ncclsim diff A B`: what changed between two runs (run directories or
their run.json) or two sweeps (sweep.json, or a sweep's --out directory):
NCCL version, shape, channels, rings, trees, transports, algorithm choices,
and the modelled timings side by side (--clock model runs)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from ncclsim import NcclsimError
from ncclsim.report.build import build_report
from ncclsim.report.diff_timings import TimingPair, pair_timings
from ncclsim.rundir import RUN_JSON
from ncclsim.sweep.metrics import TIMINGS

SCHEMA_VERSION = 1
SWEEP_JSON = "sweep.json"


class DiffError(NcclsimError):
    pass


@dataclass
class Change:
    what: str    # "channels", "ring 3", "AllReduce 1048576 B", ...
    before: str
    after: str

    def text(self) -> str:
        return f"{self.what}: {self.before} -> {self.after}"


@dataclass
class RunDiff:
    name: str  # "" for a plain two-run diff, the point's name in a sweep
    changes: list[Change] = field(default_factory=list)
    timings: list[TimingPair] = field(default_factory=list)  # empty when neither run has timings

    @property
    def differs(self) -> bool:
        return bool(self.changes) or any(t.differs for t in self.timings)


def _load_json(path: Path) -> dict[str, Any]:
    try:
        return json.loads(path.read_text())
    except OSError as e:
        raise DiffError(f"cannot read {path}: {e.strerror}") from None
    except ValueError as e:
        raise DiffError(f"{path} is not JSON: {e}") from None


def load_run(path: Path) -> dict[str, Any]:
    """A run's report: run.json, or the run directory (its run.json, else built now)."""
    if path.is_file():
        return _load_json(path)
    if (path / RUN_JSON).exists():
        return _load_json(path / RUN_JSON)
    if path.is_dir():
        return build_report(path).to_json()
    raise DiffError(f"{path}: no such run directory or run.json")


def _sweep(path: Path) -> Optional[dict[str, Any]]:
    """The sweep document `path` is (sweep.json or its directory), else None."""
    if path.is_dir() and (path / SWEEP_JSON).exists():
        path = path / SWEEP_JSON
    if path.is_file() and path.name.endswith(".json"):
        doc = _load_json(path)
        if isinstance(doc, dict) and "points" in doc and "axes" in doc:
            return doc
    return None


def _fmt(v: Any) -> str:
    if v is None or v == [] or v == {}:
        return "-"
    if isinstance(v, list):
        return " ".join(map(str, v))
    return str(v)


def _changed(out: list[Change], what: str, a: Any, b: Any) -> None:
    if a != b:
        out.append(Change(what, _fmt(a), _fmt(b)))


def _tree_text(tree: dict[str, Any]) -> str:
    return " ".join(f"{r}({'root' if t.get('up') is None else t['up']}>{','.join(map(str, t.get('down') or []))})"
                    for r, t in sorted(tree.items(), key=lambda kv: int(kv[0])))


def _algos(report: dict[str, Any]) -> dict[str, str]:
    return {f"{t['collective']} {t['bytes']} B": f"{t['algorithm']}/{t['protocol']} {t['channels']} ch"
            for t in report.get("tuning") or []}


def diff_reports(a: dict[str, Any], b: dict[str, Any]) -> list[Change]:
    out: list[Change] = []
    for key in ("nccl_version", "nranks", "nnodes", "local_ranks", "channels", "p2p_channels"):
        _changed(out, key, a.get(key), b.get(key))
    ra, rb = a.get("rings") or {}, b.get("rings") or {}
    for ch in sorted(set(ra) | set(rb), key=int):
        _changed(out, f"ring {ch}", ra.get(ch), rb.get(ch))
    ta, tb = a.get("trees") or {}, b.get("trees") or {}
    for ch in sorted(set(ta) | set(tb), key=int):
        _changed(out, f"tree {ch}", _tree_text(ta.get(ch) or {}), _tree_text(tb.get(ch) or {}))
    ca = (a.get("transports") or {}).get("counts") or {}
    cb = (b.get("transports") or {}).get("counts") or {}
    for t in sorted(set(ca) | set(cb)):
        _changed(out, f"connections {t}", ca.get(t, 0), cb.get(t, 0))
    aa, ab = _algos(a), _algos(b)
    for k in sorted(set(aa) | set(ab), key=lambda s: (s.split()[0], int(s.split()[1]))):
        _changed(out, k, aa.get(k), ab.get(k))
    return out


def diff_paths(a: Path, b: Path) -> list[RunDiff]:
    """Two runs, or two sweeps point by point (matched by name; runs whose
    directories are gone are compared by their recorded metrics)."""
    sa, sb = _sweep(a), _sweep(b)
    if (sa is None) != (sb is None):
        raise DiffError(f"cannot compare a sweep with a single run: {a if sa else b} is a sweep")
    if sa is None or sb is None:
        ra, rb = load_run(a), load_run(b)
        return [RunDiff("", diff_reports(ra, rb), pair_timings(ra.get("timings"), rb.get("timings")))]
    pa = {p["name"]: p for p in sa["points"]}
    pb = {p["name"]: p for p in sb["points"]}
    diffs = []
    for name in list(dict.fromkeys([*pa, *pb])):
        if name not in pa or name not in pb:
            diffs.append(RunDiff(name, [Change("point", "-" if name not in pa else "present",
                                               "-" if name not in pb else "present")]))
            continue
        da, db = Path(pa[name]["run_dir"]), Path(pb[name]["run_dir"])
        ma, mb = pa[name]["metrics"], pb[name]["metrics"]
        if (da / RUN_JSON).exists() and (db / RUN_JSON).exists():
            ra, rb = load_run(da), load_run(db)
            changes = diff_reports(ra, rb)
            timings = pair_timings(ra.get("timings"), rb.get("timings"))
        else:
            changes = []
            for key in sorted(set(ma) | set(mb)):
                if key not in ("seconds", TIMINGS):
                    _changed(changes, key, ma.get(key), mb.get(key))
            timings = pair_timings(ma.get(TIMINGS), mb.get(TIMINGS))
        _changed(changes, "ok", pa[name]["ok"], pb[name]["ok"])
        diffs.append(RunDiff(name, changes, timings))
    return diffs


def to_text(diffs: list[RunDiff]) -> str:
    lines = []
    for d in diffs:
        prefix = f"{d.name}: " if d.name else ""
        if not d.differs:
            lines.append(f"{prefix}no difference" if d.name else "no difference")
        lines += [prefix + c.text() for c in d.changes]
        if d.timings:
            lines.append(f"{prefix}modelled time (A -> B):")
            lines += [f"{prefix}  {t.text()}" for t in d.timings]
    return "\n".join(lines) + "\n"


def to_json(diffs: list[RunDiff]) -> dict[str, Any]:
    return {"schema_version": SCHEMA_VERSION, "same": not any(d.differs for d in diffs),
            "runs": [{"name": d.name, "changes": [c.__dict__ for c in d.changes],
                      **({"timings": [t.to_json() for t in d.timings]} if d.timings else {})} for d in diffs]}
