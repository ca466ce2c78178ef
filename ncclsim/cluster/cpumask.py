"""CPU affinity masks in the form Linux writes /sys/devices/system/node/nodeN/cpumap,
which NCCL copies into the topology XML's `affinity`."""

from __future__ import annotations

from typing import Iterable


def socket_cpus(socket: int, sockets: int, cores_per_socket: int,
                threads_per_core: int) -> list[int]:
    """Logical CPUs of one socket, numbered as Linux numbers them on x86: all
    first hardware threads, socket by socket, then all second threads, ..."""
    per_thread = sockets * cores_per_socket
    return [t * per_thread + socket * cores_per_socket + c
            for t in range(threads_per_core) for c in range(cores_per_socket)]


def cpumask(cpus: Iterable[int], nr_cpus: int) -> str:
    """Comma-separated 32-bit hex words, most significant first; the first word
    only as wide as the CPUs it covers (the kernel's "%*pb")."""
    bits = 0
    for c in cpus:
        if not 0 <= c < nr_cpus:
            raise ValueError(f"CPU {c} outside 0..{nr_cpus - 1}")
        bits |= 1 << c
    words = (nr_cpus + 31) // 32
    top_bits = nr_cpus - 32 * (words - 1)
    parts = []
    for w in reversed(range(words)):
        width = (top_bits + 3) // 4 if w == words - 1 else 8
        parts.append(f"{(bits >> (32 * w)) & 0xFFFFFFFF:0{width}x}")
    return ",".join(parts)
