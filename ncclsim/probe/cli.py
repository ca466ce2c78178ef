"""`ncclsim probe` / `python -m ncclsim.probe`: the built-in NCCL workload."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any, Mapping, Optional, TextIO

from ncclsim import NcclsimError
from ncclsim.commands import add_command
from ncclsim.platform.rank_env import launched_gpus_per_process, without_payload
from ncclsim.probe.bindings import load
from ncclsim.probe.check import REDUCTIONS
from ncclsim.probe.workload import OPERATIONS, ProbeOptions, World, launched_by_mpi, run
from ncclsim.sizes import parse_size

# The probe starts once per rank of a launch (hundreds at a time): it imports
# what a rank needs, and what only running it alone needs when it does.

under_mpi = launched_by_mpi

SCHEMA_VERSION = 1


def register(sub: Any) -> None:
    add_command(sub, "probe", "run the built-in NCCL workload (alone or under MPI)",
                "Initialise NCCL over the GPUs of this process (or of every MPI process), run the chosen "
                'operations, destroy. Run it on the simulated platform (`eval "$(ncclsim env)"`).',
                add_arguments, cmd_probe)


def cmd_probe(args: argparse.Namespace, environ: Mapping[str, str], out: TextIO) -> int:
    if "NCCLSIM_PLATFORM" not in environ and not under_mpi(environ):
        # Not on a simulated host yet: run on the default one (as `ncclsim env` sets it up).
        from ncclsim.nccl import wheels
        from ncclsim.platform.env import SimOptions, simulation_env
        from ncclsim.platform.models import load_models
        sim = simulation_env(SimOptions(), environ, wheels.default(environ, wheels.announce(sys.stderr)).lib_dir,
                             load_models())
        child = {k: v for k, v in environ.items() if k not in sim.unset}
        child.update(sim.variables)
        os.execve(sys.executable, [sys.executable, "-m", "ncclsim.probe", *argv_of(args)], child)
    return execute(args)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--ops", default="",
                   help=f"comma-separated operations to run after init: {','.join(OPERATIONS)} "
                        "or 'all' (default: none, initialise and destroy only)")
    p.add_argument("--sizes", default="8,1M", help="comma-separated sizes in bytes, e.g. 8,64K,16M")
    p.add_argument("--gpus-per-process", type=int, default=0, metavar="G",
                   help="GPUs each process drives (default: all when alone; under MPI, launch's "
                        "--gpus-per-process, else 1)")
    p.add_argument("--iters", type=int, default=1, help="repetitions of each operation and size")
    p.add_argument("--warmup", type=int, default=0, metavar="N",
                   help="untimed repetitions before the timed ones (default 0)")
    p.add_argument("--redop", choices=sorted(REDUCTIONS), default="sum",
                   help="the operator of allreduce, reduce and reducescatter (default: sum)")
    p.add_argument("--min-free", metavar="SIZE",
                   help="run a size after the first two only while every machine of the run has at least "
                        "SIZE (e.g. 6G) of memory and swap available; the rest are left out with a note "
                        "(default: every size; launch's default probe: a quarter of what was available "
                        "when it started)")
    p.add_argument("--no-check", action="store_true",
                   help="do not compare each operation's output with what NCCL must compute")
    p.add_argument("--json", type=Path, metavar="FILE", help="write the result (rank 0) as JSON")


def argv_of(args: argparse.Namespace) -> list[str]:
    """The command line that gives `args` again (to re-run the probe elsewhere)."""
    argv = ["--ops", args.ops, "--sizes", args.sizes, "--gpus-per-process", str(args.gpus_per_process),
            "--iters", str(args.iters), "--warmup", str(args.warmup), "--redop", args.redop]
    argv += ["--min-free", args.min_free] if args.min_free is not None else []
    argv += ["--no-check"] if args.no_check else []
    return argv + (["--json", str(args.json.resolve())] if args.json else [])


def _floor(text: Optional[str]) -> int:
    try:
        return parse_size(text) if text is not None else 0
    except NcclsimError as e:
        raise NcclsimError(f"--min-free: {e}") from None


def options(args: argparse.Namespace, environ: Mapping[str, str] = os.environ) -> ProbeOptions:
    """Without payload (launch --no-payload) no result exists to check."""
    ops = tuple(o.strip().lower() for o in args.ops.split(",") if o.strip())
    if ops == ("all",):
        ops = OPERATIONS
    unknown = [o for o in ops if o not in OPERATIONS]
    if unknown:
        raise NcclsimError(f"unknown operation(s) {', '.join(unknown)}: choose from {', '.join(OPERATIONS)}")
    if args.gpus_per_process < 0 or args.iters < 1 or args.warmup < 0:
        raise NcclsimError("--gpus-per-process must be >= 0, --iters >= 1 and --warmup >= 0")
    sizes = tuple(parse_size(s) for s in args.sizes.split(",") if s.strip())
    return ProbeOptions(ops, sizes or (8,), args.gpus_per_process, args.iters, warmup=args.warmup,
                        check=not args.no_check and not without_payload(environ), redop=args.redop,
                        mpi_gpus_per_process=launched_gpus_per_process(environ) or 1, min_free=_floor(args.min_free))


def execute(args: argparse.Namespace) -> int:
    opts = options(args)  # usage errors before MPI starts
    world = World()
    prefix = f"ncclsim probe: rank {world.rank}" if world.size > 1 else "ncclsim probe"

    def log(line: str) -> None:
        if world.rank == 0:
            print(f"ncclsim probe: {line}", flush=True)

    if not args.no_check and not opts.check:
        log("results not checked: no payload moves (launch --no-payload), only NCCL's protocol and "
            "modelled time")
    try:
        result = run(load(), opts, world, log)
    except NcclsimError as e:
        print(f"{prefix}: {e}", file=sys.stderr, flush=True)
        world.abort(1)
        return 1
    except Exception:
        if world.size > 1:  # a defect of the probe: its traceback, then the run ends
            import traceback
            traceback.print_exc()
            world.abort(1)
        raise
    if world.rank == 0 and args.json:
        args.json.write_text(json.dumps({"schema_version": SCHEMA_VERSION, **result.to_json()}, indent=1))
    return 0


def main(argv: Optional[list[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="ncclsim probe", description=__doc__)
    add_arguments(p)
    args = p.parse_args(argv)
    try:
        return execute(args)
    except NcclsimError as e:
        print(f"ncclsim probe: {e}", file=sys.stderr)
        return 2
