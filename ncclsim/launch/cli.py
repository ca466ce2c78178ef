"""Arguments of `ncclsim launch`."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any, Optional

from ncclsim import NcclsimError
from ncclsim.commands import add_command
from ncclsim.launch.options import CLOCKS, LaunchError, LaunchOptions
from ncclsim.sizes import parse_size
from ncclsim.rundir import TOPO_SPEC
from ncclsim.topology import topo_option


def register(sub: Any) -> None:
    add_command(sub, "launch", "run a program as ranks of simulated hosts (over MPI)",
                "Simulate H hosts of G GPUs on this machine and run CMD (default: the built-in probe) as "
                "their ranks through mpiexec; logs, NCCL's dumps and the report go to the run directory.",
                add_arguments, lambda args, environ, out: execute(args))


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--hosts", type=int, default=2, metavar="H", help="simulated hosts (default 2)")
    p.add_argument("--gpus", type=int, metavar="G", help="GPUs per host (default: the preset's, 8)")
    hosts_are = p.add_mutually_exclusive_group()
    hosts_are.add_argument("--preset", help="cluster preset or spec file (default dgx-h100)")
    topo_option.add_arguments(hosts_are, f"{TOPO_SPEC} in the run directory")
    topo_option.add_gpu_model(p)
    p.add_argument("--nics", type=int, metavar="N", help="NICs per host (default: the preset's)")
    p.add_argument("--collnet", action="store_true", default=None,
                   help="the network's switches reduce (SHARP-like): the simulated NICs offer CollNet, "
                        "which NCCL uses with NCCL_COLLNET_ENABLE=1 (default: as the preset says)")
    p.add_argument("--clock", choices=CLOCKS, default="wall",
                   help="the time the ranks' programs read: 'wall' (default: the emulation's own) or 'model' "
                        "(what the simulated cluster would take: clock reads, CUDA events and so nccl-tests' "
                        "and the probe's times, and each NCCL kernel's time in the report)")
    p.add_argument("--timeline", action="store_true",
                   help="with --clock model: also record every step of NCCL's kernels per channel in the "
                        "ranks' timelines (the report merges them into timeline.json, a trace for "
                        "ui.perfetto.dev or chrome://tracing; kernels are always recorded)")
    p.add_argument("--no-payload", action="store_true",
                   help="keep NCCL's protocol and modelled time but move no data: the program's buffers "
                        "are never read or written, so large sizes fit in memory; results are not checked")
    p.add_argument("--gpus-per-process", type=int, default=1, metavar="N",
                   help="GPUs each rank process drives: 1 (default) or all of its host")
    p.add_argument("--timeout", type=float, default=0.0, metavar="S",
                   help="stop every rank after S seconds, naming the ones still running (default: none)")
    p.add_argument("--keep-free", metavar="SIZE",
                   help="stop every rank, saying so, when this machine's memory available plus free swap "
                        "falls below SIZE (e.g. 2G; default: 5%% of its memory, at least 1G; 0: never), "
                        "rather than leave the run to the kernel's out-of-memory killer")
    p.add_argument("--nccl", default="installed", metavar="SPEC",
                   help="the NCCL release the ranks load: 'installed' (default, the wheel installed with "
                        "ncclsim), or a PyPI release such as 2.27.7 or cu13:2.32.3, fetched once into "
                        "ncclsim's cache")
    p.add_argument("--hostfile", type=Path, metavar="FILE",
                   help="spread the simulation over the real machines of this MPI hostfile (one name "
                        "per line), whole simulated hosts per machine; ncclsim, the run directory and "
                        "the command must be at the same paths on every machine (see launch/)")
    p.add_argument("--interface", metavar="IF",
                   help="network interface for NCCL's bootstrap and the simulated NICs' traffic "
                        "(NCCL_SOCKET_IFNAME syntax; default: lo on one machine, NCCL's choice with "
                        "--hostfile)")
    p.add_argument("--mpiexec-arg", action="append", default=[], metavar="ARG", dest="mpiexec_args",
                   help="pass ARG to mpiexec (repeat for several, e.g. --mpiexec-arg=-launcher "
                        "--mpiexec-arg=ssh)")
    p.add_argument("--run-dir", type=Path, metavar="DIR",
                   help="where logs, dumps and the report go (default ncclsim-runs/<time>-<H>x<G>)")
    p.add_argument("command", nargs=argparse.REMAINDER,
                   help="-- CMD ARGS...: the program every rank runs, unchanged "
                        "(default: the built-in probe, AllReduce of 8 B to 16 MiB, results checked; "
                        "with many GPUs its largest sizes are left out until its buffers take at most "
                        "a quarter of the memory available, and sizes after the second once less than a "
                        "quarter of it is left)")


def options(args: argparse.Namespace) -> LaunchOptions:
    command = list(args.command)
    if command and command[0] == "--":
        command = command[1:]
    if args.command and not command:
        raise LaunchError("missing command after `--`")
    topo_option.check(args.topo, args.gpu_model)
    return LaunchOptions(hosts=args.hosts, gpus=args.gpus, preset=args.preset or "dgx-h100", topo=args.topo, gpu_model=args.gpu_model,
                         nics=args.nics, collnet=args.collnet,
                         gpus_per_process=args.gpus_per_process, timeout=args.timeout,
                         run_dir=args.run_dir, command=tuple(command), nccl=args.nccl,
                         hostfile=args.hostfile, interface=args.interface,
                         mpiexec_args=tuple(args.mpiexec_args), clock=args.clock,
                         timeline=args.timeline, no_payload=args.no_payload,
                         keep_free=_keep_free(args.keep_free))


def _keep_free(text: Optional[str]) -> Optional[int]:
    if text is None:
        return None
    try:
        return 0 if text.strip() == "0" else parse_size(text)
    except NcclsimError as e:
        raise LaunchError(f"--keep-free: {e}") from None


def execute(args: argparse.Namespace) -> int:
    # Loaded here, not with every `ncclsim` command (the cluster, XML and report code: ~0.1 s).
    from ncclsim.launch.launcher import launch
    return launch(options(args))
