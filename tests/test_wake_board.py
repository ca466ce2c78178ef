"""The wake board (fake_cuda/common/wake_board.h): whoever writes a word an
emulated GPU may sleep on makes the futex wake system call only when the
host's board counts a sleeper there.

A preloaded counter of the `syscall()` calls ncclsim's libraries make for
FUTEX_WAKE tells wakes that woke someone from wakes that found nobody. Two
processes of one host run AllReduces through NCCL (LL at 8 B, Simple at
4 MiB; the probe checks every result): with the board almost no wake finds
nobody and sleepers are still woken; with the board's variable unset in the
ranks, every write wakes, and almost all of those wakes find nobody."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

COUNTER = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
#include <linux/futex.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>

static long woke, found_nobody;

long syscall(long number, ...)
{
    static long (*real)(long, ...);
    if (!real) real = (long (*)(long, ...))dlsym(RTLD_NEXT, "syscall");
    va_list ap;
    va_start(ap, number);
    long a[6];
    for (int i = 0; i < 6; i++) a[i] = va_arg(ap, long);
    va_end(ap);
    long r = real(number, a[0], a[1], a[2], a[3], a[4], a[5]);
    if (number == SYS_futex && a[1] == FUTEX_WAKE) /* shared words: not FUTEX_PRIVATE_FLAG */
        __atomic_fetch_add(r > 0 ? &woke : &found_nobody, 1, __ATOMIC_RELAXED);
    return r;
}

__attribute__((destructor)) static void report(void)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%d", getenv("WAKE_COUNT_DIR"), (int)getpid());
    FILE *f = fopen(path, "w");
    if (f) {
        fprintf(f, "%ld %ld\n", woke, found_nobody);
        fclose(f);
    }
}
"""


@pytest.fixture(scope="module")
def counter(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("wake-counter")
    (d / "wake_count.c").write_text(COUNTER)
    lib = d / "libwake_count.so"
    subprocess.run(["cc", "-shared", "-fPIC", "-O2", str(d / "wake_count.c"), "-o", str(lib), "-ldl"], check=True)
    return lib


def _wakes(run_cli, tmp_path: Path, counter: Path, board: bool) -> tuple[int, int]:
    """Wakes that woke a sleeper, and wakes that found nobody, over every
    rank of a 1 x 2 run of checked AllReduces."""
    counts = tmp_path / ("with" if board else "without")
    counts.mkdir()
    unset = "" if board else "unset NCCLSIM_WAKE_BOARD; "  # the host's env file sets it for every rank
    rank = (f'{unset}LD_PRELOAD="$LD_PRELOAD:{counter}" exec {sys.executable} -m ncclsim.probe '
            "--ops allreduce --sizes 8,4194304 --iters 50")
    proc = run_cli("launch", "--hosts", "1", "--gpus", "2", "--run-dir", str(counts / "run"), "--", "sh", "-c",
                   rank, env={"WAKE_COUNT_DIR": str(counts)}, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "checked" in proc.stdout + proc.stderr
    files = [f for f in counts.iterdir() if f.name.isdigit()]
    assert len(files) >= 2, files  # each rank process reported
    rows = [tuple(map(int, f.read_text().split())) for f in files]
    return sum(r[0] for r in rows), sum(r[1] for r in rows)


@pytest.mark.e2e
def test_writes_wake_only_where_someone_sleeps(run_cli, tmp_path: Path, counter: Path) -> None:
    woke, nobody = _wakes(run_cli, tmp_path, counter, board=True)
    woke_all, nobody_all = _wakes(run_cli, tmp_path, counter, board=False)
    # every write wakes without the board: most find nobody (the reader is busy)
    assert nobody_all > 10 * woke_all, (woke_all, nobody_all)
    # with it, sleepers are still woken, and few wakes are wasted (buckets shared by two words)
    assert woke > 0 and nobody < nobody_all / 10, (woke, nobody, nobody_all)
