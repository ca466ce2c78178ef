"""The modelled timings of two runs side by side (`ncclsim diff`): per
collective, size, type and communicator size, each run's time, bus bandwidth
and algorithm/protocol, and the ratio of the times (B over A)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from ncclsim.sizes import human_bytes

Key = tuple[str, int, str, int]  # collective, bytes, type, nranks
SHOWN = ("time_us", "busbw_GBps", "algorithm", "protocol")


@dataclass
class TimingPair:
    what: str  # "AllReduce 128 MiB float"
    before: Optional[dict[str, Any]]  # SHOWN of run A, None when A did not time it
    after: Optional[dict[str, Any]]

    @property
    def differs(self) -> bool:
        return self.before != self.after

    @property
    def ratio(self) -> Optional[float]:
        """B's time over A's."""
        if not self.before or not self.after or not self.before.get("time_us"):
            return None
        return round(float(self.after["time_us"]) / float(self.before["time_us"]), 3)

    def text(self) -> str:
        ratio = f"  (time x{self.ratio:.2f})" if self.ratio is not None else ""
        return f"{self.what}: {_side(self.before)} -> {_side(self.after)}{ratio}"

    def to_json(self) -> dict[str, Any]:
        return {"what": self.what, "before": self.before, "after": self.after, "time_ratio": self.ratio}


def _side(t: Optional[dict[str, Any]]) -> str:
    if t is None:
        return "-"
    algo = f" {t['algorithm']}/{t['protocol']}" if t.get("algorithm") or t.get("protocol") else ""
    return f"{t['time_us']:.1f} us {t['busbw_GBps']:.1f} GB/s{algo}"


def _shown(t: Optional[dict[str, Any]]) -> Optional[dict[str, Any]]:
    return {k: t.get(k) for k in SHOWN} if t else None


def _by_key(timings: Any) -> dict[Key, dict[str, Any]]:
    """One entry per key: where several algorithms ran a size, the one with most kernels."""
    out: dict[Key, dict[str, Any]] = {}
    for t in timings or []:
        try:
            key = (str(t["collective"]), int(t["bytes"]), str(t.get("type", "")), int(t.get("nranks") or 0))
            float(t["time_us"]), float(t["busbw_GBps"])
        except (KeyError, TypeError, ValueError):
            continue
        if key not in out or (t.get("samples") or 0) > (out[key].get("samples") or 0):
            out[key] = t
    return out


def pair_timings(a: Any, b: Any) -> list[TimingPair]:
    """Both runs' timings (run.json's `timings` lists), matched by key; empty
    when neither run has any."""
    ta, tb = _by_key(a), _by_key(b)
    several = len({k[3] for k in [*ta, *tb]}) > 1
    pairs = []
    for key in sorted(set(ta) | set(tb), key=lambda k: (k[0], k[3], k[1], k[2])):
        coll, nbytes, dtype, nranks = key
        what = f"{coll} {human_bytes(nbytes)} {dtype}".rstrip() + (f" {nranks} ranks" if several else "")
        pairs.append(TimingPair(what, _shown(ta.get(key)), _shown(tb.get(key))))
    return pairs
