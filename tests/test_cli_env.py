"""`ncclsim env` and `ncclsim info`, run as a user runs them: the installed command."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Callable

import pytest

from ncclsim.paths import cudart_lib_dir, nccl_lib_dir
from ncclsim.platform.config import default_platform, read_platform
from ncclsim.platform.models import GpuCatalog

# The run_cli fixture (conftest.py): `ncclsim ARGS...` -> CompletedProcess.
RunCli = Callable[..., "subprocess.CompletedProcess[str]"]


def exports(stdout: str) -> tuple[dict[str, str], list[str]]:
    """Parse `export K=V` / `unset K` lines; anything else is a failure."""
    env: dict[str, str] = {}
    unset: list[str] = []
    for line in stdout.splitlines():
        words = shlex.split(line)
        if words[0] == "export" and len(words) == 2 and "=" in words[1]:
            k, _, v = words[1].partition("=")
            env[k] = v
        elif words[0] == "unset" and len(words) == 2:
            unset.append(words[1])
        else:
            pytest.fail(f"unexpected line in `ncclsim env` output: {line!r}")
    return env, unset


def test_env_shell(run_cli: RunCli, lib_dir: Path, tmp_path: Path) -> None:
    r = run_cli("env", "--config-dir", str(tmp_path / "cfg"))
    assert r.returncode == 0, r.stderr
    env, unset = exports(r.stdout)
    assert env["NCCL_HOSTID"] == "ncclsim-h0"
    platform = Path(env["NCCLSIM_PLATFORM"])
    assert platform.is_file() and platform.parent == (tmp_path / "cfg").resolve()
    ld = env["LD_LIBRARY_PATH"].split(":")
    assert ld[0] == str(lib_dir)
    assert str(nccl_lib_dir()) in ld and (nccl_lib_dir() / "libnccl.so.2").exists()
    assert str(cudart_lib_dir()) in ld and (cudart_lib_dir() / "libcudart.so.12").exists()
    assert "CUDA_VISIBLE_DEVICES" in unset and "CUDA_VISIBLE_DEVICES" not in env
    assert "NCCL_CUMEM_ENABLE" not in env


def test_env_of_a_launchs_host(run_cli: RunCli, lib_dir: Path, tmp_path: Path) -> None:
    """--run RUN_DIR --host N: the variables of that host's ranks, for tools run beside them."""
    assert run_cli("topo", "generate", "--preset", "dgx-a100", "--hosts", "2", "-o", "run/hosts").returncode == 0
    r = run_cli("env", "--run", "run", "--host", "1")
    assert r.returncode == 0, r.stderr
    env, unset = exports(r.stdout)
    assert env["NCCLSIM_PLATFORM"] == str((tmp_path / "run" / "hosts" / "h1" / "platform.conf").resolve())
    assert env["NCCL_HOSTID"] == "ncclsim-h1" and env["LD_LIBRARY_PATH"].split(":")[0] == str(lib_dir)
    assert "libncclsim-host.so" in env["LD_PRELOAD"] and "CUDA_VISIBLE_DEVICES" in unset
    r = run_cli("env", "--run", "run", "--host", "2")
    assert r.returncode == 2 and r.stderr.strip().splitlines() == [
        "ncclsim: error: --run run: no simulated host h2 there (it has h0, h1)"], r.stderr


def test_env_json(run_cli: RunCli, catalog: GpuCatalog, tmp_path: Path) -> None:
    r = run_cli("env", "--json", "--gpus", "4", "--model", "l40s", "--host", "2",
                "--config-dir", str(tmp_path))
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["schema_version"] == 1
    assert doc["env"]["NCCL_HOSTID"] == "ncclsim-h2"
    assert doc["unset"] == ["CUDA_VISIBLE_DEVICES"]
    p = doc["platform"]
    assert p["host_index"] == 2 and len(p["gpus"]) == 4
    assert {g["name"] for g in p["gpus"]} == {"NVIDIA L40S"}
    assert all(g["nvlink_remote"] == [] for g in p["gpus"])
    cfg = read_platform(Path(doc["env"]["NCCLSIM_PLATFORM"]), catalog)
    assert [str(g.bus_id) for g in cfg.gpus] == [g["bus_id"] for g in p["gpus"]]
    assert cfg == default_platform(2, 4, "l40s", catalog)


def test_env_reuses_file_per_options(run_cli: RunCli, tmp_path: Path) -> None:
    first = exports(run_cli("env").stdout)[0]["NCCLSIM_PLATFORM"]
    assert first.startswith(str(tmp_path / "cache" / "ncclsim"))  # $XDG_CACHE_HOME/ncclsim
    mtime = Path(first).stat().st_mtime_ns
    assert exports(run_cli("env").stdout)[0]["NCCLSIM_PLATFORM"] == first
    assert Path(first).stat().st_mtime_ns == mtime
    other = exports(run_cli("env", "--gpus", "2").stdout)[0]["NCCLSIM_PLATFORM"]
    assert other != first and Path(other).is_file()


def test_env_eval_in_bash(ncclsim_exe: Path, clean_env: dict[str, str], tmp_path: Path,
                          lib_dir: Path) -> None:
    script = f"""
        set -eu
        eval "$({shlex.quote(str(ncclsim_exe))} env --gpus 2)"
        eval "$({shlex.quote(str(ncclsim_exe))} env --gpus 2)"
        test -f "$NCCLSIM_PLATFORM"
        echo "platform=$NCCLSIM_PLATFORM"
        echo "ld=$LD_LIBRARY_PATH"
        echo "cvd=${{CUDA_VISIBLE_DEVICES-unset}}"
    """
    env = {**clean_env, "LD_LIBRARY_PATH": "/opt/user lib", "CUDA_VISIBLE_DEVICES": "0"}
    r = subprocess.run(["bash", "-c", script], cwd=tmp_path, env=env, text=True,
                       capture_output=True, timeout=120)
    assert r.returncode == 0, r.stderr
    out = dict(line.split("=", 1) for line in r.stdout.splitlines())
    assert Path(out["platform"]).is_file()
    ld = out["ld"].split(":")
    assert ld[0] == str(lib_dir) and ld[-1] == "/opt/user lib"
    assert len(ld) == len(set(ld))  # a second eval adds nothing
    assert out["cvd"] == "unset"


@pytest.mark.parametrize("args", [
    ["env", "--gpus", "0"],
    ["env", "--gpus", "65"],
    ["env", "--gpus", "eight"],
    ["env", "--model", "p100"],
    ["env", "--host", "-1"],
    ["env", "--bogus"],
    ["info", "--model", "p100"],
    ["info", "--platform", "absent.conf"],
    ["info", "--platform", "absent.conf", "--gpus", "2"],
    [],
])
def test_bad_arguments_one_line_exit_2(run_cli: RunCli, args: list[str]) -> None:
    r = run_cli(*args)
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert r.stdout == ""
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "error" in r.stderr and "Traceback" not in r.stderr


def test_info_text(run_cli: RunCli, lib_dir: Path) -> None:
    r = run_cli("info")
    assert r.returncode == 0, r.stderr
    assert "built-in default" in r.stdout and "host 0 (ncclsim-h0)" in r.stdout
    assert r.stdout.count("NVIDIA H100 80GB HBM3") == 8
    assert "0000:db:00.0" in r.stdout or "0100:db:00.0" in r.stdout
    assert "GPU-6e63736d-0000-0000-0000-000700000001" in r.stdout
    assert "x5" in r.stdout  # NVLinks grouped per NVSwitch
    assert "NVSwitch multicast (NVLS): yes; in-network reduction (CollNet): no" in r.stdout
    assert str(lib_dir) in r.stdout


def test_info_follows_env(run_cli: RunCli, tmp_path: Path) -> None:
    doc = json.loads(run_cli("env", "--json", "--gpus", "3", "--model", "a100", "--host", "1").stdout)
    r = run_cli("info", "--json", env=doc["env"])
    assert r.returncode == 0, r.stderr
    info = json.loads(r.stdout)
    assert info["schema_version"] == 1
    assert info["source"] == doc["env"]["NCCLSIM_PLATFORM"]
    assert info["platform"] == doc["platform"]
    assert info["platform"]["multicast"] is False  # A100s: no NVSwitch multicast
    assert info["libraries"]["nccl_version"].count(".") == 2
    assert "libcuda.so.1" in info["libraries"]["simulator"]


def test_info_from_options_and_alias(run_cli: RunCli) -> None:
    r = run_cli("platform", "--json", "--gpus", "2", "--host", "4")
    assert r.returncode == 0, r.stderr
    p = json.loads(r.stdout)["platform"]
    assert p["hostname"] == "ncclsim-h4" and len(p["gpus"]) == 2


def test_python_dash_m(clean_env: dict[str, str], tmp_path: Path) -> None:
    r = subprocess.run([sys.executable, "-m", "ncclsim", "--version"], cwd=tmp_path,
                       env=clean_env, text=True, capture_output=True, timeout=60)
    assert r.returncode == 0 and r.stdout.startswith("ncclsim "), r.stderr


DRIVER_PROBE = r"""
import ctypes, json
cuda = ctypes.CDLL("libcuda.so.1")  # found through LD_LIBRARY_PATH, as NVIDIA's runtime finds it
assert cuda.cuInit(0) == 0
n = ctypes.c_int()
assert cuda.cuDeviceGetCount(ctypes.byref(n)) == 0
gpus = []
for i in range(n.value):
    d, mem = ctypes.c_int(), ctypes.c_size_t()
    name, bus = ctypes.create_string_buffer(256), ctypes.create_string_buffer(32)
    assert cuda.cuDeviceGet(ctypes.byref(d), i) == 0
    assert cuda.cuDeviceGetName(name, 256, d) == 0
    assert cuda.cuDeviceGetPCIBusId(bus, 32, d) == 0
    assert cuda.cuDeviceTotalMem_v2(ctypes.byref(mem), d) == 0
    gpus.append({"name": name.value.decode(), "bus_id": bus.value.decode().lower(),
                 "memory": mem.value})
print(json.dumps(gpus))
"""


def test_env_puts_a_process_on_the_platform(run_cli: RunCli, clean_env: dict[str, str],
                                            tmp_path: Path) -> None:
    """A process started with the printed environment sees the GPUs `env --json` describes."""
    r = run_cli("env", "--json", "--gpus", "3", "--model", "a100", "--host", "2")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    env = {k: v for k, v in {**clean_env, **doc["env"]}.items() if k not in doc["unset"]}
    probe = subprocess.run([sys.executable, "-c", DRIVER_PROBE], cwd=tmp_path, env=env,
                           text=True, capture_output=True, timeout=120)
    assert probe.returncode == 0, probe.stderr
    expected = [{k: g[k] for k in ("name", "bus_id", "memory")} for g in doc["platform"]["gpus"]]
    assert json.loads(probe.stdout) == expected
