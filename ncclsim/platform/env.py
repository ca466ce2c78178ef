"""The environment that puts any process on a simulated host (`ncclsim env`)."""

from __future__ import annotations

import shlex
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Optional

from ncclsim.paths import cudart_lib_dir, default_config_dir, lib_dir
from ncclsim.platform.config import PlatformConfig, default_platform, read_platform, write_platform
from ncclsim.platform.models import GpuCatalog, load_models
from ncclsim.platform.rank_env import NO_PAYLOAD_VARIABLE
from ncclsim import NcclsimError
from ncclsim.rundir import HostFiles, RunDir, host_name

# Hidden GPUs would be hidden by NVIDIA's runtime before our driver is asked.
UNSET_VARIABLES = ("CUDA_VISIBLE_DEVICES",)


@dataclass(frozen=True)
class SimOptions:
    gpus: int = 8
    model: str = "h100"
    host: int = 0
    config_dir: Optional[Path] = None  # None: default_config_dir()


@dataclass(frozen=True)
class SimEnvironment:
    variables: Mapping[str, str]  # to set, in this order
    unset: tuple[str, ...]  # to remove
    platform: PlatformConfig
    platform_file: Path

    def shell(self) -> str:
        """`export`/`unset` lines for `eval "$(ncclsim env)"` in any POSIX shell."""
        lines = [f"export {k}={shlex.quote(v)}" for k, v in self.variables.items()]
        lines += [f"unset {k}" for k in self.unset]
        return "\n".join(lines) + "\n"


def platform_file_name(host: int, gpus: int, model_key: str) -> str:
    return f"platform-h{host}-{gpus}x{model_key}.conf"


def prepend_paths(first: list[Path], existing: str) -> str:
    """`first` then `existing`, without repeating `first` (eval may run twice)."""
    ours = [str(p) for p in dict.fromkeys(first)]
    rest = [p for p in existing.split(":") if p not in ours] if existing else []
    return ":".join(ours + rest)


HOST_PRELOAD = "libncclsim-host.so"

# Many simulated ranks share one machine's memory. glibc raises its mmap
# threshold as large blocks are freed, after which NCCL's large transient
# allocations (the topology search's) stay in each process's heap for good;
# a fixed threshold hands them back (2 x 8 at init: ~90 -> ~40 MB per rank).
# NCCL names its threads only when asked; the host library recognises NCCL's
# proxy ("NCCL Progress") threads by name and lets them sleep while idle
# (fake_cuda/host/idle_wait.c).
# MPICH polls without pause while a rank waits in an MPI call: between
# sizes, nccl-tests' 16 ranks waiting at barriers took the two cores from the
# ranks still working (2 x 8 all_reduce_perf, 8 B to 4 KiB: 72 % of the
# samples in libmpi, 0.6 s per size). Its progress throttle sleeps 1 us
# after this many empty polls (a shared-memory collective's wait polls the
# progress engine), and with heavy yield its yields in other waits are 1 ns
# sleeps; the host library lengthens both while the rank keeps waiting
# (fake_cuda/host/idle_wait.c): 0.2 s per size, waiting ranks ~1 % of a CPU.
MPICH_VARIABLES = {"MPIR_CVAR_CH4_PROGRESS_THROTTLE": "1", "MPIR_CVAR_CH4_PROGRESS_THROTTLE_NO_PROGRESS_COUNT": "16",
                   "MPIR_CVAR_ENABLE_HEAVY_YIELD": "1"}
DEFAULT_VARIABLES = {"MALLOC_MMAP_THRESHOLD_": "65536", "NCCL_SET_THREAD_NAME": "1", **MPICH_VARIABLES}


def default_settings(environ: Mapping[str, str]) -> dict[str, str]:
    """DEFAULT_VARIABLES the user has not set."""
    return {k: v for k, v in DEFAULT_VARIABLES.items() if k not in environ}


CLOCK_VARIABLES = ("NCCLSIM_CLOCK", "NCCLSIM_CLOCK_EPOCH")


def clock_settings(clock: str) -> dict[str, str]:
    """The variables of the ranks' clock: 'wall' (none: the real clocks) or
    'model' (the host library answers the program's clock reads with the
    modelled time, counted from a common epoch: this moment on the real-time
    and the monotonic clocks; fake_cuda/host/modelled_clock.c)."""
    if clock != "model":
        return {}
    return {"NCCLSIM_CLOCK": "model", "NCCLSIM_CLOCK_EPOCH": f"{time.time_ns()},{time.monotonic_ns()}"}


# The modelled timeline (--clock model): every NCCL process writes its kernels,
# and with NCCLSIM_TIMELINE_STEPS=1 its steps, as trace events (JSON lines) to
# NCCLSIM_TIMELINE, the driver putting its pid for %p (as NCCL does in
# NCCL_DEBUG_FILE); the report reads and merges them.
TIMELINE_VARIABLE = "NCCLSIM_TIMELINE"
TIMELINE_STEPS_VARIABLE = "NCCLSIM_TIMELINE_STEPS"
# What `ncclsim launch` decides for all ranks (a caller's own values are dropped).
LAUNCH_VARIABLES = (*CLOCK_VARIABLES, TIMELINE_VARIABLE, TIMELINE_STEPS_VARIABLE, NO_PAYLOAD_VARIABLE)


def timeline_settings(steps: bool) -> dict[str, str]:
    """The variables every rank shares besides its own NCCLSIM_TIMELINE path."""
    return {TIMELINE_STEPS_VARIABLE: "1"} if steps else {}


def payload_settings(no_payload: bool) -> dict[str, str]:
    return {NO_PAYLOAD_VARIABLE: "1"} if no_payload else {}


def with_host_preload(existing: str) -> str:
    """LD_PRELOAD with ncclsim's host library first: the simulated hostname
    (when NCCLSIM_HOSTNAME is set), NCCL's socket polling yielding the CPU,
    its shared-memory zero fills holding no memory, and the modelled clock
    (fake_cuda/host/)."""
    ours = str(lib_dir() / HOST_PRELOAD)
    rest = [p for p in existing.replace(":", " ").split() if p != ours]
    return " ".join([ours, *rest])


def simulation_env(opts: SimOptions, environ: Mapping[str, str], nccl_lib: Path,
                   catalog: Optional[GpuCatalog] = None) -> SimEnvironment:
    """Write the host's platform file and compute the variables that select it;
    `nccl_lib`: the directory of the libnccl.so.2 to load."""
    catalog = catalog or load_models()
    libs = [lib_dir(), nccl_lib, cudart_lib_dir()]  # fail before writing anything
    cfg = default_platform(opts.host, opts.gpus, opts.model, catalog)
    directory = (opts.config_dir or default_config_dir(environ)).expanduser().resolve()
    path = directory / platform_file_name(opts.host, opts.gpus, cfg.gpus[0].model)
    write_platform(cfg, path, catalog)
    variables = {
        "LD_LIBRARY_PATH": prepend_paths(libs, environ.get("LD_LIBRARY_PATH", "")),
        "NCCLSIM_PLATFORM": str(path),
        "NCCL_HOSTID": host_name(opts.host),
        "LD_PRELOAD": with_host_preload(environ.get("LD_PRELOAD", "")),
        **default_settings(environ),
    }
    return SimEnvironment(variables, UNSET_VARIABLES, cfg, path)


def run_host_env(run_dir: Path, host: int, environ: Mapping[str, str]) -> SimEnvironment:
    """The environment of simulated host `host` of a launch's run directory, as
    its ranks have it (hosts/h<i>/env), for tools run beside them: nvidia-smi
    style monitors then see that host's GPUs and the ranks using them."""
    files: HostFiles = RunDir(run_dir).host(host)
    if not files.platform_conf.is_file():
        known = sorted(p.parent.name for p in RunDir(run_dir).hosts_dir.glob("h*/platform.conf"))
        raise NcclsimError(f"--run {run_dir}: no simulated host h{host} there"
                           + (f" (it has {', '.join(known)})" if known else " (not a launch's run directory)"))
    variables = dict(
        word.split("=", 1) for line in files.env.read_text().splitlines()
        for word in shlex.split(line)[1:2] if line.startswith("export "))
    variables["LD_LIBRARY_PATH"] = prepend_paths([lib_dir()], environ.get("LD_LIBRARY_PATH", ""))
    variables["LD_PRELOAD"] = with_host_preload(environ.get("LD_PRELOAD", ""))
    return SimEnvironment(variables, UNSET_VARIABLES, read_platform(files.platform_conf), files.platform_conf)


@dataclass(frozen=True)
class ResolvedPlatform:
    platform: PlatformConfig
    source: str  # file it came from, or "built-in default"


def current_platform(environ: Mapping[str, str],
                     catalog: Optional[GpuCatalog] = None) -> ResolvedPlatform:
    """What a process started with `environ` sees: the same lookup as
    load_once() in fake_cuda/common/platform.c ($NCCLSIM_PLATFORM, else the
    default for the host number at the end of $NCCL_HOSTID)."""
    catalog = catalog or load_models()
    path = environ.get("NCCLSIM_PLATFORM", "")
    if path:
        return ResolvedPlatform(read_platform(Path(path), catalog), path)
    host_id = environ.get("NCCL_HOSTID", "")
    digits = host_id[len(host_id.rstrip("0123456789")):]
    host = int(digits) & 0xFFFF if digits else 0
    return ResolvedPlatform(default_platform(host, catalog=catalog), "built-in default")
