"""`ncclsim sweep`: run `launch` over every combination of presets, host
counts, GPU counts, NCCL releases and settings; print a table, write JSON and
CSV, and fail when a run fails or breaks an expectation."""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any, Mapping, Optional, TextIO

from ncclsim import rundir, stop_signals
from ncclsim.cluster.presets import DEFAULT_PRESET, load_preset
from ncclsim.commands import add_command
from ncclsim.launch.options import CLOCKS, check_environment
from ncclsim.nccl import wheels
from ncclsim.sweep import expect, matrix, output
from ncclsim.sweep.metrics import METRICS
from ncclsim.sweep.runner import Outcome, Stop, run_all
from ncclsim.topology import topo_option


DEFAULT_OUT = Path("ncclsim-sweeps")


def register(sub: Any) -> None:
    add_command(sub, "sweep", "run launch over shapes, NCCL releases and settings (for CI)",
                "Run `ncclsim launch` for every combination of presets, host and GPU counts, NCCL releases "
                "and settings; print a table (and JSON/CSV) of what NCCL built in each; exit 1 when a run "
                "fails or an --expect does not hold.",
                add_arguments, lambda args, environ, out: execute(args, environ, out))


def add_arguments(p: argparse.ArgumentParser) -> None:
    hosts_are = p.add_mutually_exclusive_group()
    hosts_are.add_argument("--preset", metavar="P1,P2", help=f"cluster presets or spec files (default {DEFAULT_PRESET})")
    topo_option.add_arguments(hosts_are, f"{rundir.TOPO_SPEC} in --out")
    topo_option.add_gpu_model(p)
    p.add_argument("--hosts", default="2", metavar="H1,H2", help="simulated hosts (default 2)")
    p.add_argument("--gpus", default="", metavar="G1,G2", help="GPUs per host (default: the preset's)")
    p.add_argument("--nccl", default="installed", metavar="V1,V2",
                   help="NCCL releases: 'installed' or PyPI releases such as 2.27.7, cu13:2.32.3; each "
                        "is fetched once into the cache before anything runs")
    p.add_argument("--env", action="append", default=[], metavar="NAME=V1,V2",
                   help="a setting the ranks get, with the values to try (repeatable), e.g. "
                        "--env NCCL_ALGO=Ring,Tree")
    p.add_argument("--expect", action="append", default=[], metavar="EXPR",
                   help="NAME OP VALUE that every run must satisfy (repeatable), e.g. 'nNodes==2', "
                        "'channels>=16', 'inter_transport==NET'; NAME: " + ", ".join(METRICS) + ". With "
                        "--clock model also a modelled timing, FIELD(COLLECTIVE,SIZE) OP NUMBER: "
                        "'busbw(AllReduce,128M)>=300', 'algbw(AllGather,1G)>100' (GB/s), "
                        "'time(AllReduce,8)<=20' (us); SIZE as nccl-tests' size column, K/M/G binary")
    p.add_argument("--clock", choices=CLOCKS, default="wall",
                   help="launch --clock of every run (default wall; model: modelled times and timings)")
    p.add_argument("--jobs", type=int, default=0, metavar="N",
                   help="runs at a time (default: 1 per 4 CPUs, at least 1)")
    p.add_argument("--timeout", type=float, default=600.0, metavar="S",
                   help="launch --timeout of every run (default 600 s; 0: none)")
    p.add_argument("--out", type=Path, metavar="DIR",
                   help=f"where each run's directory and sweep.json go (default {DEFAULT_OUT}/<time>)")
    p.add_argument("--json", type=Path, metavar="FILE", help="also write the results as JSON here")
    p.add_argument("--csv", type=Path, metavar="FILE", help="write the results as CSV here")
    p.add_argument("command", nargs=argparse.REMAINDER,
                   help="-- CMD ARGS...: what every run runs (default: launch's built-in probe)")


def _points(args: argparse.Namespace, spec: Path) -> list[matrix.Point]:
    if args.topo:
        presets = [str(spec)]  # checked by its import
    else:
        presets = matrix.split_list(args.preset or DEFAULT_PRESET, "--preset")
        for name in presets:
            load_preset(name)  # a bad preset or spec stops the sweep before anything runs
    gpus: list[Optional[int]] = list(matrix.int_list(args.gpus, "--gpus")) if args.gpus.strip() else [None]
    releases = matrix.split_list(args.nccl, "--nccl")
    for spec in releases:
        if spec != "installed":
            wheels.parse_spec(spec)
    env = [matrix.env_axis(e) for e in args.env]
    return matrix.points(presets, matrix.int_list(args.hosts, "--hosts"), gpus, releases, env)


def _fetch_releases(points: list[matrix.Point], err: TextIO) -> None:
    """Each release once, before any run: one that does not exist stops the sweep here."""
    for spec in dict.fromkeys(p.nccl for p in points):
        wheels.build(spec, notify=wheels.announce(err, "ncclsim sweep"))


def execute(args: argparse.Namespace, environ: Mapping[str, str] = os.environ, out: TextIO = sys.stdout,
            err: TextIO = sys.stderr) -> int:
    if args.out:
        return _execute(args, args.out, environ, out, err)
    # A directory of its own, named after the time, made before the checks
    # because the runs' paths name it; taken back if they stop the sweep.
    out_dir = rundir.new_dir(DEFAULT_OUT, time.strftime("%Y%m%d-%H%M%S"))
    try:
        return _execute(args, out_dir, environ, out, err)
    finally:
        rundir.remove_if_empty(out_dir)


def _execute(args: argparse.Namespace, out_dir: Path, environ: Mapping[str, str], out: TextIO, err: TextIO) -> int:
    spec = out_dir / rundir.TOPO_SPEC
    topo_option.check(args.topo, args.gpu_model)
    spec_text = topo_option.imported(args.topo, spec, args.gpu_model).text if args.topo else None  # checked before anything is written
    points = _points(args, spec)
    if points:  # what launch would refuse in every run (every point sets the same names), refused once
        check_environment({**environ, **dict(points[0].env)})
    expectations = [expect.parse(e) for e in args.expect]
    timed = expect.needs_model_clock(expectations)
    if timed and args.clock != "model":
        raise matrix.SweepError(f"--expect {timed[0]!r}: modelled timings need --clock model")
    command = list(args.command)
    if command and command[0] == "--":
        command = command[1:]
    if args.command and not command:
        raise matrix.SweepError("missing command after `--`")
    if args.jobs < 0:
        raise matrix.SweepError(f"--jobs must be 1 or more, got {args.jobs}")
    jobs = args.jobs or max(1, (os.cpu_count() or 1) // 4)
    _fetch_releases(points, err)
    out_dir.mkdir(parents=True, exist_ok=True)
    if spec_text is not None:
        spec.write_text(spec_text)
    err.write(f"ncclsim sweep: {len(points)} run(s), {jobs} at a time; runs in {out_dir}\n")

    def progress(done: int, o: Outcome) -> None:
        state = o.result if o.result == "ok" else o.result.upper()
        err.write(f"ncclsim sweep: [{done}/{len(points)}] {o.point.name}: {state} in {o.wall:.1f} s\n")
        err.flush()

    stop = Stop()
    outcomes = run_all(points, out_dir, jobs, args.timeout, command, environ, expectations, stop, progress,
                       launch_args=("--clock", args.clock) if args.clock != "wall" else ())
    out.write(output.table(outcomes))
    axes = {"preset": args.preset or DEFAULT_PRESET, "topo": args.topo, "hosts": args.hosts, "gpus": args.gpus,
            "nccl": args.nccl, "env": args.env, "expect": args.expect, "clock": args.clock, "command": command}
    doc = output.to_json(outcomes, axes)
    output.write_json(out_dir / "sweep.json", doc)
    if args.json:
        output.write_json(args.json, doc)
    if args.csv:
        output.write_csv(args.csv, outcomes)
    violations = [f"{o.point.name}: {v}" for o in outcomes for v in o.violations]
    failed = [o for o in outcomes if not o.ok]
    for v in violations:
        err.write(f"ncclsim sweep: expectation not met: {v}\n")
    for o in failed:
        err.write(f"ncclsim sweep: {o.point.name} failed: {o.error}; run directory {o.run_dir}\n")
    err.write(f"ncclsim sweep: {len(outcomes) - len(failed)}/{len(outcomes)} run(s) ok, "
              f"{len(violations)} expectation(s) not met; results in {out_dir / 'sweep.json'}\n")
    if stop.signum is not None:
        err.write(f"ncclsim sweep: stopped by {stop_signals.name(stop.signum)}\n")
        return 128 + stop.signum
    return 1 if failed or violations else 0
