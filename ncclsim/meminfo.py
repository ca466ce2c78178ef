"""This machine's memory, as /proc/meminfo tells it."""

from __future__ import annotations

from pathlib import Path


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
