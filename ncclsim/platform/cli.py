"""`ncclsim env` (the environment that puts a process on a simulated host)
and `ncclsim info` (the platform such a process sees)."""

from __future__ import annotations

import argparse
import functools
import sys
from pathlib import Path
from typing import Any, Callable, Mapping, TextIO

from ncclsim import NcclsimError, __version__
from ncclsim.commands import emit_json, int_in
from ncclsim.nccl import wheels
from ncclsim.platform.config import MAX_GPUS, MAX_HOST_INDEX, default_platform, read_platform
from ncclsim.platform.describe import platform_json, platform_text
from ncclsim.platform.env import SimOptions, current_platform, run_host_env, simulation_env
from ncclsim.platform.libraries import Libraries, check_libraries
from ncclsim.platform.models import GpuCatalog, load_models

SCHEMA_VERSION = 1


def register(sub: Any) -> None:
    catalog = load_models()  # its models are in the options' help
    env = sub.add_parser("env", help="print the environment of a simulated host",
                         description='Print `export` lines for `eval "$(ncclsim env)"`: '
                                     "any process started afterwards runs on the simulated host.")
    _add_platform_options(env, catalog, defaults=True)
    env.add_argument("--config-dir", type=Path, metavar="DIR",
                     help="where the platform file is written "
                          "(default $XDG_CACHE_HOME/ncclsim or ~/.cache/ncclsim)")
    env.add_argument("--run", type=Path, metavar="RUN_DIR",
                     help="the simulated host --host of this launch's run directory instead "
                          "(--gpus, --model do not apply): tools such as gpustat or nvitop then "
                          "show its GPUs and the ranks running on them")
    env.set_defaults(func=functools.partial(cmd_env, catalog=catalog))

    info = sub.add_parser("info", aliases=["platform"], help="show the simulated platform",
                          description="Show the simulated host and its GPUs: by default what a "
                                      "process started in this environment sees "
                                      "($NCCLSIM_PLATFORM, else the built-in default).")
    _add_platform_options(info, catalog, defaults=False)
    info.add_argument("--platform", type=Path, metavar="FILE",
                      help="show this platform file")
    info.set_defaults(func=functools.partial(cmd_info, catalog=catalog))


def _model_key(catalog: GpuCatalog) -> Callable[[str], str]:
    def parse(text: str) -> str:
        try:
            return catalog.get(text).key
        except NcclsimError as e:
            raise argparse.ArgumentTypeError(str(e)) from None
    return parse


def _add_platform_options(p: argparse.ArgumentParser, catalog: GpuCatalog,
                          defaults: bool) -> None:
    p.add_argument("--gpus", type=int_in(1, MAX_GPUS), default=8 if defaults else None,
                   metavar="N", help=f"GPUs on the host, 1..{MAX_GPUS} (default 8)")
    p.add_argument("--model", type=_model_key(catalog), default="h100" if defaults else None,
                   help=f"GPU model: {', '.join(catalog.keys())} (default h100)")
    p.add_argument("--host", type=int_in(0, MAX_HOST_INDEX), default=0 if defaults else None,
                   metavar="INDEX", help="index of the simulated host (default 0)")
    p.add_argument("--json", action="store_true", help="print JSON instead of text")


def cmd_env(args: argparse.Namespace, environ: Mapping[str, str], out: TextIO,
            catalog: GpuCatalog) -> int:
    if args.run:
        sim = run_host_env(args.run, args.host, environ)
    else:
        sim = simulation_env(SimOptions(args.gpus, args.model, args.host, args.config_dir),
                             environ, wheels.default(environ, wheels.announce(sys.stderr)).lib_dir, catalog)
    if args.json:
        emit_json(out, {"env": dict(sim.variables), "unset": list(sim.unset),
                        "platform_file": str(sim.platform_file),
                        "platform": platform_json(sim.platform, catalog)}, SCHEMA_VERSION)
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
    libs = check_libraries(wheels.default(environ, wheels.announce(sys.stderr)).lib_dir)
    if args.json:
        emit_json(out, {"source": source, "platform": platform_json(cfg, catalog),
                        "libraries": libs.to_json()}, SCHEMA_VERSION)
    else:
        out.write(f"ncclsim {__version__}: simulated platform from {source}\n"
                  + platform_text(cfg, catalog) + _libraries_text(libs))
    return 0
