"""Modelled kernel times turned into nccl-tests' numbers: the size column,
the time, and the algorithm and bus bandwidths (nccl-tests' doc/PERFORMANCE.md).

The ranks' kernels of one collective at one size are its calls, in order
(each rank's n-th is the n-th call). A call takes from when its last rank's
kernel started (before that, the ranks that came early only wait for it) to
when its last rank's kernel ended; the collective's time is the median of its
calls (a first call's connection set-up does not move it). Kernels that ran
several grouped collectives (`works` > 1) describe only the first: they are
left out.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any, Hashable, Iterable, Mapping, Optional

from ncclsim.report.model import Timing

# NCCL's order of its collectives, for the report's order.
COLLECTIVES = ("Broadcast", "Reduce", "AllGather", "ReduceScatter", "AllReduce", "SendRecv")


def size_bytes(collective: str, count: int, type_size: int, nranks: int) -> int:
    """nccl-tests' size: the buffer an AllReduce, Broadcast or Reduce works on;
    AllGather's receive and ReduceScatter's send buffer (every rank's part);
    SendRecv's bytes sent (its count is already bytes)."""
    if collective in ("AllGather", "ReduceScatter"):
        return count * type_size * nranks
    return count * type_size


def bus_factor(collective: str, nranks: int) -> float:
    """busbw / algbw: what each rank's links carry relative to the size."""
    if nranks < 1:
        return 1.0
    if collective == "AllReduce":
        return 2 * (nranks - 1) / nranks
    if collective in ("AllGather", "ReduceScatter"):
        return (nranks - 1) / nranks
    return 1.0


@dataclass(frozen=True)
class Kernel:
    """One NCCL kernel of one rank (its `who`: any key naming the rank)."""
    who: Hashable
    collective: str
    nbytes: int
    dtype: str
    algorithm: str
    protocol: str
    nranks: int
    start_us: float
    dur_us: float


def kernel_of(event: Mapping[str, Any], who: Hashable) -> Optional[Kernel]:
    """The kernel a timeline event describes; None for other events, kernels of
    several grouped collectives, and records missing a field."""
    args = event.get("args")
    if event.get("cat") != "kernel" or event.get("ph") != "X" or not isinstance(args, dict):
        return None
    try:
        if int(args.get("works", 1)) != 1:
            return None
        coll, nranks = str(args["coll"]), int(args["nranks"])
        return Kernel(who=(who, args.get("comm"), int(args["rank"])), collective=coll,
                      nbytes=size_bytes(coll, int(args["count"]), int(args["type_size"]), nranks),
                      dtype=str(args.get("type", "")), algorithm=str(args.get("algo", "")),
                      protocol=str(args.get("proto", "")), nranks=nranks, start_us=float(event["ts"]),
                      dur_us=float(event["dur"]))
    except (KeyError, TypeError, ValueError):
        return None


def _order(key: tuple[str, int, str, str, str, int]) -> tuple[Any, ...]:
    coll, nbytes, dtype, algo, proto, nranks = key
    known = COLLECTIVES.index(coll) if coll in COLLECTIVES else len(COLLECTIVES)
    return (known, coll, nranks, nbytes, dtype, algo, proto)


def timings(kernels: Iterable[Kernel]) -> tuple[Timing, ...]:
    """One Timing per collective, size, type, algorithm, protocol and communicator size."""
    by_key: dict[tuple[str, int, str, str, str, int], dict[Hashable, list[Kernel]]] = {}
    for k in kernels:
        key = (k.collective, k.nbytes, k.dtype, k.algorithm, k.protocol, k.nranks)
        by_key.setdefault(key, {}).setdefault(k.who, []).append(k)
    out = []
    for key in sorted(by_key, key=_order):
        coll, nbytes, dtype, algo, proto, nranks = key
        per_rank = [sorted(ks, key=lambda k: k.start_us) for ks in by_key[key].values()]
        calls = zip(*per_rank)  # the n-th kernel of every rank (as many calls as the rank with fewest)
        time_us = statistics.median(max(k.start_us + k.dur_us for k in call) - max(k.start_us for k in call)
                                    for call in calls)
        algbw = nbytes / (time_us * 1e-6) / 1e9 if time_us > 0 else 0.0
        out.append(Timing(coll, nbytes, dtype, algo, proto, nranks, round(time_us, 3), round(algbw, 3),
                          round(algbw * bus_factor(coll, nranks), 3), sum(len(d) for d in per_rank)))
    return tuple(out)
