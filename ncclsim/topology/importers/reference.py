"""Values an input may not give, taken from ncclsim's preset of the same GPU
model (dgx-h100 for H100, dgx-a100 for A100, pcie-l40s for L40S, dgx-h200,
dgx-b200; the default preset for a model without one): the CPU,
PCI switch and NIC of the machine those GPUs usually sit in, and its NVSwitch
fabric. Also: which model a GPU is, from its PCI device id or compute
capability."""

from __future__ import annotations

import functools
from collections import Counter
from dataclasses import dataclass
from typing import Any, Hashable, Optional, Sequence

from ncclsim.cluster.presets import (
    DEFAULT_PRESET, CpuSpec, NicSpec, Preset, SwitchSpec, available_presets, load_preset)
from ncclsim.cluster.model import PciIdentity, PciLink
from ncclsim.platform.models import GpuCatalog, GpuModel, load_models

NVIDIA_VENDOR = 0x10DE

# Variants of a catalog model's chip that ncclsim presents as that model (to
# NCCL they differ in memory size and device id): device id -> (name, model key).
VARIANTS: dict[int, tuple[str, str]] = {0x2324: ("H800", "h100"), 0x26B5: ("L40", "l40s")}


@dataclass(frozen=True)
class Reference:
    preset: str
    cpu: CpuSpec
    switch_identity: PciIdentity
    switch_link: PciLink
    nic: NicSpec
    nvlink_split: tuple[int, ...]  # a GPU's NVLinks per NVSwitch; () without NVSwitches


def _first_switch(p: Preset) -> Optional[SwitchSpec]:
    for s in p.sockets:
        if s.switches:
            return s.switches[0]
    return None


@functools.lru_cache(maxsize=None)  # reads every preset; importers ask per GPU
def reference_for(model: str) -> Reference:
    """The preset of `model` (the default preset when it is of that model, else
    the first by name), or of the model whose board it shares (nvlink_board);
    the default preset when none is."""
    catalog = load_models()
    if model in catalog.keys() and catalog.get(model).nvlink_board:
        model = catalog.get(model).nvlink_board
    names = available_presets()
    ordered = ([DEFAULT_PRESET] if DEFAULT_PRESET in names else []) + \
        [n for n in names if n != DEFAULT_PRESET]
    presets = [load_preset(n) for n in ordered]
    chosen = next((p for p in presets if {g.model for g in p.gpus()} == {model}), presets[0])
    switch = _first_switch(chosen)
    nics = chosen.nics()
    if switch is None or not nics:
        raise AssertionError(f"preset {chosen.name} has no PCI switch or NIC to copy")
    gpu = chosen.gpus()[0]
    split: tuple[int, ...] = ()
    if gpu.model == model and gpu.nvlinks and all(t in chosen.nvswitches for t, _ in gpu.nvlinks):
        split = tuple(count for _, count in gpu.nvlinks)
    return Reference(chosen.name, chosen.cpu, switch.identity, switch.link, nics[0], split)


def nvswitch_split(ref: Reference, links: int) -> tuple[int, ...]:
    """How `links` NVLinks of a GPU spread over NVSwitches: as on the reference
    machine when it has that many, else all to one switch (NCCL merges a GPU's
    NVSwitch links into one NVS node anyway)."""
    return ref.nvlink_split if sum(ref.nvlink_split) == links else (links,)


def model_by_device(catalog: GpuCatalog, device: int) -> Optional[tuple[GpuModel, Optional[str]]]:
    """The catalog model with this PCI device id, or the one presenting a known
    variant (with the variant's name, for a note)."""
    for m in catalog:
        if m.pci_device_id == device:
            return m, None
    if device in VARIANTS:
        name, key = VARIANTS[device]
        if key in catalog.keys():
            return catalog.get(key), name
    return None


def model_by_sm(catalog: GpuCatalog, sm: int) -> Optional[GpuModel]:
    """The first catalog model of this compute capability: gpu_models.json lists
    the reference model of each first (h100 for 9.0, a100 for 8.0, l40s for 8.9)."""
    return next((m for m in catalog if m.sm == sm), None)


def most_common(values: Sequence[Hashable]) -> Any:
    return Counter(values).most_common(1)[0][0]
