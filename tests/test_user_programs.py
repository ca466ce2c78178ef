"""Users' own programs on the simulated platform: a C program built with gcc
against nccl.h and the shared CUDA runtime, and a CUDA program with a real
kernel built with nvcc."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from ncclsim.paths import cudart_lib_dir, nccl_lib_dir, nvidia_package_dirs

PROGRAMS = Path(__file__).parent / "programs"


def _nvidia_include(package: str) -> Path:
    for base in nvidia_package_dirs():
        if (base / package / "include").is_dir():
            return base / package / "include"
    raise AssertionError(f"nvidia/{package}/include not found: install ncclsim's test extra")


def _build_c(source: str, exe: Path) -> None:
    """A C program of tests/programs built with gcc against nccl.h and the shared CUDA runtime."""
    nccl, cudart = nccl_lib_dir(), cudart_lib_dir()
    # nccl.h includes cuda_runtime.h; its fp16/bf16 headers need the CUDA C++
    # library, which a C program does not use: their include guards skip them.
    subprocess.run(
        ["gcc", "-Wall", "-Wextra", "-Werror", "-D__CUDA_FP16_H__", "-D__CUDA_BF16_H__",
         "-o", str(exe), str(PROGRAMS / source),
         f"-I{nccl.parent / 'include'}", f"-I{_nvidia_include('cuda_runtime')}",
         f"-I{_nvidia_include('cuda_nvcc')}", f"-L{nccl}", f"-L{cudart}",
         "-l:libnccl.so.2", "-l:libcudart.so.12"], check=True)


@pytest.mark.e2e
def test_c_program_with_nccl(sim_env, tmp_path: Path) -> None:
    exe = tmp_path / "nccl_allreduce"
    _build_c("nccl_allreduce.c", exe)
    proc = subprocess.run([str(exe)], env=sim_env(gpus=8), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    nccl = nccl_lib_dir()
    code = re.search(r"#define NCCL_VERSION_CODE (\d+)", (nccl.parent / "include" / "nccl.h").read_text())
    assert code, "NCCL_VERSION_CODE not found in nccl.h"
    assert f"allreduce over 8 GPUs with NCCL {code.group(1)}: ok" in proc.stdout


@pytest.mark.e2e
@pytest.mark.parametrize("algo", ["Ring", "Tree", "NVLS"])
def test_unwritten_inputs_read_as_zeros(sim_env, tmp_path: Path, algo: str) -> None:
    """Inputs nobody wrote give zeros (read from stand-ins that hold no memory);
    an input written by a copy queued just before the collective is read as
    written. With Ring, the only pages the run could fault in are the inputs'."""
    exe = tmp_path / "nccl_unwritten_inputs"
    _build_c("nccl_unwritten_inputs.c", exe)
    env = {**sim_env(gpus=8), "NCCL_ALGO": algo}
    proc = subprocess.run([str(exe)], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    m = re.search(r"allreduce of unwritten (\d+) KiB inputs over 8 GPUs: zeros, shared memory grew (-?\d+) KiB",
                  proc.stdout)
    assert m, proc.stdout
    inputs_kib, grew_kib = int(m.group(1)) * 8, int(m.group(2))
    if algo == "Ring":  # read in place, the 8 inputs' pages would have been faulted in
        assert grew_kib < inputs_kib // 4, f"shared memory grew {grew_kib} KiB reading {inputs_kib} KiB of holes"


@pytest.mark.e2e
@pytest.mark.skipif(shutil.which("nvcc") is None,
                    reason="nvcc (CUDA toolkit) is not installed: the CUDA kernel program is not built")
def test_cuda_program_with_kernel(sim_env, tmp_path: Path) -> None:
    exe = tmp_path / "kernel_launch"
    subprocess.run(["nvcc", "-arch=sm_90", "-o", str(exe), str(PROGRAMS / "kernel_launch.cu")],
                   check=True)
    proc = subprocess.run([str(exe)], env=sim_env(gpus=2), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "kernel launched and synchronised: ok (maxThreadsPerBlock 1024)" in proc.stdout
