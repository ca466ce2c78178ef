"""The environment every rank of a run shares; rank.sh adds the host's part."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Mapping, Optional

from ncclsim.launch.cleanup import LAUNCH_PID, RUN_DIR, RUN_ID, SHM
from ncclsim.rundir import RunDir
from ncclsim.paths import cudart_lib_dir, lib_dir, mpi_lib_dir
from ncclsim.platform.env import UNSET_VARIABLES, default_settings, prepend_paths, with_host_preload

NET_PLUGIN = "libnccl-net-ncclsim.so"
LOCAL_SOCKETS = "NCCLSIM_LOCAL_SOCKETS"
# The host library's store of NCCL's identical regions, shared by the ranks on
# a machine: files named after this prefix, removed with the run's other
# shared-memory files ("" turns sharing off).
SHARED_PAGES = "NCCLSIM_SHARED_PAGES"

# NCCL's log subsystems the report reads: rings/trees (INIT, GRAPH), connections
# (P2P, SHM, NET), algorithm choices (TUNING), settings (ENV).
DEBUG_SUBSYS = "INIT,GRAPH,ENV,TUNING,NET,P2P,SHM"


def rank_environment(base: Mapping[str, str], run: RunDir, run_id: str, nccl_lib: Path,
                     connect_at_init: bool, interface: Optional[str] = None,
                     spread: bool = False, nics: bool = True) -> dict[str, str]:
    """`connect_at_init`: every channel connects during init, so an init-only run
    shows every connection (it costs each rank NCCL's proxy buffers: ~70 MB);
    otherwise NCCL connects what a program uses, when it uses it. A value the
    user set wins either way.

    `interface` carries NCCL's bootstrap and the simulated NICs' TCP (the net
    plugin reads NCCL_SOCKET_IFNAME too). Default: loopback on one machine;
    over several (`spread`), the user's NCCL_SOCKET_IFNAME or else NCCL's own
    choice, the first interface that is not loopback.

    `nics`: the hosts have NICs on PCI, which the net plugin simulates. A
    machine without (one Ethernet port that NCCL does not find on PCI) runs
    NCCL's own socket transport, as such a machine does, over `interface`."""
    sim = lib_dir()
    mpi = mpi_lib_dir()  # the MPI of the mpiexec that starts the ranks
    env = {k: v for k, v in base.items() if k not in UNSET_VARIABLES}
    env.update({
        "LD_LIBRARY_PATH": prepend_paths([sim, nccl_lib, cudart_lib_dir(), *([mpi] if mpi else [])],
                                         base.get("LD_LIBRARY_PATH", "")),
        RUN_ID: run_id,
        LAUNCH_PID: str(os.getpid()),  # `ncclsim clean` stops runs whose launch is gone
        RUN_DIR: str(run.root),
        "NCCL_IB_DISABLE": "1",
        "NCCL_RAS_ENABLE": "0",
        "NCCL_MNNVL_ENABLE": "0",
        "NCCL_DEBUG": "INFO",
        "NCCL_DEBUG_SUBSYS": DEBUG_SUBSYS,
        "NCCL_GRAPH_DUMP_FILE": str(run.graph_dump),
    })
    if interface:
        env["NCCL_SOCKET_IFNAME"] = interface
    elif not spread:
        env["NCCL_SOCKET_IFNAME"] = "lo"  # ranks on one machine meet on its loopback
    if not spread and LOCAL_SOCKETS not in base:
        env[LOCAL_SOCKETS] = "1"  # NCCL's TCP within this machine over Unix sockets (the host library)
    if SHARED_PAGES not in base:
        env[SHARED_PAGES] = str(SHM / f"ncclsim-pages-{run_id}")
    if connect_at_init and "NCCL_RUNTIME_CONNECT" not in base:
        env["NCCL_RUNTIME_CONNECT"] = "0"
    env["LD_PRELOAD"] = with_host_preload(base.get("LD_PRELOAD", ""))
    env.update(default_settings(base))
    if (sim / NET_PLUGIN).exists():
        # By name: NCCL loads libnccl-net-<name>.so from LD_LIBRARY_PATH (sim is
        # first there); releases before 2.19 take no path here.
        env["NCCL_NET_PLUGIN"] = NET_PLUGIN[len("libnccl-net-"):-len(".so")]
    env["NCCL_NET"] = "ncclsim" if nics else "Socket"
    return env
