"""`ncclsim launch`: write the run directory, start the ranks, explain the end."""

from __future__ import annotations

import json
import os
import re
import sys
import time
import uuid
from dataclasses import asdict
from pathlib import Path
from typing import Mapping, Optional, TextIO

from ncclsim import rundir
from ncclsim.launch import rank_script, watchdog
from ncclsim.launch.machines import Placement, place
from ncclsim.launch.memory_guard import MemoryGuard
from ncclsim.launch.rendezvous import Rendezvous
from ncclsim.launch.remote_cleanup import clean_machines
from ncclsim.launch.environment import rank_environment
from ncclsim.launch.options import (PROBE_MEMORY_SHARE, PROBE_SIZES, LaunchError, LaunchOptions, check_environment,
                                    probe_command, probe_sizes, resolve_command)
from ncclsim.launch.supervise import Outcome, RankOutcome, supervise
from ncclsim import NcclsimError
from ncclsim.nccl import wheels
from ncclsim.paths import mpiexec
from ncclsim.platform.env import LAUNCH_VARIABLES, clock_settings, payload_settings, timeline_settings
from ncclsim.report.build import build_report, write_run_json
from ncclsim.report.summary import rank_ranges, summary_text
from ncclsim.meminfo import meminfo, oom_kills, oom_note, room
from ncclsim.sizes import human_bytes
from ncclsim.topology.host_artifacts import write_host_artifacts
from ncclsim.topology.host_summary import HostSummary
from ncclsim.topology import topo_option
from ncclsim.topology.importers import ImportResult
from ncclsim.cluster.build import build_cluster

SCHEMA_VERSION = 1


def _describe_failure(run: rundir.RunDir, outcome: Outcome, placement: Placement, gpus: int) -> list[str]:
    if outcome.memory_low:  # what the ranks did then follows from it: the guard killed them
        fewer = (f"a process per host (--gpus-per-process {gpus}; a program told so too: nccl-tests -g {gpus}) "
                 f"takes less memory than {placement.processes_per_host} per host; "
                 if placement.processes_per_host > 1 else "")
        return [f"ncclsim: {outcome.memory_low}: every rank was stopped; {fewer}README, 'One simulation over "
                "several machines', says what large shapes need"]
    lines = []
    # Ranks that ended alike (a bad argument every rank rejects) make one line: the first
    # rank's, naming the others.
    alike: dict[tuple[str, str], list[RankOutcome]] = {}
    for o in outcome.ranks:
        if o.status not in (None, 0):
            how = f"was killed by signal {o.status - 128}" if o.status > 128 else f"exited with status {o.status}"
            alike.setdefault((how, _last_line(run.rank(o.rank).stderr)), []).append(o)
    for (how, last), group in list(alike.items())[:8]:
        first, others = group[0], [o.rank for o in group[1:]]
        lines.append(f"ncclsim: rank {first.rank} (host {first.host}) {how}"
                     + (f": {last}" if last else "") + f"; logs: {_logs(run.rank(first.rank))}"
                     + (f"; rank(s) {rank_ranges(others)} the same" if others else ""))
    for r, pid in list(outcome.lost.items())[:8]:
        files = run.rank(r)
        lines.append(f"ncclsim: rank {r} (host {outcome.ranks[r].host}): its process "
                     f"({run.rank_script.name}, pid {pid}) was killed before the program ended; "
                     f"logs: {_logs(files)}")
    if outcome.timed_out:
        stuck = [o.rank for o in outcome.ranks if o.status is None]
        lines.append(f"ncclsim: timed out: rank(s) {rank_ranges(stuck)} still running were stopped; "
                     f"logs: {run.rank('<rank>').directory}/")
    elif not alike and not outcome.lost and any(o.status is None for o in outcome.ranks):
        lost = [o.rank for o in outcome.ranks if o.status is None]
        why = _first_line(run.mpiexec_log)
        lines.append(f"ncclsim: rank(s) {rank_ranges(lost)} ended without reporting a status "
                     f"(mpiexec status {outcome.mpiexec_status}"
                     + (f": {why}" if why else "") + f"); see {run.mpiexec_log}")
        if placement.spread and (not why or str(run.root) in why):
            lines.append(f"ncclsim: they never wrote to {run.root}: the run directory (--run-dir) "
                         f"must be on a filesystem every machine of {placement.hostfile} shares")
    return lines


def _logs(files: rundir.RankFiles) -> str:
    """The rank's stderr and NCCL logs (one per NCCL process; the pattern before any exists)."""
    logs = [str(p) for p in files.nccl_logs()[:2]] or [files.nccl_log.replace("%p", "<pid>")]
    return ", ".join([str(files.stderr), *logs])


def _first_line(path: Path) -> str:
    """The first line of a log, without Hydra's `[mpiexec@host] func (file:line): ` prefix."""
    try:
        with open(path, errors="replace") as f:
            for line in f:
                if line.strip():
                    return re.sub(r"^\[mpiexec@[^]]*\] \S+ \([^)]*\): ", "", line.strip())[:300]
    except OSError:
        pass
    return ""


def _last_line(path: Path) -> str:
    try:
        lines = [line for line in path.read_text(errors="replace").splitlines() if line.strip()]
    except OSError:
        return ""
    return lines[-1][:300] if lines else ""


def _over(placement: Placement) -> str:
    if not placement.spread:
        return ""
    return (f" over {len(placement.machines)} machine(s) of {placement.hostfile}, "
            f"{placement.hosts_per_machine} simulated host(s) each")


def _record(run: rundir.RunDir, opts: LaunchOptions, preset: str, run_id: str, started: float,
            gpus: int, nranks: int, mpi_command: list[str], command: tuple[str, ...],
            outcome: Outcome, machines: list[Optional[str]]) -> None:
    """launch.json: what was launched and how every rank ended (the report includes it)."""
    doc = {"schema_version": SCHEMA_VERSION, "run_id": run_id, "started": started, "preset": preset,
           "seconds": round(outcome.seconds, 3), "hosts": opts.hosts, "gpus_per_host": gpus,
           "gpus_per_process": opts.gpus_per_process, "processes": nranks,
           "nccl_ranks": opts.hosts * gpus, "command": list(command), "mpiexec": mpi_command,
           "options": {k: (str(v) if isinstance(v, Path) else v) for k, v in asdict(opts).items()},
           "status": outcome.status, "timed_out": outcome.timed_out, "stopped_by_signal": outcome.stopped_by,
           "memory_low": outcome.memory_low,
           "wrappers_killed": sorted(outcome.lost),
           "initialised": outcome.initialised,
           "ranks": [{"rank": o.rank, "host": o.host, "machine": machines[o.rank], "status": o.status}
                     for o in outcome.ranks],
           "cleanup": {"processes_stopped": len(outcome.killed),
                       "files_removed": [str(p) for p in outcome.leftovers_removed]}}
    run.launch_json.write_text(json.dumps(doc, indent=1))


def _nccl_lib(spec: str, err: TextIO) -> Path:
    """The directory of the libnccl.so.2 the ranks load; a release not cached
    yet is fetched from PyPI first (errors before anything runs)."""
    return wheels.build(spec, notify=wheels.announce(err)).lib_dir


def _say(err: TextIO, line: str) -> None:
    err.write(line + "\n")
    err.flush()


def _imported(opts: LaunchOptions, err: TextIO) -> Optional[ImportResult]:
    """--topo: the file's machine, as `ncclsim topo import` makes it."""
    if not opts.topo:
        return None
    result = topo_option.imported(opts.topo, Path(rundir.TOPO_SPEC), opts.gpu_model)
    notes = f"; {len(result.notes)} note(s) in the run directory's {rundir.TOPO_SPEC}" if result.notes else ""
    err.write(f"ncclsim: --topo {opts.topo} ({result.kind}): {HostSummary.of_host(result.host).text()}{notes}\n")
    return result


def _default_probe(opts: LaunchOptions, placement: Placement, gpus: int, err: TextIO) -> tuple[str, ...]:
    """The default probe: sizes whose buffers this machine's memory holds (said
    when cut), and the floor of memory below which it leaves out the rest."""
    fields = meminfo()
    available = fields.get("MemAvailable")
    sizes = PROBE_SIZES
    if not opts.no_payload and available is not None:  # without payload, buffers hold no memory
        gpus_here = placement.hosts_per_machine * gpus
        sizes = probe_sizes(gpus_here, available)
        if sizes != PROBE_SIZES:
            cut = PROBE_SIZES[len(sizes)]
            err.write(f"ncclsim: default probe: AllReduce 8 B to {human_bytes(sizes[-1])}: buffers of "
                      f"{human_bytes(cut)} for {gpus_here} GPUs would take {2 * cut * gpus_here / 1e9:.1f} GB, "
                      f"more than {PROBE_MEMORY_SHARE:.0%} of the {available / 1e9:.1f} GB available\n")
    return probe_command(opts.gpus_per_process, sizes, room(fields))


def launch(opts: LaunchOptions, environ: Mapping[str, str] = os.environ, out: TextIO = sys.stdout,
           err: TextIO = sys.stderr) -> int:
    opts.check()
    check_environment(environ)
    imported = _imported(opts, err)
    cluster = build_cluster(imported.preset if imported else opts.preset, opts.hosts, opts.gpus, opts.nics,
                            collnet=opts.collnet)
    gpus = len(cluster.hosts[0].gpus)
    if gpus % opts.gpus_per_process:
        raise LaunchError(f"--gpus-per-process {opts.gpus_per_process} does not divide the "
                          f"{gpus} GPUs of a host")
    per_host = gpus // opts.gpus_per_process
    nranks = opts.hosts * per_host
    placement = place(opts.hosts, per_host, opts.hostfile)
    command = ((resolve_command(opts.command[0]), *opts.command[1:]) if opts.command
               else _default_probe(opts, placement, gpus, err))
    exe = mpiexec()
    nccl_lib = _nccl_lib(opts.nccl, err)

    memory_guard = MemoryGuard.start(opts.keep_free)  # before anything is made: it may refuse
    run = rundir.create(opts.run_dir or rundir.default_run_dir(opts.hosts, gpus), nranks, opts.hosts)
    if imported:
        run.topo_spec.write_text(imported.text)
    write_host_artifacts(cluster, run.hosts_dir)
    script = rank_script.write(run, per_host, timeline=opts.clock == "model",
                               nccl=nccl_lib / "libnccl.so.2" if opts.nccl != "installed" else None,
                               rendezvous=Rendezvous.of(placement, opts.hosts, opts.gpus_per_process))
    run_id = uuid.uuid4().hex[:12]
    env = rank_environment(environ, run, run_id, nccl_lib, connect_at_init=not opts.command,
                           interface=opts.interface, spread=placement.spread,
                           nics=bool(cluster.hosts[0].nics))
    for k in LAUNCH_VARIABLES:  # the launch's options decide, not the caller's environment
        env.pop(k, None)
    env.update(clock_settings(opts.clock))
    env.update(timeline_settings(opts.timeline))
    env.update(payload_settings(opts.no_payload))
    unit = "ranks" if opts.gpus_per_process == 1 else "processes"
    err.write(f"ncclsim: {opts.hosts} host(s) x {gpus} GPU(s): {opts.hosts * gpus} NCCL ranks in "
              f"{nranks} process(es){_over(placement)}; run directory {run.root}\n")
    guard = watchdog.start(run, run_id)
    started, oom_before = time.time(), oom_kills()
    mpi_command = [str(exe), *placement.mpiexec_args(run), *opts.mpiexec_args, "-n", str(nranks),
                   str(script), *command]
    outcome = supervise(mpi_command, env, run, run_id, nranks, per_host, opts.timeout, out, err, unit,
                        memory_guard)
    out_of_memory = oom_note(oom_before, oom_kills())
    machines = [run.rank(r).machine_name() for r in range(nranks)]  # None: the rank never started
    cleanup_failed = None
    if placement.spread and any(machines):
        cleanup_failed = clean_machines(exe, placement, opts.mpiexec_args, run, run_id, started, environ)
    watchdog.release(guard)
    _record(run, opts, cluster.preset, run_id, started, gpus, nranks, mpi_command, command, outcome, machines)
    # the cause first, then what it did to the ranks
    cause = [f"ncclsim: {out_of_memory}"] if out_of_memory and outcome.status else []
    failure = cause + _describe_failure(run, outcome, placement, gpus)
    for line in failure + ([cleanup_failed] if cleanup_failed else []):
        err.write(line + "\n")
    _print_report(run, out, err, nranks, failed=bool(failure))
    err.write(f"ncclsim: {outcome.initialised}/{nranks} {unit} initialised; finished in "
              f"{outcome.seconds:.1f} s with status {outcome.status}\n")
    return outcome.status


# From this many ranks the report takes seconds (128 x 8: about 20 s, reading
# their logs): say what is going on meanwhile.
REPORT_NOTICE_RANKS = 256


def _print_report(run: rundir.RunDir, out: TextIO, err: TextIO, nranks: int, failed: bool = False) -> None:
    """The run's report (also saved as run.json); a run too broken to report on
    says why, unless its failure, said already, is why (ranks that stopped
    before NCCL wrote anything)."""
    if nranks >= REPORT_NOTICE_RANKS:
        _say(err, f"ncclsim: reading the logs of {nranks} ranks for the report")
    try:
        report = build_report(run.root)
        write_run_json(run.root, report)
    except NcclsimError as e:
        if not failed:
            err.write(f"ncclsim: no report: {e}\n")
        return
    out.write("\n" + summary_text(report))
    out.flush()
