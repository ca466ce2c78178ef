"""What each probe operation must leave in its output buffer, to check the
simulated kernels computed NCCL's results.

Every rank's input is float32 `rank + 1 + (i % PERIOD)` at element i, small
integers that sums represent exactly. Expected outputs are periodic too, so
they are built by repeating a short block (fast for 64 MiB buffers) and
compared as bytes.
"""

from __future__ import annotations

import struct
from typing import Optional

from ncclsim.probe.bindings import NCCL_MAX, NCCL_MIN, NCCL_SUM

PERIOD = 7


def _f32(values: list[float]) -> bytes:
    return struct.pack(f"<{len(values)}f", *values)


def pattern(rank: int, start: int, count: int) -> bytes:
    """float32 elements start..start+count-1 of `rank`'s input."""
    block = _f32([rank + 1 + (start + k) % PERIOD for k in range(PERIOD)])
    whole, rest = divmod(count, PERIOD)
    return block * whole + block[: rest * 4]


# The reductions the probe offers, each exact on its inputs.
REDUCTIONS = {"sum": NCCL_SUM, "max": NCCL_MAX, "min": NCCL_MIN}


def reduced(nranks: int, start: int, count: int, redop: str = "sum") -> bytes:
    """Elements start.. of every rank's input reduced with `redop`."""
    def element(i: int) -> int:
        return {"sum": nranks * (nranks + 1) // 2 + nranks * i, "max": nranks + i, "min": 1 + i}[redop]
    block = _f32([element((start + k) % PERIOD) for k in range(PERIOD)])
    whole, rest = divmod(count, PERIOD)
    return block * whole + block[: rest * 4]


def expected(op: str, rank: int, nranks: int, count: int, redop: str = "sum") -> Optional[bytes]:
    """The output of `op` on `rank` (count: the elements the probe passed as
    the op's total count, see workload._issue; redop: the reductions'
    operator), or None when it has none."""
    per = max(count // nranks, 1)
    if op == "allreduce":
        return reduced(nranks, 0, count, redop)
    if op == "broadcast":
        return pattern(0, 0, count)
    if op == "reduce":
        return reduced(nranks, 0, count, redop) if rank == 0 else None
    if op == "allgather":
        return b"".join(pattern(r, 0, per) for r in range(nranks))
    if op == "reducescatter":
        return reduced(nranks, rank * per, per, redop)
    if op == "sendrecv":
        return pattern((rank - 1) % nranks, 0, count)
    if op == "alltoall":
        return b"".join(pattern(p, rank * per, per) for p in range(nranks))
    raise ValueError(op)


def first_difference(got: bytes, want: bytes) -> Optional[str]:
    """None when equal, else where and what differs (float32 elements)."""
    if got == want:
        return None
    n = min(len(got), len(want))
    i = next((k for k in range(0, n, 4) if got[k:k + 4] != want[k:k + 4]), n)
    if i >= n:
        return f"{len(got)} bytes where {len(want)} were expected"
    g, w = struct.unpack_from("<f", got, i)[0], struct.unpack_from("<f", want, i)[0]
    wrong = sum(1 for k in range(0, n, 4) if got[k:k + 4] != want[k:k + 4])
    return f"element {i // 4} is {g:g}, expected {w:g} ({wrong} of {n // 4} elements wrong)"
