"""`--expect` checked on every point of a sweep: `NAME OP VALUE` on a run's
metrics (e.g. `nNodes==2`, `channels>=16`, `inter_transport==NET`), or
`FIELD(COLLECTIVE,SIZE) OP NUMBER` on its modelled timings (--clock model):
`busbw(AllReduce,128M)>=300` and `algbw(AllGather,1G)>100` in GB/s,
`time(AllReduce,8)<=20` in microseconds. SIZE is nccl-tests' size, in bytes
or with a K/M/G suffix (binary, as nccl-tests' -b/-e); the collective's name
is not case-sensitive."""

from __future__ import annotations

import operator
import re
from dataclasses import dataclass
from typing import Callable, Optional, Union

from ncclsim import NcclsimError
from ncclsim.report.timings import COLLECTIVES
from ncclsim.sizes import human_bytes, parse_size
from ncclsim.sweep.matrix import SweepError
from ncclsim.sweep.metrics import METRICS, TIMINGS, Value

_OPS: dict[str, Callable[[object, object], bool]] = {
    "==": operator.eq, "!=": operator.ne, ">=": operator.ge, "<=": operator.le, ">": operator.gt,
    "<": operator.lt}
_OP = r"\s*(==|!=|>=|<=|>|<)\s*"
_EXPR = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_]*)" + _OP + r"(.+?)\s*$")
_TIMING_EXPR = re.compile(r"^\s*([A-Za-z_]+)\s*\(\s*([A-Za-z]+)\s*,\s*([^),\s]+)\s*\)" + _OP + r"(.+?)\s*$")

# FIELD of a timing expectation -> (the timings' key, its unit)
TIMING_FIELDS = {"busbw": ("busbw_GBps", "GB/s"), "algbw": ("algbw_GBps", "GB/s"), "time": ("time_us", "us")}


@dataclass(frozen=True)
class Expectation:
    text: str
    name: str
    op: str
    value: str

    def violation(self, metrics: dict[str, Value]) -> Optional[str]:
        """None when it holds, else what was found instead."""
        if self.name not in metrics:
            return f"{self.text}: {self.name} is unknown for this run (it did not get that far)"
        got = metrics[self.name]
        if isinstance(got, list):  # every element must satisfy it (and there must be some)
            ok = bool(got) and all(self._holds(g) for g in got)
        else:
            ok = self._holds(got)
        return None if ok else f"{self.text}: {self.name} is {_show(got)}"

    def _holds(self, got: object) -> bool:
        want: object = self.value
        if isinstance(got, (int, float)):
            try:
                want = float(self.value)
            except ValueError:
                return False
        return _OPS[self.op](got, want)


@dataclass(frozen=True)
class TimingExpectation:
    """FIELD(COLLECTIVE,SIZE) OP NUMBER on the timings of that collective and
    size (every one of them, when several algorithms or types ran it)."""
    text: str
    field: str  # a key of TIMING_FIELDS
    collective: str  # NCCL's spelling
    nbytes: int
    op: str
    value: float

    def violation(self, metrics: dict[str, Value]) -> Optional[str]:
        timings = [t for t in metrics.get(TIMINGS) or [] if isinstance(t, dict)]
        if not timings:
            return f"{self.text}: the run has no modelled timings (they need --clock model)"
        same = [t for t in timings if t.get("collective") == self.collective]
        if not same:
            there = ", ".join(dict.fromkeys(str(t.get("collective")) for t in timings))
            return f"{self.text}: the run timed no {self.collective} (it timed {there})"
        found = [t for t in same if t.get("bytes") == self.nbytes]
        if not found:
            sizes = ", ".join(human_bytes(n) for n in sorted({int(t.get("bytes", 0)) for t in same}))
            return f"{self.text}: no {self.collective} timing at {human_bytes(self.nbytes)} (sizes timed: {sizes})"
        key, unit = TIMING_FIELDS[self.field]
        got = [t.get(key) for t in found]
        if all(isinstance(g, (int, float)) and _OPS[self.op](g, self.value) for g in got):
            return None
        shown = ", ".join(f"{g} {unit} ({t.get('algorithm')}/{t.get('protocol')})" for g, t in zip(got, found))
        return f"{self.text}: {self.field} is {shown}"


AnyExpectation = Union[Expectation, TimingExpectation]


def _show(v: Value) -> str:
    return ",".join(map(str, v)) if isinstance(v, list) else str(v)


def _collective(name: str, text: str) -> str:
    known = {c.lower(): c for c in COLLECTIVES}
    if name.lower() not in known:
        raise SweepError(f"--expect {text!r}: unknown collective {name!r}; known: {', '.join(COLLECTIVES)}")
    return known[name.lower()]


def _timing(m: "re.Match[str]", text: str) -> TimingExpectation:
    field, coll, size, op, value = m.groups()
    if field not in TIMING_FIELDS:
        raise SweepError(f"--expect {text!r}: unknown timing {field!r}; known: {', '.join(TIMING_FIELDS)}")
    try:
        nbytes = parse_size(size)
        number = float(value)
    except NcclsimError as e:
        raise SweepError(f"--expect {text!r}: {e}") from None
    except ValueError:
        raise SweepError(f"--expect {text!r}: {value!r} is not a number") from None
    return TimingExpectation(text.strip(), field, _collective(coll, text), nbytes, op, number)


def parse(text: str) -> AnyExpectation:
    timing = _TIMING_EXPR.match(text)
    if timing:
        return _timing(timing, text)
    m = _EXPR.match(text)
    if not m:
        raise SweepError(f"--expect {text!r}: expected NAME OP VALUE or FIELD(COLLECTIVE,SIZE) OP NUMBER "
                         f"with OP one of {' '.join(_OPS)}")
    name, op, value = m.groups()
    if name not in METRICS:
        raise SweepError(f"--expect {text!r}: unknown name {name!r}; known: {', '.join(METRICS)}; or a "
                         f"timing, {'|'.join(TIMING_FIELDS)}(COLLECTIVE,SIZE)")
    return Expectation(text.strip(), name, op, value.strip("'\""))


def needs_model_clock(expectations: list[AnyExpectation]) -> list[str]:
    """The expectations that only a --clock model run can meet."""
    return [e.text for e in expectations if isinstance(e, TimingExpectation)]
