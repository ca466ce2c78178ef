"""libncclsim-host.so's zero fills: a large memset(0) of a shared /dev/shm
mapping punches a hole (the same bytes, no memory held); any other memory
gets the real memset."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from ncclsim.platform.env import HOST_PRELOAD

# Run under the preload: ctypes.memset calls memset through the dynamic linker.
CHILD = r"""
import ctypes, mmap, os, sys
MB = 1 << 20
libc = ctypes.CDLL(None)

def fill_and_zero(buf, start, length, fd=None):
    # Fill buf with 0xff, zero [start, start + length), check the bytes; return
    # what the file behind buf (fd) held right after the memset (reading the
    # zeroes back allocates tmpfs pages again).
    buf[:] = b"\xff" * len(buf)
    addr = ctypes.addressof(ctypes.c_char.from_buffer(buf))
    libc.__errno_location.restype = ctypes.POINTER(ctypes.c_int)
    libc.__errno_location().contents.value = 1234
    ctypes.memset(addr + start, 0, length)
    assert libc.__errno_location().contents.value == 1234, "memset changed errno"
    held = os.fstat(fd).st_blocks * 512 if fd is not None else None
    assert buf[start:start + length] == bytes(length), "not zeroed"
    assert buf[:start] == b"\xff" * start and buf[start + length:] == b"\xff" * (len(buf) - start - length), \
        "bytes outside the fill changed"
    return held

# A NCCL-style segment: a /dev/shm file, shared mapping, zeroed but for its edges.
path = sys.argv[1]
fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o600)
os.posix_fallocate(fd, 0, 16 * MB)
shared = mmap.mmap(fd, 16 * MB, mmap.MAP_SHARED)
print("shared_bytes_held", fill_and_zero(shared, 100, 16 * MB - 300, fd))

# Private memory, large and small: the real memset.
private = mmap.mmap(-1, 8 * MB, mmap.MAP_PRIVATE)
fill_and_zero(private, 7, 8 * MB - 9)
fill_and_zero(bytearray(4096), 1, 100)
os.unlink(path)
print("ok")
"""


def _shared_bytes_held(env: dict[str, str], tmp_path: Path) -> int:
    """Runs CHILD (every byte checked there); what its segment held right
    after the zero fill."""
    segment = Path("/dev/shm") / f"ncclsim-test-zero-fill-{tmp_path.name}"
    try:
        proc = subprocess.run([sys.executable, "-c", CHILD, str(segment)], env=env, text=True,
                              capture_output=True, timeout=60)
    finally:
        segment.unlink(missing_ok=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.rstrip().endswith("ok"), proc.stdout
    return int(proc.stdout.split("shared_bytes_held ")[1].split()[0])


def test_zero_fill_of_shared_memory_holds_no_pages(lib_dir: Path, clean_env: dict[str, str],
                                                  tmp_path: Path) -> None:
    held = _shared_bytes_held({**clean_env, "LD_PRELOAD": str(lib_dir / HOST_PRELOAD)}, tmp_path)
    # Only the two edge pages, not the 16 MiB the file was allocated with.
    assert held <= 2 * 4096 * 4, held


def test_without_the_preload_memset_holds_the_pages(clean_env: dict[str, str], tmp_path: Path) -> None:
    """The same child without the preload: the segment stays allocated (the
    test above measures the preload, not tmpfs)."""
    assert _shared_bytes_held(clean_env, tmp_path) >= 16 << 20
