"""PCI bus ids and GPU UUIDs in the textual forms NCCL, NVML and the platform file use."""

from __future__ import annotations

import re
from dataclasses import dataclass

from ncclsim import NcclsimError

# "0000:18:00.0"; NVML's 8-digit domain is accepted too (fc_pci_parse does the same).
_BUS_ID = re.compile(r"^([0-9a-fA-F]{1,8}):([0-9a-fA-F]{1,2}):([0-9a-fA-F]{1,2})\.([0-7])$")
_UUID_HEX = re.compile(r"^[0-9a-fA-F]{32}$")


class PciFormatError(NcclsimError, ValueError):
    pass


@dataclass(frozen=True, order=True)
class PciAddress:
    domain: int
    bus: int
    device: int = 0
    function: int = 0

    def __post_init__(self) -> None:
        if not (0 <= self.domain <= 0xFFFF and 0 <= self.bus <= 0xFF
                and 0 <= self.device <= 0x1F and 0 <= self.function <= 7):
            raise PciFormatError(f"PCI address out of range: {self.domain:#x}:{self.bus:#x}:"
                                 f"{self.device:#x}.{self.function}")

    def __str__(self) -> str:
        # Lowercase, the form NCCL looks up.
        return f"{self.domain:04x}:{self.bus:02x}:{self.device:02x}.{self.function:x}"

    @classmethod
    def parse(cls, text: str) -> PciAddress:
        m = _BUS_ID.match(text.strip())
        if not m or int(m.group(3), 16) > 0x1F:
            raise PciFormatError(f"bus id must look like 0000:18:00.0, got {text!r}")
        domain, bus, device, function = (int(g, 16) for g in m.groups())
        return cls(domain & 0xFFFF, bus, device, function)


def format_uuid(raw: bytes) -> str:
    """16 bytes -> "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx"."""
    if len(raw) != 16:
        raise PciFormatError(f"a GPU UUID has 16 bytes, got {len(raw)}")
    h = raw.hex()
    return f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def parse_uuid(text: str) -> bytes:
    """Inverse of format_uuid; the "GPU-" prefix and dashes are optional."""
    s = text.strip()
    if s.startswith("GPU-"):
        s = s[4:]
    s = s.replace("-", "")
    if not _UUID_HEX.match(s):
        raise PciFormatError(f"uuid must be 32 hex digits (GPU-xxxxxxxx-...), got {text!r}")
    return bytes.fromhex(s)
