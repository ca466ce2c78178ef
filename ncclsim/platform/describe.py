"""A simulated platform as users read it: a table, or JSON."""

from __future__ import annotations

from typing import Any

from ncclsim.platform.config import GpuConfig, PlatformConfig
from ncclsim.platform.models import GpuCatalog
from ncclsim.platform.pci import PciAddress


def driver_version_text(version: int) -> str:
    """13000 -> "13.0", as CUDA prints cuDriverGetVersion."""
    return f"{version // 1000}.{version % 1000 // 10}"


def nvlink_groups(links: tuple[PciAddress, ...]) -> list[tuple[PciAddress, int]]:
    """Links per remote, in order of first appearance."""
    counts: dict[PciAddress, int] = {}
    for a in links:
        counts[a] = counts.get(a, 0) + 1
    return list(counts.items())


def gpu_json(index: int, g: GpuConfig, catalog: GpuCatalog) -> dict[str, Any]:
    m = catalog.get(g.model)
    return {
        "index": index,
        "model": m.key,
        "name": m.name,
        "sm": m.sm,
        "bus_id": str(g.bus_id),
        "uuid": g.uuid,
        "memory": g.memory,
        "numa_node": g.numa_node,
        "nvlinks": len(g.nvlink_remote),
        "nvlink_remote": [str(a) for a in g.nvlink_remote],
    }


def platform_json(cfg: PlatformConfig, catalog: GpuCatalog) -> dict[str, Any]:
    return {
        "host_index": cfg.host_index,
        "hostname": cfg.hostname,
        "driver_version": cfg.driver_version,
        "multicast": cfg.multicast,
        "collnet": cfg.collnet,
        "gpus": [gpu_json(i, g, catalog) for i, g in enumerate(cfg.gpus)],
    }


def _table(rows: list[list[str]]) -> list[str]:
    widths = [max(len(r[c]) for r in rows) for c in range(len(rows[0]))]
    return ["  ".join(cell.ljust(w) for cell, w in zip(r, widths)).rstrip() for r in rows]


def _same_link_spans(cfg: PlatformConfig) -> list[tuple[int, int, str]]:
    """(first GPU, last GPU, links) for runs of GPUs wired alike; GPUs without links omitted."""
    spans: list[tuple[int, int, str]] = []
    for i, g in enumerate(cfg.gpus):
        text = ", ".join(f"{a} x{n}" for a, n in nvlink_groups(g.nvlink_remote))
        if spans and spans[-1][1] == i - 1 and spans[-1][2] == text:
            spans[-1] = (spans[-1][0], i, text)
        elif text:
            spans.append((i, i, text))
    return spans


def platform_text(cfg: PlatformConfig, catalog: GpuCatalog) -> str:
    lines = [f"host {cfg.host_index} ({cfg.hostname}), CUDA driver "
             f"{driver_version_text(cfg.driver_version)}, {len(cfg.gpus)} GPU(s)",
             f"NVSwitch multicast (NVLS): {'yes' if cfg.multicast else 'no'}; "
             f"in-network reduction (CollNet): {'yes' if cfg.collnet else 'no'}", ""]
    rows = [["GPU", "name", "bus id", "UUID", "memory", "NUMA", "NVLinks"]]
    for i, g in enumerate(cfg.gpus):
        rows.append([str(i), catalog.get(g.model).name, str(g.bus_id), g.uuid,
                     f"{g.memory // (1 << 20)} MiB", str(g.numa_node), str(len(g.nvlink_remote))])
    lines += _table(rows)
    spans = _same_link_spans(cfg)
    if spans:
        lines += ["", "NVLink remotes (links per remote PCI device):"]
        lines += _table([[f"GPU{a}" if a == b else f"GPU{a}-{b}", text] for a, b, text in spans])
    return "\n".join(lines) + "\n"
