"""The default probe of `ncclsim launch` sizes its buffers to the machine: every
simulated GPU's send and receive buffers are this machine's memory, so with
many GPUs the largest sizes are left out (ncclsim/launch/options.py)."""

from __future__ import annotations

import pytest

from ncclsim.launch.options import PROBE_SIZES, probe_command, probe_sizes

GB = 10**9
MiB = 1 << 20


@pytest.mark.parametrize("gpus, available, largest", [
    (16, 20 * GB, 16 * MiB),     # 2 x 8: 0.5 GB of buffers
    (256, 20 * GB, 1 * MiB),     # 32 x 8: 16 MiB would take 8.6 GB, more than a quarter
    (1024, 20 * GB, 1 * MiB),    # 128 x 8: 1 MiB takes 2.1 GB
    (1024, 2 * GB, 64 << 10),    # never fewer than 8 B and 64 KiB
])
def test_largest_size_fits_a_quarter_of_memory(gpus: int, available: int, largest: int) -> None:
    sizes = probe_sizes(gpus, available)
    assert sizes == PROBE_SIZES[:len(sizes)] and sizes[-1] == largest
    assert len(sizes) == 2 or 2 * sizes[-1] * gpus <= available / 4


def test_probe_command_names_the_sizes() -> None:
    cmd = probe_command(1, (8, 65536))
    assert cmd[-4:] == ("--ops", "allreduce", "--sizes", "8,65536")
    assert probe_command(8)[-1] == ",".join(str(n) for n in PROBE_SIZES)
    # With the memory available at the start: a quarter of it is the probe's floor.
    assert probe_command(8, (8,), 20 * GB)[-4:] == ("--sizes", "8", "--min-free", str(5 * GB))


@pytest.mark.parametrize("floor", ["0", "1Q", "x"])
def test_the_probes_memory_floor_is_checked(run_cli, floor: str) -> None:
    """--min-free is a positive size: anything else is one line before MPI or NCCL start."""
    proc = run_cli("probe", "--ops", "allreduce", "--min-free", floor)
    assert proc.returncode == 2, proc.stderr
    assert "--min-free: " in proc.stderr and f"'{floor}'" in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr


def test_meminfo_in_bytes() -> None:
    """What the sizing reads: /proc/meminfo's fields in bytes."""
    from ncclsim.meminfo import meminfo
    m = meminfo()
    assert 0 < m["MemAvailable"] <= m["MemTotal"] and m["MemTotal"] % 1024 == 0


def test_out_of_memory_kills_are_counted_and_named(tmp_path) -> None:
    """A run the kernel's out-of-memory killer cut says so; /proc/vmstat's counter."""
    from ncclsim.meminfo import oom_kills, oom_note
    vmstat = tmp_path / "vmstat"
    vmstat.write_text("nr_free_pages 5000\noom_kill 7\nnr_zone_active_anon 3\n")
    assert oom_kills(vmstat) == 7
    assert oom_kills(tmp_path / "missing") is None
    vmstat.write_text("nr_free_pages 5000\n")  # kernels before 4.13
    assert oom_kills(vmstat) is None
    real = oom_kills()
    assert real is None or real >= 0
    assert oom_note(7, 7) is None and oom_note(None, 9) is None and oom_note(7, None) is None
    note = oom_note(7, 10)
    assert note is not None and "ran out of memory" in note and "killed 3 process(es)" in note
