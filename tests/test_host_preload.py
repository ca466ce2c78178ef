"""libncclsim-host.so's zero fills: a large memset(0) of pages not in memory
punches a hole in a shared /dev/shm mapping and leaves private anonymous
memory unallocated (the same bytes, no memory taken); pages in memory are
written (dropped, each would fault in again at its next write); any other
memory (a private file mapping, small fills) gets the real memset."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest

from ncclsim.platform.env import HOST_PRELOAD

# Run under the preload: ctypes.memset calls memset through the dynamic linker.
CHILD = r"""
import ctypes, mmap, os, sys
MB = 1 << 20
libc = ctypes.CDLL(None)

def rss_anon():
    with open("/proc/self/status") as f:
        return next(int(l.split()[1]) * 1024 for l in f if l.startswith("RssAnon:"))

PAGE = 4096

def fill_and_zero(buf, start, length, fd=None, written=()):
    # Write 0xff to the edge pages of buf and to the pages `written` (so the
    # others are not in memory), zero [start, start + length), check every
    # byte; return what the file behind buf (fd) held right after the memset,
    # or without one how much private memory the memset took (reading the
    # zeroes back allocates pages).
    for page in (0, len(buf) // PAGE - 1, *written):
        buf[page * PAGE:(page + 1) * PAGE] = b"\xff" * PAGE
    addr = ctypes.addressof(ctypes.c_char.from_buffer(buf))
    before = rss_anon()
    libc.__errno_location.restype = ctypes.POINTER(ctypes.c_int)
    libc.__errno_location().contents.value = 1234
    ctypes.memset(addr + start, 0, length)
    assert libc.__errno_location().contents.value == 1234, "memset changed errno"
    taken = os.fstat(fd).st_blocks * 512 if fd is not None else rss_anon() - before
    assert buf[start:start + length] == bytes(length), "not zeroed"
    assert buf[:start] == b"\xff" * start, "bytes before the fill changed"
    end = start + length
    assert buf[end:] == b"\xff" * (len(buf) - end), "bytes after the fill changed"
    return taken

# NCCL-style segments: /dev/shm files made with posix_fallocate, shared
# mappings, zeroed but for their edges; the second with 4 MiB written first.
def segment(path):
    fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o600)
    os.posix_fallocate(fd, 0, 16 * MB)
    return fd, mmap.mmap(fd, 16 * MB, mmap.MAP_SHARED)

path = sys.argv[1]
fd, shared = segment(path)
print("shared_fresh", fill_and_zero(shared, 100, 16 * MB - 300, fd))
fd2, shared2 = segment(path + ".2")
print("shared_written", fill_and_zero(shared2, 100, 16 * MB - 300, fd2, written=range(1024, 2048)))
os.unlink(path + ".2")

# Private anonymous memory, large (malloc's mmap) and small.
private = mmap.mmap(-1, 8 * MB, mmap.MAP_PRIVATE)
print("private_fresh", fill_and_zero(private, 7, 8 * MB - 9))
private = mmap.mmap(-1, 8 * MB, mmap.MAP_PRIVATE)
print("private_written", fill_and_zero(private, 7, 8 * MB - 9, written=range(512, 1024)))
fill_and_zero(bytearray(3 * PAGE), 1, 100, written=range(3))

# A private mapping of a file: zeroing it must not bring the file's bytes back.
os.ftruncate(fd, 4 * MB)
os.pwrite(fd, b"\x5a" * (4 * MB), 0)
copy = mmap.mmap(fd, 4 * MB, mmap.MAP_PRIVATE)
fill_and_zero(copy, 3, 4 * MB - 5)
assert os.pread(fd, 16, MB) == b"\x5a" * 16, "the file changed"
os.unlink(path)
print("ok")
"""


def _zero_fills(env: dict[str, str], tmp_path: Path) -> dict[str, list[int]]:
    """Runs CHILD (every byte checked there); per case what the segment held
    right after the zero fill, or how much private memory it took."""
    segment = Path("/dev/shm") / f"ncclsim-test-zero-fill-{tmp_path.name}"
    try:
        proc = subprocess.run([sys.executable, "-c", CHILD, str(segment)], env=env, text=True,
                              capture_output=True, timeout=60)
    finally:
        segment.unlink(missing_ok=True)
        Path(f"{segment}.2").unlink(missing_ok=True)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.split("\n")
    assert lines[-2:] == ["ok", ""], proc.stdout
    return {line.split()[0]: [int(w) for w in line.split()[1:]] for line in lines[:-2]}


def test_zero_fill_takes_no_pages_and_keeps_those_in_use(lib_dir: Path, clean_env: dict[str, str],
                                                         tmp_path: Path) -> None:
    r = _zero_fills({**clean_env, "LD_PRELOAD": str(lib_dir / HOST_PRELOAD)}, tmp_path)
    # The fallocated segment: only its two edge pages hold memory afterwards.
    assert r["shared_fresh"][0] <= 2 * 4096 * 4, r
    # With 4 MiB written first, those stay (zeroed in place); the rest is a hole.
    assert 4 << 20 <= r["shared_written"][0] <= (4 << 20) + 4 * 4096 * 4, r
    # Private memory: zeroing 8 MiB of fresh pages allocates none; of 2 MiB written, keeps those.
    assert r["private_fresh"][0] < 4 * 4096, r
    assert abs(r["private_written"][0]) < 4 * 4096, r


def test_without_the_preload_memset_takes_the_pages(clean_env: dict[str, str], tmp_path: Path) -> None:
    """The same child without the preload: zeroing allocates the segment and
    the private memory (the test above measures the preload, not the kernel)."""
    r = _zero_fills(clean_env, tmp_path)
    assert r["shared_fresh"][0] >= 16 << 20 and r["private_fresh"][0] >= 7 << 20, r


# Large copies and receives of mostly zeros (NCCL's gathered topology
# structures): every byte checked; what each took of private memory.
COPIES = r"""
import ctypes, mmap, socket, sys, threading
MB, PAGE = 1 << 20, 4096
libc = ctypes.CDLL(None)
libc.memcpy.restype = ctypes.c_void_p
libc.memcpy.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t]

def rss_anon():
    with open("/proc/self/status") as f:
        return next(int(l.split()[1]) * 1024 for l in f if l.startswith("RssAnon:"))

def address(buf):
    return ctypes.addressof(ctypes.c_char.from_buffer(buf))

def fresh(n):
    return mmap.mmap(-1, n, mmap.MAP_PRIVATE)

# A source with one page in 64 written; copied at an odd offset.
src = fresh(8 * MB)
for at in range(0, 8 * MB, 64 * PAGE):
    src[at + 100] = 7
src[8 * MB - 1] = 9
dst = fresh(8 * MB)
before = rss_anon()
libc.memcpy(address(dst) + 5, address(src) + 5, 8 * MB - 5)
print("copy_fresh", rss_anon() - before)
assert dst[:5] == bytes(5) and dst[5:] == src[5:], "copy differs"

# Into pages in use (written 0xff first): they are written, not given back.
used = fresh(4 * MB)
used[:] = b"\xff" * (4 * MB)
before = rss_anon()
libc.memcpy(address(used), address(src), 4 * MB)
print("copy_used", rss_anon() - before)
assert used[:] == src[:4 * MB], "copy into used pages differs"

def python_recv(sock, buf, at, n):
    return sock.recv_into(memoryview(buf)[at:at + n])

def receive(buf, data, recv=python_recv):
    a, b = socket.socketpair()
    go = threading.Event()
    sender = threading.Thread(target=lambda: go.wait() and a.sendall(data))
    sender.start()  # before the count starts: a new thread's stack takes pages of its own
    got, calls, before = 0, 0, rss_anon()
    go.set()
    while got < len(data):
        got += recv(b, buf, got, len(data) - got)
        calls += 1
    sender.join()
    taken = rss_anon() - before  # before the check, whose slices take memory of their own
    assert buf[:len(data)] == data, "received bytes differ"
    return taken, calls

data = bytearray(4 * MB)
data[3 * PAGE + 1] = 1
data[-1] = 2
taken, calls = receive(fresh(4 * MB), data)
print("recv_fresh", taken)
print("recv_calls", calls)
used = fresh(4 * MB)
used[:] = b"\xff" * (4 * MB)
print("recv_used", receive(used, data)[0])

# The same receives by a library named as NCCL's (sys.argv[1]), which calls
# recv itself, as NCCL's socket code does.
nccl = ctypes.CDLL(sys.argv[1])
nccl.receive.restype = ctypes.c_long
nccl.receive.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t]
def nccl_recv(sock, buf, at, n):
    got = nccl.receive(sock.fileno(), address(buf) + at, n)
    assert got > 0, got
    return got
taken, calls = receive(fresh(4 * MB), data, nccl_recv)
print("nccl_fresh", taken)
print("nccl_calls", calls)
used = fresh(4 * MB)
used[:] = b"\xff" * (4 * MB)
print("nccl_used", receive(used, data, nccl_recv)[0])
print("ok")
"""

RECEIVE_C = r"""
#include <sys/socket.h>
long receive(int fd, void *buf, unsigned long n) { return (long)recv(fd, buf, n, 0); }
"""


def _copies(env: dict[str, str], tmp_path: Path) -> dict[str, int]:
    src, lib = tmp_path / "receive.c", tmp_path / "libnccl.so.2"  # the host library knows NCCL by its file name
    src.write_text(RECEIVE_C)
    # (not a tail call: the host library looks at who called recv)
    subprocess.run(["cc", "-shared", "-fPIC", "-O2", "-fno-optimize-sibling-calls", "-Wall", "-Werror", str(src),
                    "-o", str(lib)], check=True)
    proc = subprocess.run([sys.executable, "-c", COPIES, str(lib)], env=env, text=True, capture_output=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.split("\n")
    assert lines[-2:] == ["ok", ""], proc.stdout
    return {line.split()[0]: int(line.split()[1]) for line in lines[:-2]}


def test_copies_and_receives_of_zeros_take_no_pages(lib_dir: Path, clean_env: dict[str, str],
                                                    tmp_path: Path) -> None:
    with_preload = _copies({**clean_env, "LD_PRELOAD": str(lib_dir / HOST_PRELOAD)}, tmp_path)
    plain = _copies(clean_env, tmp_path)
    # Without the preload the 8 MiB copy and the 4 MiB receives take their pages.
    assert plain["copy_fresh"] >= 7 << 20 and plain["recv_fresh"] >= 3 << 20, plain
    assert plain["nccl_fresh"] >= 3 << 20, plain
    # With it only the pages holding data do: 1 in 64 of the copy; the receive's 2, one page per recv
    # call (split between two calls, neither received it whole) and a last call's under 64 KiB (a
    # receive into less is not looked at: NCCL's polls of a few bytes).
    assert with_preload["copy_fresh"] < 48 * 4096, with_preload
    assert with_preload["recv_fresh"] <= (2 + with_preload["recv_calls"] + 16) * 4096, with_preload
    # NCCL's receives go through a 256 KiB scratch buffer (which the thread keeps: 64 pages), so
    # that the pages of zeros are not faulted in one by one: they arrive in 16 parts or more.
    assert with_preload["nccl_fresh"] <= (64 + 2 + with_preload["nccl_calls"] + 16) * 4096, with_preload
    assert with_preload["nccl_calls"] >= 16, with_preload
    # Pages in use stay in use either way.
    assert abs(with_preload["copy_used"]) < 8 * 4096 and abs(with_preload["recv_used"]) < 8 * 4096, with_preload
    assert abs(with_preload["nccl_used"]) < 8 * 4096, with_preload


# NCCL's way of making a shared-memory segment (ncclOsShmOpen): fallocate
# of a new /dev/shm file; what the file holds right after.
SEGMENT_C = r"""
#define _GNU_SOURCE
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
long make_segment(const char *path, long size)
{
    int fd = open(path, O_CREAT | O_RDWR, 0600);
    if (fd < 0 || fallocate(fd, 0, 0, size) != 0) return -1;
    struct stat st;
    fstat(fd, &st);
    close(fd);
    return st.st_size == size ? (long)st.st_blocks * 512 : -2;
}
"""

SEGMENT_PY = r"""
import ctypes, sys
lib = ctypes.CDLL(sys.argv[1])
lib.make_segment.restype = ctypes.c_long
print(lib.make_segment(sys.argv[2].encode(), 32 << 20))
"""


def test_nccls_segments_take_memory_once_written(lib_dir: Path, clean_env: dict[str, str],
                                                  tmp_path: Path) -> None:
    """A 32 MiB segment NCCL makes holds no memory until written (NCCL zeroes
    it next, which gave the pages back); the same call from any other library
    allocates them."""
    src = tmp_path / "segment.c"
    src.write_text(SEGMENT_C)
    env = {**clean_env, "LD_PRELOAD": str(lib_dir / HOST_PRELOAD)}
    held = {}
    for name in ("libnccl.so.2", "libother.so"):  # the host library knows NCCL by its file name
        lib = tmp_path / name
        subprocess.run(["cc", "-shared", "-fPIC", "-O2", str(src), "-o", str(lib)], check=True)
        segment = Path("/dev/shm") / f"ncclsim-test-segment-{tmp_path.name}"
        try:
            proc = subprocess.run([sys.executable, "-c", SEGMENT_PY, str(lib), str(segment)], env=env, text=True,
                                  capture_output=True, timeout=60)
        finally:
            segment.unlink(missing_ok=True)
        assert proc.returncode == 0, proc.stderr
        held[name] = int(proc.stdout)
    assert held["libnccl.so.2"] == 0 and held["libother.so"] >= 32 << 20, held


# A receive loop on an empty non-blocking socket, as NCCL's bootstrap and proxy
# calls spin: CPU time spent while waiting 0.5 s, then how long after its
# send the data was seen.
SPIN = r"""
import socket, threading, time
a, b = socket.socketpair()
a.setblocking(False)
sent = []
def later():
    time.sleep(0.5)
    sent.append(time.monotonic())
    b.send(b"x")
threading.Thread(target=later).start()
cpu0, got = time.process_time(), b""
while not got:
    try:
        got = a.recv(1)
    except BlockingIOError:
        pass
print("cpu", time.process_time() - cpu0, "late", time.monotonic() - sent[0])
"""


def _spin(env: dict[str, str]) -> tuple[float, float]:
    proc = subprocess.run([sys.executable, "-c", SPIN], env=env, text=True, capture_output=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    words = proc.stdout.split()
    return float(words[1]), float(words[3])


@pytest.mark.e2e
def test_empty_receive_loop_sleeps_until_data(lib_dir: Path, clean_env: dict[str, str]) -> None:
    cpu, late = _spin({**clean_env, "LD_PRELOAD": str(lib_dir / HOST_PRELOAD)})
    spinning_cpu, _ = _spin(clean_env)
    # Spinning takes the whole 0.5 s of CPU; sleeping in poll() a small part.
    assert cpu < 0.25 * spinning_cpu, (cpu, spinning_cpu)
    # Woken by the data, not by a timeout much later.
    assert late < 0.1, late


# Threads of devices 0 and 1 wait (`waiter(dev)`, defined before this part,
# counts its rounds in `rounds[dev]` until `stop`); a thread working for
# device 0 calls the host library's `nudge` every millisecond for 0.5 s,
# then one for every device, so that both waiters end. Prints each waiter's
# rounds and the nudges.
def _nudging(nudge: str) -> str:
    return f"""
threads = [threading.Thread(target=waiter, args=(d,)) for d in (0, 1)]
for t in threads:
    t.start()
ready.wait()
host.ncclsim_thread_device(0)
nudges, end = 0, time.monotonic() + 0.5
while time.monotonic() < end:
    host.{nudge}()
    nudges += 1
    time.sleep(0.001)
stop.set()
host.ncclsim_thread_device(-1)
host.{nudge}()
for t in threads:
    t.join()
print(rounds[0], rounds[1], nudges)
"""


def _run_nudging(script: str, nudge: str, lib_dir: Path, env: dict[str, str]) -> tuple[int, int, int]:
    proc = subprocess.run([sys.executable, "-c", script + _nudging(nudge)],
                          env={**env, "LD_PRELOAD": str(lib_dir / HOST_PRELOAD)},
                          text=True, capture_output=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    own, other, nudges = (int(w) for w in proc.stdout.split())
    return own, other, nudges


# NCCL progress threads loop over sched_yield as NCCL's proxy does while it
# waits; the nudges are an emulated GPU of device 0 posting a step.
PROXIES = r"""
import ctypes, threading, time
libc = ctypes.CDLL(None)
host = ctypes.CDLL(None)
PR_SET_NAME = 15
stop = threading.Event()
ready = threading.Barrier(3)
rounds = {}
def waiter(dev):
    libc.prctl(PR_SET_NAME, f"NCCL Progress {dev}".encode(), 0, 0, 0)
    host.ncclsim_thread_device(dev)
    ready.wait()
    n = 0
    while not stop.is_set():
        libc.sched_yield()
        n += 1
    rounds[dev] = n
"""


def test_a_proxy_thread_wakes_for_its_own_device_only(lib_dir: Path, clean_env: dict[str, str]) -> None:
    """With a process per host, 8 progress threads share a process: a step of
    one GPU wakes its own rank's proxy, not the other 7."""
    own, other, nudges = _run_nudging(PROXIES, "ncclsim_nudge_proxies", lib_dir, clean_env)
    # Device 0's proxy runs a few passes per nudge before it sleeps again;
    # device 1's sleeps through them (it wakes only at its timeouts, 2 ms
    # at most once nothing happens).
    assert own >= nudges > 100, (own, nudges)
    assert other < own / 4, (own, other, nudges)


# Emulated GPUs (stream workers) sleep on their announcement counts as they
# do while a channel waits for a word NCCL's proxy writes (100 ms timeouts);
# the nudges are device 0's proxy thread announcing a completed request.
GPU_NUDGES = r"""
import ctypes, threading, time
libc = ctypes.CDLL(None, use_errno=True)
host = ctypes.CDLL(None)
host.ncclsim_gpu_nudges.restype = ctypes.c_void_p
SYS_futex, FUTEX_WAIT = 202, 0
class timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]
stop = threading.Event()
ready = threading.Barrier(3)
rounds = {}
def waiter(dev):
    host.ncclsim_thread_device(dev)
    word = host.ncclsim_gpu_nudges()
    ready.wait()
    n = 0
    while not stop.is_set():
        host.ncclsim_gpu_nudge_sleepers(1)
        seen = ctypes.c_uint32.from_address(word).value
        libc.syscall(SYS_futex, ctypes.c_void_p(word), FUTEX_WAIT, ctypes.c_uint32(seen),
                     ctypes.byref(timespec(0, 100_000_000)), None, 0)
        host.ncclsim_gpu_nudge_sleepers(-1)
        n += 1
    rounds[dev] = n
"""


def test_a_network_announcement_wakes_its_own_gpu_only(lib_dir: Path, clean_env: dict[str, str]) -> None:
    """With a process per host, 8 emulated GPUs share a process: the net
    plugin's completed request in one rank's proxy thread wakes that rank's
    GPU, not the other 7 (each of which would poll for a while)."""
    own, other, nudges = _run_nudging(GPU_NUDGES, "ncclsim_nudge_gpus", lib_dir, clean_env)
    # Device 0's GPU wakes for (nearly) every announcement; device 1's only
    # at its 100 ms timeouts and at the end.
    assert nudges > 100 and own > nudges / 2, (own, other, nudges)
    assert other <= 10, (own, other, nudges)


# An NCCL service thread as NCCL writes it: it polls its socket with a
# timeout, looks at its stop flag when poll returns, then reads a request if
# poll said one is there; its owner sets the flag and joins it. It names itself
# as NCCL names its threads. First its polls time out (150 ms) after a request
# was read (poll must then say nothing is there: a read that finds nothing is
# counted as spurious), then it polls without a timeout, which only the join
# can end. Prints the requests read, whether polls timed out, the spurious
# reads and what the last poll returned.
SERVICE_C = r"""
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <unistd.h>
static int fds[2], stop, got, timeout_ms = 150, timeouts, spurious, last = -2;
static void *service(void *arg) {
    (void)arg;
    pthread_setname_np(pthread_self(), "NCCL UDS Serv 0"); /* 15 characters at most */
    struct pollfd p = {.fd = fds[0], .events = POLLIN};
    for (;;) {
        last = poll(&p, 1, __atomic_load_n(&timeout_ms, __ATOMIC_ACQUIRE));
        if (last == 0) timeouts++;
        if (__atomic_load_n(&stop, __ATOMIC_ACQUIRE)) break;
        char c;
        if (p.revents) {
            if (read(fds[0], &c, 1) == 1) __atomic_add_fetch(&got, 1, __ATOMIC_RELEASE);
            else if (errno == EAGAIN) spurious++;
        }
    }
    return NULL;
}
static void request(int n) {
    if (write(fds[1], "x", 1) != 1) _exit(3);
    while (__atomic_load_n(&got, __ATOMIC_ACQUIRE) < n) usleep(1000);
}
int serve_and_join(void) {
    pthread_t t;
    if (pipe(fds) || fcntl(fds[0], F_SETFL, O_NONBLOCK) || pthread_create(&t, NULL, service, NULL)) return -1;
    request(1);
    usleep(400000); /* two or more polls time out */
    __atomic_store_n(&timeout_ms, -1, __ATOMIC_RELEASE);
    request(2);
    __atomic_store_n(&stop, 1, __ATOMIC_RELEASE);
    pthread_join(t, NULL);
    printf("got %d timed_out %d spurious %d last %d\n", got, timeouts >= 2, spurious, last);
    return fflush(stdout);
}
"""


@pytest.mark.parametrize("preload", [True, False], ids=["preloaded", "plain"])
def test_joining_a_service_thread_ends_its_long_poll(lib_dir: Path, clean_env: dict[str, str], tmp_path: Path,
                                                     preload: bool) -> None:
    """ncclCommDestroy joins NCCL's UDS service thread, which polls with a
    500 ms timeout and sees its stop flag only when poll returns: under the
    preload the join ends that poll (as a timeout: poll returns 0), while the
    data the thread polled for still arrives as before. Without the preload,
    a thread polling with no timeout is never woken."""
    src = tmp_path / "service.c"
    src.write_text(SERVICE_C)
    lib = tmp_path / "libnccl.so.2"  # the host library knows NCCL by its file name
    subprocess.run(["cc", "-shared", "-fPIC", "-O2", "-Wall", "-Werror", "-pthread", str(src), "-o", str(lib)],
                   check=True)
    env = {**clean_env, "LD_PRELOAD": str(lib_dir / HOST_PRELOAD)} if preload else clean_env
    run = [sys.executable, "-c", "import ctypes, sys; sys.exit(ctypes.CDLL(sys.argv[1]).serve_and_join())", str(lib)]
    if not preload:
        with pytest.raises(subprocess.TimeoutExpired):
            subprocess.run(run, env=env, capture_output=True, timeout=3)
        return
    proc = subprocess.run(run, env=env, text=True, capture_output=True, timeout=20)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["got", "2", "timed_out", "1", "spurious", "0", "last", "0"], proc.stdout


THP_DISABLED_PY = r"""
import ctypes
PR_GET_THP_DISABLE = 42
print(ctypes.CDLL(None, use_errno=True).prctl(PR_GET_THP_DISABLE, 0, 0, 0, 0))
"""


def test_rank_processes_take_no_transparent_huge_pages(lib_dir: Path, clean_env: dict[str, str]) -> None:
    """NCCL's scattered writes into large zeroed allocations hold a page each;
    on a machine whose transparent huge pages are `always` they would hold
    2 MiB each. The host library turns them off for its process."""
    def disabled(env: dict[str, str]) -> str:
        proc = subprocess.run([sys.executable, "-c", THP_DISABLED_PY], env=env, text=True, capture_output=True,
                              timeout=60)
        assert proc.returncode == 0, proc.stderr
        return proc.stdout.strip()

    assert disabled({**clean_env, "LD_PRELOAD": str(lib_dir / HOST_PRELOAD)}) == "1"
    assert disabled(clean_env) == "0"


# NCCL's sockets as NCCL uses them (misc/socket.cc, os/linux.cc): a TCP
# listener bound to an address with port 0, non-blocking connects with
# TCP_NODELAY, accept, TCP_NODELAY on the accepted socket, 1 MiB one way and
# a reply the other, then the listener closed. Then a connect to a TCP
# listener that is not NCCL's (the caller's, at `other_port`). Prints each
# socket's family, the accepted peer's address, whether the data arrived
# whole, the connecting socket's flags, the descriptors open before the
# listen and after the close, and the family of the other connection.
SOCKETS_C = r"""
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#define N (1 << 20)
static int fds_open(void) {
    int n = 0;
    DIR *d = opendir("/proc/self/fd");
    while (readdir(d)) n++;
    closedir(d);
    return n;
}
static int family(int fd) {
    int f = -1;
    socklen_t l = sizeof f;
    getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &f, &l);
    return f;
}
static int connecting(int port) {
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    int one = 1, fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK) || setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one))
        return -1;
    if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        if (errno != EINPROGRESS) return -1;
        struct pollfd p = {.fd = fd, .events = POLLOUT};
        int err = 0;
        socklen_t l = sizeof err;
        if (poll(&p, 1, 5000) != 1 || getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &l) || err) return -1;
    }
    return fd;
}
/* n bytes from fd `from` to fd `to` by one thread: both in turn (a socket holds less than n). */
static int transfer(int from, int to, const char *out, char *in, int n) {
    int sent = 0, got = 0;
    for (int idle = 0; got < n && idle < 5000;) {
        int s = sent < n ? send(from, out + sent, n - sent, MSG_DONTWAIT | MSG_NOSIGNAL) : 0;
        int r = recv(to, in + got, n - got, MSG_DONTWAIT);
        if ((s < 0 && errno != EAGAIN) || r == 0 || (r < 0 && errno != EAGAIN)) return -1;
        sent += s > 0 ? s : 0;
        got += r > 0 ? r : 0;
        if (s <= 0 && r <= 0) { idle++; usleep(1000); } else idle = 0;
    }
    return got == n ? 0 : -1;
}
static int io(int fd, char *buf, int n, int out) {
    for (int done = 0; done < n;) {
        int r = out ? send(fd, buf + done, n - done, MSG_DONTWAIT | MSG_NOSIGNAL) : recv(fd, buf + done, n - done, MSG_DONTWAIT);
        if (r > 0) done += r;
        else if (r == 0 || (errno != EAGAIN && errno != EWOULDBLOCK)) return -1;
        else { struct pollfd p = {.fd = fd, .events = out ? POLLOUT : POLLIN}; poll(&p, 1, 100); }
    }
    return 0;
}
int sockets(int other_port) {
    int before = fds_open(), one = 1;
    struct sockaddr_in a = {.sin_family = AF_INET};
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    socklen_t len = sizeof a;
    int l = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fcntl(l, F_SETFL, O_NONBLOCK) || bind(l, (struct sockaddr *)&a, sizeof a) || getsockname(l, (struct sockaddr *)&a, &len) ||
        listen(l, 16384))
        return 1;
    int c = connecting(ntohs(a.sin_port));
    if (c < 0) return 2;
    struct sockaddr_in6 peer; /* room for any family, as NCCL's address union */
    socklen_t plen = sizeof peer;
    int s = -1;
    for (int i = 0; i < 500 && s < 0; i++) {
        s = accept(l, (struct sockaddr *)&peer, &plen);
        if (s < 0) usleep(1000);
    }
    if (s < 0 || fcntl(s, F_SETFL, O_NONBLOCK) || setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one)) return 3;
    char *out = malloc(N), *in = calloc(1, N), reply = 0;
    for (int i = 0; i < N; i++) out[i] = (char)(i * 7 + 1);
    if (transfer(c, s, out, in, N) || io(s, "!", 1, 1) || io(c, &reply, 1, 0)) return 4;
    char host[64] = "?";
    struct sockaddr_in *p4 = (struct sockaddr_in *)&peer;
    if (peer.sin6_family == AF_INET) inet_ntop(AF_INET, &p4->sin_addr, host, sizeof host);
    printf("listener %d connected %d accepted %d peer %d %s:%d whole %d reply %c nonblock %d cloexec %d\n",
           family(l), family(c), family(s), peer.sin6_family, host, ntohs(p4->sin_port), !memcmp(in, out, N), reply,
           !!(fcntl(c, F_GETFL) & O_NONBLOCK), !!(fcntl(c, F_GETFD) & FD_CLOEXEC));
    close(c);
    close(s);
    close(l);
    int after = fds_open();
    int o = connecting(other_port);
    if (o < 0 || io(o, &reply, 1, 0)) return 5;
    printf("fds %d %d other %d %c\n", before, after, family(o), reply);
    close(o);
    return fflush(stdout);
}
"""

SOCKETS_PY = r"""
import ctypes, socket, sys, threading
other = socket.create_server(("127.0.0.1", 0))
def serve():
    conn, _ = other.accept()
    conn.sendall(b"k")
    conn.close()
threading.Thread(target=serve, daemon=True).start()
sys.exit(ctypes.CDLL(sys.argv[1]).sockets(other.getsockname()[1]))
"""


@pytest.mark.parametrize("local", [True, False], ids=["local-sockets", "tcp"])
def test_nccls_tcp_on_one_machine_goes_over_unix_sockets(lib_dir: Path, clean_env: dict[str, str], tmp_path: Path,
                                                         local: bool) -> None:
    """With NCCLSIM_LOCAL_SOCKETS=1 NCCL's TCP listener becomes a Unix socket
    in its place and NCCL's connects to it follow: the data arrives whole,
    the connecting socket keeps its flags, TCP_NODELAY is accepted, the
    accepted peer reads as an address of NCCL's family, closing the listener
    leaves no descriptor behind, and a listener that is not NCCL's is still
    reached over TCP. Without the setting everything stays TCP."""
    src = tmp_path / "sockets.c"
    src.write_text(SOCKETS_C)
    lib = tmp_path / "libnccl.so.2"  # the host library knows NCCL by its file name
    subprocess.run(["cc", "-shared", "-fPIC", "-O2", "-Wall", "-Werror", str(src), "-o", str(lib)], check=True)
    env = {**clean_env, "LD_PRELOAD": str(lib_dir / HOST_PRELOAD), "NCCLSIM_LOCAL_SOCKETS": "1" if local else "0"}
    proc = subprocess.run([sys.executable, "-c", SOCKETS_PY, str(lib)], env=env, text=True, capture_output=True,
                          timeout=30)
    assert proc.returncode == 0, (proc.returncode, proc.stderr)
    first, second = proc.stdout.splitlines()
    inet, unix = str(socket.AF_INET.value), str(socket.AF_UNIX.value)
    kind = unix if local else inet
    peer_port = "0" if local else first.split(":")[1].split()[0]  # TCP: the connecting socket's own port
    assert first.split() == ["listener", kind, "connected", kind, "accepted", kind, "peer", inet, f"127.0.0.1:{peer_port}",
                             "whole", "1", "reply", "!", "nonblock", "1", "cloexec", "1"], first
    fds = second.split()
    assert fds[0] == "fds" and fds[1] == fds[2], second  # the listener's TCP socket closed with it
    assert fds[3:] == ["other", inet, "k"], second
