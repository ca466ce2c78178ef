"""`--expect NAME OP VALUE` (e.g. `nNodes==2`, `channels>=16`,
`inter_transport==NET`), checked on every point of a sweep."""

from __future__ import annotations

import operator
import re
from dataclasses import dataclass
from typing import Callable, Optional

from ncclsim.sweep.matrix import SweepError
from ncclsim.sweep.metrics import METRICS, Value

_OPS: dict[str, Callable[[object, object], bool]] = {
    "==": operator.eq, "!=": operator.ne, ">=": operator.ge, "<=": operator.le, ">": operator.gt,
    "<": operator.lt}
_EXPR = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_]*)\s*(==|!=|>=|<=|>|<)\s*(.+?)\s*$")


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


def _show(v: Value) -> str:
    return ",".join(map(str, v)) if isinstance(v, list) else str(v)


def parse(text: str) -> Expectation:
    m = _EXPR.match(text)
    if not m:
        raise SweepError(f"--expect {text!r}: expected NAME OP VALUE with OP one of {' '.join(_OPS)}")
    name, op, value = m.groups()
    if name not in METRICS:
        raise SweepError(f"--expect {text!r}: unknown name {name!r}; known: {', '.join(METRICS)}")
    return Expectation(text.strip(), name, op, value.strip("'\""))
