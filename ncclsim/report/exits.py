"""How the run's processes ended: a run whose ranks did not all exit 0 (one
crashed or was killed, the launch timed out, was stopped or stopped the ranks
when memory ran low) must not report that every check passed, however
complete NCCL's logs look."""

from __future__ import annotations

from typing import Any, Optional, Sequence

from ncclsim.report.model import Check, RankInfo
from ncclsim.stop_signals import name as signal_name
from ncclsim.report.summary import rank_ranges

CHECK_NAME = "every rank exited with status 0"


def _how(status: Optional[int]) -> str:
    if status is None:
        return "did not finish"
    if status > 128:
        return f"killed by {signal_name(status - 128)}"
    return f"exited with status {status}"


def exit_check(launch: Optional[dict[str, Any]], ranks: Sequence[RankInfo]) -> Optional[Check]:
    """From launch.json when there is one, else from the exit files beside the
    logs; None when neither says how the ranks ended."""
    if launch is not None and isinstance(launch.get("ranks"), list):
        statuses = {r.get("rank"): r.get("status") for r in launch["ranks"] if isinstance(r, dict)}
        problems = []
        if launch.get("stopped_by_signal"):
            problems.append(f"the launch was stopped by {signal_name(int(launch['stopped_by_signal']))}")
        if launch.get("timed_out"):
            problems.append("the launch timed out")
        if launch.get("memory_low"):
            problems.append("the launch stopped the ranks: memory ran low")
        # The memory guard's own kills are what "memory ran low" says already.
        killed = [] if launch.get("memory_low") else [r for r in launch.get("wrappers_killed") or []
                                                       if isinstance(r, int)]
        if killed:
            problems.append(f"rank(s) {rank_ranges(sorted(killed))}: process killed from outside")
    else:
        statuses = {r.rank: r.exit_status for r in ranks if r.exit_status is not None}
        problems = []
        if not statuses:
            return None
    by_how: dict[str, list[int]] = {}
    for rank, status in sorted((r, s) for r, s in statuses.items() if isinstance(r, int)):
        if status != 0:
            by_how.setdefault(_how(status), []).append(rank)
    problems += [f"rank(s) {rank_ranges(rs)} {how}" for how, rs in by_how.items()]
    if problems:
        return Check(CHECK_NAME, False, "; ".join(problems))
    return Check(CHECK_NAME, True, f"{len(statuses)} rank(s)")
