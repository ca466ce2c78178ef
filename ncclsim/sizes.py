"""Byte counts as people write them: `64K`, `128M`, `1G` (binary multiples,
as nccl-tests' -b/-e and the probe's --sizes take them), and back
(`128 MiB`)."""

from __future__ import annotations

from ncclsim import NcclsimError

SIZE_SUFFIXES = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def parse_size(text: str) -> int:
    """A positive byte count: plain digits or with a K/M/G/T suffix (KB, KiB also)."""
    t = text.strip().upper().removesuffix("B").removesuffix("I")
    unit = t[-1] if t and t[-1] in SIZE_SUFFIXES else ""
    try:
        value = int(t[: len(t) - len(unit)]) * SIZE_SUFFIXES[unit]
    except ValueError:
        raise NcclsimError(f"not a size: {text!r} (examples: 8, 64K, 16M)") from None
    if value <= 0:
        raise NcclsimError(f"sizes must be positive, got {text!r}")
    return value


def human_bytes(n: int) -> str:
    """The largest binary unit that divides n: 134217728 -> `128 MiB`, 1000 -> `1000 B`."""
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size and n % size == 0:
            return f"{n // size} {unit}"
    return f"{n} B"
