"""Shared fixtures. Tests run against the installed ncclsim; nothing is skipped
when a piece is missing: the test fails and says what is missing."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from dataclasses import dataclass
from typing import Callable, Mapping, Optional

import pytest

import ncclsim.paths
from ncclsim.platform.models import GpuCatalog, load_models

RunCli = Callable[..., "subprocess.CompletedProcess[str]"]


@pytest.fixture(scope="session")
def lib_dir() -> Path:
    """ncclsim's built libraries (libcuda.so.1, libnvidia-ml.so.1, ...)."""
    return ncclsim.paths.lib_dir()


@pytest.fixture(scope="session")
def catalog() -> GpuCatalog:
    return load_models()


@pytest.fixture
def no_sys_pci(tmp_path: Path) -> Path:
    """An empty stand-in for /sys/bus/pci/devices: no real device collides."""
    d = tmp_path / "sys-pci-devices"
    d.mkdir()
    return d


@pytest.fixture(scope="session")
def ncclsim_exe() -> Path:
    """The installed `ncclsim` console script, beside the interpreter running pytest."""
    exe = Path(sys.executable).parent / "ncclsim"
    assert exe.exists(), f"{exe} is missing: install ncclsim (`pip install .`) in this environment"
    return exe


@pytest.fixture
def clean_env(tmp_path: Path) -> dict[str, str]:
    """The caller's environment without simulator variables, with a private cache."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("NCCLSIM_", "NCCL_", "CUDA_"))}
    env["XDG_CACHE_HOME"] = str(tmp_path / "cache")
    return env


@pytest.fixture
def run_cli(ncclsim_exe: Path, clean_env: dict[str, str], tmp_path: Path) -> RunCli:
    """Run `ncclsim ARGS...` outside the source tree; returns the CompletedProcess."""
    def run(*args: str, env: Optional[Mapping[str, str]] = None, timeout: float = 120,
            ) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(ncclsim_exe), *args], cwd=tmp_path, text=True,
                              capture_output=True, env={**clean_env, **(env or {})}, timeout=timeout)
    return run


# ---- simulated platform environments ----

SimEnv = Callable[..., dict[str, str]]


@pytest.fixture
def sim_env(clean_env: dict[str, str], tmp_path: Path, lib_dir: Path) -> SimEnv:
    """Environment of a process on a simulated host: `sim_env(gpus=8, model="h100",
    host=0, nccl_lib=None)` writes the host's platform file and puts ncclsim's
    libraries first, then the chosen NCCL (default: the installed wheel), then
    NVIDIA's runtime."""
    from ncclsim.paths import cudart_lib_dir, nccl_lib_dir
    from ncclsim.platform.config import default_platform, write_platform
    from ncclsim.platform.env import with_host_preload

    def make(gpus: int = 8, model: str = "h100", host: int = 0,
             nccl_lib: Optional[Path] = None) -> dict[str, str]:
        path = tmp_path / f"platform-h{host}-{gpus}x{model}.conf"
        write_platform(default_platform(host, gpus, model), path)
        libs = [lib_dir, nccl_lib or nccl_lib_dir(), cudart_lib_dir()]
        return {**clean_env, "NCCLSIM_PLATFORM": str(path), "NCCL_HOSTID": f"ncclsim-h{host}",
                "LD_LIBRARY_PATH": ":".join(map(str, libs)),
                "LD_PRELOAD": with_host_preload(clean_env.get("LD_PRELOAD", ""))}
    return make


@pytest.fixture(scope="session")
def nccl_build() -> Callable[[str], "object"]:
    """An NCCL release by spec ("installed", "2.21.5", "cu13:2.32.3"), fetched
    from PyPI once into the user's cache (~/.cache/ncclsim/nccl)."""
    from ncclsim.nccl import wheels

    def get(spec: str) -> "wheels.NcclBuild":
        return wheels.build(spec)
    return get


@pytest.fixture(scope="session")
def mpiexec() -> Path:
    """mpiexec of the mpich wheel installed beside the interpreter."""
    exe = Path(sys.executable).parent / "mpiexec"
    assert exe.exists(), f"{exe} is missing: the mpich wheel is a dependency of ncclsim"
    return exe


# ---- nothing left behind ----

class Leftovers:
    """What a launch may leave behind: processes carrying its run id, and
    /dev/shm segments and MPICH's hwloc topology files in /tmp (which its
    process manager writes for the ranks) that were not there when the test
    started."""

    def __init__(self) -> None:
        self.files_before = self.files()

    @staticmethod
    def files() -> set[Path]:
        return set(Path("/dev/shm").iterdir()) | set(Path("/tmp").glob("hydra_hwloc_xmlfile_*"))

    @staticmethod
    def _with(assignment: str) -> list[int]:
        """Processes whose environment holds NAME=value."""
        needle = assignment.encode()
        alive = []
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                try:
                    if needle in (entry / "environ").read_bytes().split(b"\0"):
                        alive.append(int(entry.name))
                except OSError:
                    pass
        return alive

    def processes(self, run_id: str) -> list[int]:
        return self._with(f"NCCLSIM_RUN_ID={run_id}")

    def processes_in(self, run: Path) -> list[int]:
        """The processes of the run in `run`, found by its directory (no launch.json needed)."""
        return self._with(f"NCCLSIM_RUN_DIR={run.resolve()}")

    def assert_none(self, run: Path) -> None:
        """The launch whose run directory is `run` left no process and no file."""
        run_id = json.loads((run / "launch.json").read_text())["run_id"]
        assert self.processes(run_id) == []
        assert self.files() <= self.files_before, self.files() - self.files_before


@pytest.fixture
def leftovers() -> Leftovers:
    return Leftovers()


# ---- quick and end-to-end tests ----

# Fixtures that only an MPI run uses: a test asking for one is end-to-end even
# when its `@pytest.mark.e2e` was forgotten, so `pytest -m "not e2e"` stays quick.
E2E_FIXTURES = frozenset({"mpiexec", "leftovers"})


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if E2E_FIXTURES & set(getattr(item, "fixturenames", ())) and not item.get_closest_marker("e2e"):
            item.add_marker(pytest.mark.e2e)


# ---- tests per NCCL release ----

# Every release a release test runs on, when ncclsim's cache holds it
# (`launch --nccl SPEC` fetched it once); `@pytest.mark.releases(...)` picks some.
NCCL_RELEASES = ("cu12:2.23.4", "cu12:2.24.3", "cu12:2.25.1", "cu12:2.26.2", "cu12:2.27.7", "cu12:2.29.2",
                 "cu12:2.32.3", "cu13:2.27.7", "cu13:2.30.7", "cu13:2.32.3")


@dataclass(frozen=True)
class CachedRelease:
    spec: str  # for launch --nccl
    version: str
    env: dict[str, str]  # the cache that holds it, not the test's own


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "cached_release" in metafunc.fixturenames:
        marker = metafunc.definition.get_closest_marker("releases")
        metafunc.parametrize("cached_release", marker.args if marker else NCCL_RELEASES, indirect=True)


@pytest.fixture
def cached_release(request: pytest.FixtureRequest) -> CachedRelease:
    from ncclsim.nccl.wheels import cache_root
    spec = request.param
    flavour, version = spec.split(":")
    if not (cache_root() / f"{flavour}-{version}" / "lib" / "libnccl.so.2").exists():
        pytest.skip(f"{spec} is not in the cache")
    return CachedRelease(spec, version, {"XDG_CACHE_HOME": str(cache_root().parent.parent)})


# ---- the probe under launch, every output checked ----

ProbeRun = Callable[..., dict]


@pytest.fixture
def probe_run(run_cli: RunCli, ncclsim_exe: Path) -> ProbeRun:
    """run(run_dir, hosts, gpus, ops, sizes, env=None, nccl="installed", args=(), probe_args=()):
    `ncclsim launch` of the probe (args: more launch options, probe_args:
    more probe options); fails unless it exits 0 and rank 0 checked every op
    at every size. Returns run.json."""
    from ncclsim.rundir import RunDir

    def run(run_dir: Path, hosts: int, gpus: int, ops: tuple[str, ...], sizes: list[int],
            env: Optional[dict[str, str]] = None, nccl: str = "installed", args: tuple[str, ...] = (),
            probe_args: tuple[str, ...] = ()) -> dict:
        proc = run_cli("launch", "--run-dir", str(run_dir), "--nccl", nccl, "--hosts", str(hosts), "--gpus", str(gpus),
                       *args, "--timeout", "600", "--", str(ncclsim_exe), "probe", "--ops", ",".join(ops),
                       "--sizes", ",".join(map(str, sizes)), *probe_args, env=env, timeout=700)
        assert proc.returncode == 0, proc.stderr[-3000:]
        out = RunDir(run_dir).rank(0).stdout.read_text()
        for op in ops:
            for size in sizes:
                assert re.search(rf"{op} +{size} B  checked", out), f"{op} {size} B not checked:\n{out[-3000:]}"
        return json.loads(RunDir(run_dir).run_json.read_text())
    return run
