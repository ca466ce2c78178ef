"""The `ncclsim` command: simulated multi-host GPU platforms for unmodified NCCL."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any, Callable, Mapping, NoReturn, Optional, TextIO

from ncclsim import NcclsimError, __version__
from ncclsim.platform.config import MAX_GPUS, MAX_HOST_INDEX, default_platform, read_platform
from ncclsim.platform.describe import platform_json, platform_text
from ncclsim.platform.env import SimOptions, current_platform, simulation_env
from ncclsim.platform.libraries import Libraries, check_libraries
from ncclsim.platform.models import GpuCatalog, load_models
from ncclsim.launch import cli as launch_cli
from ncclsim.probe import cli as probe_cli
from ncclsim.report import cli as report_cli
from ncclsim.report import diff as report_diff
from ncclsim.sweep import cli as sweep_cli
from ncclsim.topology import cli as topo_cli

SCHEMA_VERSION = 1


class _Parser(argparse.ArgumentParser):
    """Usage errors as one line and exit 2, like every other ncclsim error."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message}\n")


def _int_in(lo: int, hi: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
        if not lo <= value <= hi:
            raise argparse.ArgumentTypeError(f"must be {lo}..{hi}, got {value}")
        return value
    return parse


def _model_key(catalog: GpuCatalog) -> Callable[[str], str]:
    def parse(text: str) -> str:
        try:
            return catalog.get(text).key
        except NcclsimError as e:
            raise argparse.ArgumentTypeError(str(e)) from None
    return parse


def _add_platform_options(p: argparse.ArgumentParser, catalog: GpuCatalog,
                          defaults: bool) -> None:
    p.add_argument("--gpus", type=_int_in(1, MAX_GPUS), default=8 if defaults else None,
                   metavar="N", help=f"GPUs on the host, 1..{MAX_GPUS} (default 8)")
    p.add_argument("--model", type=_model_key(catalog), default="h100" if defaults else None,
                   help=f"GPU model: {', '.join(catalog.keys())} (default h100)")
    p.add_argument("--host", type=_int_in(0, MAX_HOST_INDEX), default=0 if defaults else None,
                   metavar="INDEX", help="index of the simulated host (default 0)")
    p.add_argument("--json", action="store_true", help="print JSON instead of text")


def _emit_json(out: TextIO, doc: dict[str, Any]) -> None:
    json.dump({"schema_version": SCHEMA_VERSION, **doc}, out, indent=2)
    out.write("\n")


def cmd_env(args: argparse.Namespace, environ: Mapping[str, str], out: TextIO,
            catalog: GpuCatalog) -> int:
    sim = simulation_env(SimOptions(args.gpus, args.model, args.host, args.config_dir),
                         environ, catalog)
    if args.json:
        _emit_json(out, {"env": dict(sim.variables), "unset": list(sim.unset),
                         "platform_file": str(sim.platform_file),
                         "platform": platform_json(sim.platform, catalog)})
    else:
        out.write(sim.shell())
    return 0


def _libraries_text(libs: Libraries) -> str:
    return ("\nlibraries:\n"
            f"  simulator     {libs.simulator_dir}: {', '.join(libs.simulator)}\n"
            f"  NCCL {libs.nccl_version:<8} {libs.nccl}\n"
            f"  CUDA runtime  {libs.cudart}\n")


def cmd_info(args: argparse.Namespace, environ: Mapping[str, str], out: TextIO,
             catalog: GpuCatalog) -> int:
    chosen = [f"--{k} {v}" for k in ("gpus", "model", "host")
              if (v := getattr(args, k)) is not None]
    if args.platform and chosen:
        raise NcclsimError("--platform cannot be combined with --gpus, --model or --host")
    if args.platform:
        cfg, source = read_platform(args.platform, catalog), str(args.platform)
    elif chosen:
        cfg = default_platform(args.host or 0, args.gpus or 8, args.model or "h100", catalog)
        source = "defaults for " + " ".join(chosen)
    else:
        resolved = current_platform(environ, catalog)
        cfg, source = resolved.platform, resolved.source
    libs = check_libraries()
    if args.json:
        _emit_json(out, {"source": source, "platform": platform_json(cfg, catalog),
                         "libraries": libs.to_json()})
    else:
        out.write(f"ncclsim {__version__}: simulated platform from {source}\n"
                  + platform_text(cfg, catalog) + _libraries_text(libs))
    return 0


def cmd_probe(args: argparse.Namespace, environ: Mapping[str, str], out: TextIO,
              catalog: GpuCatalog) -> int:
    if "NCCLSIM_PLATFORM" not in environ and not probe_cli.under_mpi(environ):
        # Not on a simulated host yet: run on the default one (as `ncclsim env` sets it up).
        sim = simulation_env(SimOptions(), environ, catalog)
        child = {k: v for k, v in environ.items() if k not in sim.unset}
        child.update(sim.variables)
        os.execve(sys.executable, [sys.executable, "-m", "ncclsim.probe", *probe_cli.argv_of(args)],
                  child)
    return probe_cli.execute(args)


def cmd_diff(args: argparse.Namespace, environ: Mapping[str, str], out: TextIO, catalog: GpuCatalog) -> int:
    diffs = report_diff.diff_paths(args.a, args.b)
    if args.json:
        out.write(json.dumps(report_diff.to_json(diffs), indent=1) + "\n")
    else:
        out.write(report_diff.to_text(diffs))
    return 1 if any(d.changes for d in diffs) else 0


def build_parser(catalog: GpuCatalog) -> argparse.ArgumentParser:
    parser = _Parser(prog="ncclsim", description=__doc__)
    parser.add_argument("--version", action="version", version=f"ncclsim {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    env = sub.add_parser("env", help="print the environment of a simulated host",
                         description='Print `export` lines for `eval "$(ncclsim env)"`: '
                                     "any process started afterwards runs on the simulated host.")
    _add_platform_options(env, catalog, defaults=True)
    env.add_argument("--config-dir", type=Path, metavar="DIR",
                     help="where the platform file is written "
                          "(default $XDG_CACHE_HOME/ncclsim or ~/.cache/ncclsim)")
    env.set_defaults(func=cmd_env)

    info = sub.add_parser("info", aliases=["platform"], help="show the simulated platform",
                          description="Show the simulated host and its GPUs: by default what a "
                                      "process started in this environment sees "
                                      "($NCCLSIM_PLATFORM, else the built-in default).")
    _add_platform_options(info, catalog, defaults=False)
    info.add_argument("--platform", type=Path, metavar="FILE",
                      help="show this platform file")
    info.set_defaults(func=cmd_info)

    probe = sub.add_parser("probe", help="run the built-in NCCL workload (alone or under MPI)",
                           description="Initialise NCCL over the GPUs of this process (or of every "
                                       "MPI process), run the chosen operations, destroy. Run it "
                                       'on the simulated platform (`eval "$(ncclsim env)"`).')
    probe_cli.add_arguments(probe)
    probe.set_defaults(func=cmd_probe)

    launch = sub.add_parser("launch", help="run a program as ranks of simulated hosts (over MPI)",
                            description="Simulate H hosts of G GPUs on this machine and run CMD "
                                        "(default: the built-in probe) as their ranks through "
                                        "mpiexec; logs, NCCL's dumps and the report go to the "
                                        "run directory.")
    launch_cli.add_arguments(launch)
    launch.set_defaults(func=lambda args, environ, out, catalog: launch_cli.execute(args))

    report = sub.add_parser("report", help="summarise a run directory (rings, trees, transports, ...)",
                            description="Read a run directory's NCCL logs and dumps; print what NCCL "
                                        "built and save it as RUN_DIR/run.json.")
    report_cli.add_arguments(report)
    report.set_defaults(func=lambda args, environ, out, catalog: report_cli.execute(args))

    diff = sub.add_parser("diff", help="what changed between two runs or two sweeps",
                          description="Compare two runs (run directories or run.json) or two sweeps "
                                      "(sweep.json or a sweep's directory, point by point): NCCL "
                                      "version, shape, channels, rings, trees, connections by "
                                      "transport, algorithm and protocol per collective and size. "
                                      "Exit status 0 when nothing changed, 1 otherwise.")
    diff.add_argument("a", type=Path, metavar="A")
    diff.add_argument("b", type=Path, metavar="B")
    diff.add_argument("--json", action="store_true", help="print the differences as JSON")
    diff.set_defaults(func=cmd_diff)

    sweep = sub.add_parser("sweep", help="run launch over shapes, NCCL releases and settings (for CI)",
                           description="Run `ncclsim launch` for every combination of presets, host "
                                       "and GPU counts, NCCL releases and settings; print a table "
                                       "(and JSON/CSV) of what NCCL built in each; exit 1 when a run "
                                       "fails or an --expect does not hold.")
    sweep_cli.add_arguments(sweep)
    sweep.set_defaults(func=lambda args, environ, out, catalog: sweep_cli.execute(args, environ, out))

    topo = sub.add_parser("topo", help="generate, validate, import and draw topologies (presets, NCCL XML)",
                          description="Cluster topologies as files: per-host NCCL topology XML "
                                      "and platform files from a preset, their validation, specs "
                                      "imported from real machines, and pictures.")
    topo_cli.add_arguments(topo)
    topo.set_defaults(func=lambda args, environ, out, catalog: topo_cli.execute(args, out, catalog))
    return parser


def main(argv: Optional[list[str]] = None, environ: Optional[Mapping[str, str]] = None,
         out: Optional[TextIO] = None) -> int:
    try:
        catalog = load_models()
        args = build_parser(catalog).parse_args(argv)
        return int(args.func(args, os.environ if environ is None else environ,
                             out or sys.stdout, catalog))
    except (NcclsimError, OSError) as e:
        print(f"ncclsim: error: {e}", file=sys.stderr)
        return 2
