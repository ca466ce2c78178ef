"""This machine's memory, as /proc/meminfo tells it, and how often the kernel
ran out of it (/proc/vmstat)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional


def meminfo() -> dict[str, int]:
    """Every /proc/meminfo field in bytes (those given in kB), or nothing where
    there is no such file."""
    fields: dict[str, int] = {}
    try:
        text = Path("/proc/meminfo").read_text()
    except OSError:
        return fields
    for line in text.splitlines():
        name, _, value = line.partition(":")
        parts = value.split()
        if parts and parts[0].isdigit():
            fields[name] = int(parts[0]) * (1024 if parts[1:] == ["kB"] else 1)
    return fields


def room(fields: dict[str, int]) -> Optional[int]:
    """What the kernel can still hand out, from meminfo(): memory available and
    swap free (None where the fields are missing)."""
    if "MemAvailable" not in fields or "MemTotal" not in fields:
        return None
    return fields["MemAvailable"] + fields.get("SwapFree", 0)


def capacity(fields: dict[str, int]) -> int:
    """Memory and swap in all, from meminfo()."""
    return fields.get("MemTotal", 0) + fields.get("SwapTotal", 0)


def oom_kills(vmstat: Path = Path("/proc/vmstat")) -> Optional[int]:
    """How many processes the kernel's out-of-memory killer has killed since
    boot (/proc/vmstat's oom_kill, Linux 4.13 on); None where it does not say."""
    try:
        text = vmstat.read_text()
    except OSError:
        return None
    for line in text.splitlines():
        name, _, value = line.partition(" ")
        if name == "oom_kill" and value.strip().isdigit():
            return int(value)
    return None


def oom_note(before: Optional[int], after: Optional[int]) -> Optional[str]:
    """What to tell a user whose run the out-of-memory killer cut, from
    oom_kills() before and after it; None when it killed nothing (or cannot tell)."""
    if before is None or after is None or after <= before:
        return None
    return (f"this machine ran out of memory: the kernel killed {after - before} process(es) "
            "during the run (README, 'One simulation over several machines', says what "
            "large shapes need)")
