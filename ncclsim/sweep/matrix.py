"""The points of a sweep: every combination of the values asked for."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from ncclsim import NcclsimError


class SweepError(NcclsimError):
    pass


@dataclass(frozen=True)
class Point:
    preset: str
    hosts: int
    gpus: Optional[int]  # None: the preset's
    nccl: str  # "installed" or a release spec
    env: tuple[tuple[str, str], ...] = field(default=())

    @property
    def name(self) -> str:
        """Short and unique within a sweep; also the point's run directory name."""
        # a spec file by its name (a path would make the run directory a nested one)
        preset = Path(self.preset).stem if self.preset.endswith((".yaml", ".yml")) else self.preset
        parts = [preset, f"{self.hosts}x{self.gpus or 'all'}"]
        if self.nccl != "installed":
            parts.append(f"nccl-{self.nccl.replace(':', '-')}")
        parts += [f"{k}={v}" for k, v in self.env]
        return "_".join(parts)

    def to_json(self) -> dict[str, object]:
        return {"preset": self.preset, "hosts": self.hosts, "gpus": self.gpus, "nccl": self.nccl,
                "env": dict(self.env)}


def split_list(text: str, what: str) -> list[str]:
    values = [v.strip() for v in text.split(",") if v.strip()]
    if not values:
        raise SweepError(f"{what}: no values in {text!r}")
    return values


def int_list(text: str, what: str) -> list[int]:
    """Whole numbers of 1 or more."""
    out = []
    for v in split_list(text, what):
        try:
            n = int(v)
        except ValueError:
            raise SweepError(f"{what}: {v!r} is not a number") from None
        if n < 1:
            raise SweepError(f"{what}: {n} is below 1")
        out.append(n)
    return out


def env_axis(text: str) -> tuple[str, list[str]]:
    """`NAME=v1,v2` -> ("NAME", ["v1", "v2"])."""
    name, sep, values = text.partition("=")
    if not sep or not name or not name.replace("_", "").isalnum():
        raise SweepError(f"--env expects NAME=value1,value2,..., got {text!r}")
    return name, split_list(values, f"--env {name}")


def points(presets: list[str], hosts: list[int], gpus: list[Optional[int]], nccl: list[str],
           env: list[tuple[str, list[str]]]) -> list[Point]:
    """Every combination, in the order the axes were given (presets vary slowest)."""
    env_values = [[(name, v) for v in values] for name, values in env]
    out = []
    for p, h, g, n, *e in itertools.product(presets, hosts, gpus, nccl, *env_values):
        out.append(Point(p, h, g, n, tuple(e)))
    names = [pt.name for pt in out]
    if len(set(names)) != len(names):
        raise SweepError("the sweep repeats a point: give each value once")
    return out
