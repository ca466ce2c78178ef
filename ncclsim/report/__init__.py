"""`ncclsim report`: what NCCL built in a run (rings, trees, transports, tuning), from its logs and dumps."""

from __future__ import annotations

from ncclsim.report.build import build_report, write_run_json
from ncclsim.report.model import SCHEMA_VERSION, Report
from ncclsim.report.summary import summary_text

__all__ = ["SCHEMA_VERSION", "Report", "build_report", "summary_text", "write_run_json"]
