"""libncclsim-host.so shares NCCL's identical regions among the processes of a
run (NCCLSIM_SHARED_PAGES): a large calloc of NCCL's, once written, is looked
up by its bytes in the store; the second time a region's bytes are seen they
are stored, and from then on every equal region is a private mapping of that
file. The bytes read never change, a write
lands in its writer's copy alone, and a write made while a region is being
replaced waits for the replacement instead of being lost."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from ncclsim.platform.env import HOST_PRELOAD

# NCCL's per-channel peer structures as it makes them (initChannel): ncclCalloc
# (malloc and memset, which the compiler makes one calloc), then a reference
# count written in each.
PEERS_C = r"""
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
void *peers(size_t count, size_t size, int value)
{
    char *p = calloc(count, size);
    for (size_t i = 0; i < count; i++) __atomic_add_fetch((int *)(p + i * size + 8), value, __ATOMIC_SEQ_CST);
    return p;
}
/* NCCL's next zero fill, at which the thread's regions are shared */
void next_fill(char *small, size_t n) { memset(small, 0, n); }
/* As NCCL's initChannel: its memory stack zeroes another allocation between
 * the calloc and the writes. */
void *peers_late(size_t count, size_t size, int value, char *small, size_t n)
{
    char *p = calloc(count, size);
    next_fill(small, n);
    for (size_t i = 0; i < count; i++) __atomic_add_fetch((int *)(p + i * size + 8), value, __ATOMIC_SEQ_CST);
    return p;
}
void release(void *p) { free(p); }
/* peers() while another thread writes what the region already holds, from
 * before the region is shared (at next_fill) until after; the two threads on
 * different CPUs, so that they run at once. */
struct writer { int *volatile at; volatile int started, stop; long writes; };
static void *write_on(void *arg)
{
    struct writer *w = arg;
    while (!w->at) {}
    w->started = 1;
    while (!w->stop) { *w->at = 1; w->writes++; }
    return NULL;
}
static void pin(pthread_t t, int last)
{
    cpu_set_t all, one;
    sched_getaffinity(0, sizeof all, &all);
    int pick = -1;
    for (int c = 0; c < CPU_SETSIZE; c++)
        if (CPU_ISSET(c, &all) && (pick < 0 || last)) pick = c;
    CPU_ZERO(&one);
    CPU_SET(pick, &one);
    pthread_setaffinity_np(t, sizeof one, &one);
}
void *peers_while_written(size_t count, size_t size, int value, char *small, size_t n, long *writes)
{
    struct writer w = {0};
    pthread_t t;
    pthread_create(&t, NULL, write_on, &w);
    pin(t, 1);
    pin(pthread_self(), 0);
    char *p = peers(count, size, value);
    w.at = (int *)(p + 8);
    while (!w.started) {}
    next_fill(small, n);
    w.stop = 1;
    pthread_join(t, NULL);
    *writes = w.writes;
    return p;
}
"""

# What both drivers read of their own memory: the mappings overlapping
# [lo, hi), each with its file (if any) and its private memory (kB).
AREAS = r"""
def areas(lo, hi):
    out, cur = [], None
    for line in open("/proc/self/smaps"):
        head = line.split()
        if "-" in head[0] and len(head) >= 5:
            a, b = (int(x, 16) for x in head[0].split("-"))
            cur = {"path": head[5] if len(head) > 5 else "", "anon": 0}
            if a < hi and b > lo:
                out.append(cur)
        elif head[0] == "Anonymous:" and cur is not None:
            cur["anon"] = int(head[1])
    return out
"""

# argv: the library, the number of regions, how they are made ("plain";
# "late": written after another zero fill; "hammer": another thread writes the
# last one while it is shared), optionally each one's count. Prints, per
# region: the store files mapped inside it, whether its bytes are still
# NCCL's, its private memory (kB); then what the third's write did to the
# second, and how many writes waited for a replacement.
DRIVER = r"""
import ctypes, json, sys
lib = ctypes.CDLL(sys.argv[1])
waits = ctypes.CDLL(None).ncclsim_shared_pages_waits
waits.restype = ctypes.c_ulong
lib.peers.restype = ctypes.c_void_p
lib.peers.argtypes = (ctypes.c_size_t, ctypes.c_size_t, ctypes.c_int)
lib.peers_while_written.restype = ctypes.c_void_p
lib.peers_late.restype = ctypes.c_void_p
SIZE = 1040
small = ctypes.create_string_buffer(64)

def expected(value):
    one = bytearray(SIZE)
    one[8:12] = value.to_bytes(4, "little")
    return bytes(one) * COUNT

report = []
n, hammer, late = int(sys.argv[2]), sys.argv[3] == "hammer", sys.argv[3] == "late"
# A region the other thread writes is larger: its comparison takes a while
# (17 MB: milliseconds).
COUNT = 16384 if hammer else 1024
values = [int(v) for v in sys.argv[4].split(",")] if len(sys.argv) > 4 else [1] * n
for i in range(n):
    if hammer and i == n - 1:
        writes = ctypes.c_long(0)
        p = lib.peers_while_written(ctypes.c_size_t(COUNT), ctypes.c_size_t(SIZE), values[i], small,
                                    ctypes.c_size_t(64), ctypes.byref(writes))
        assert writes.value > 0
    elif late:
        p = lib.peers_late(ctypes.c_size_t(COUNT), ctypes.c_size_t(SIZE), values[i], small, ctypes.c_size_t(64))
        lib.next_fill(small, 64)
    else:
        p = lib.peers(COUNT, SIZE, values[i])
        lib.next_fill(small, 64)
    found = areas(p, p + COUNT * SIZE)
    report.append({"files": [a["path"] for a in found if "/" in a["path"]],
                   "anon_kb": sum(a["anon"] for a in found),
                   "intact": ctypes.string_at(p, COUNT * SIZE) == expected(values[i]), "p": p})
# A write lands in its writer's copy alone.
if n >= 3:
    ctypes.c_int.from_address(report[2]["p"] + 5 * SIZE + 8).value = 7
    report.append({"others_unchanged": ctypes.string_at(report[1]["p"], COUNT * SIZE) == expected(values[1]),
                   "written": ctypes.c_int.from_address(report[2]["p"] + 5 * SIZE + 8).value})
for r in report:
    if "p" in r:
        lib.release(ctypes.c_void_p(r.pop("p")))
report.append({"waits": waits()})
print(json.dumps(report))
"""


@pytest.fixture
def peers_lib(tmp_path: Path) -> Path:
    src = tmp_path / "peers.c"
    src.write_text(PEERS_C)
    lib = tmp_path / "libnccl.so.2"  # the host library knows NCCL by its file name
    subprocess.run(["cc", "-shared", "-fPIC", "-O2", "-pthread", "-Wall", "-Werror", str(src), "-o", str(lib)],
                   check=True)
    return lib


def _run(lib: Path, env: dict[str, str], regions: int, how: str = "plain",
         values: tuple[int, ...] = ()) -> list[dict]:
    args = [sys.executable, "-c", AREAS + DRIVER, str(lib), str(regions), how]
    if values:
        args.append(",".join(map(str, values)))
    proc = subprocess.run(args, env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def _env(clean_env: dict[str, str], lib_dir: Path, store: Path) -> dict[str, str]:
    store.mkdir()
    return {**clean_env, "LD_PRELOAD": str(lib_dir / HOST_PRELOAD), "NCCLSIM_SHARED_PAGES": str(store / "pages")}


def test_equal_regions_share_one_file(peers_lib: Path, lib_dir: Path, clean_env: dict[str, str],
                                      tmp_path: Path) -> None:
    """The first region leaves a marker, the second stores its bytes, every
    later one (in this process or another) maps them; the bytes stay NCCL's,
    the mapped ones hold no private memory, and a write stays its writer's."""
    store = tmp_path / "store"
    env = _env(clean_env, lib_dir, store)
    first, second, third, after, waits = _run(peers_lib, env, 3)
    assert all(r["intact"] for r in (first, second, third))
    assert first["files"] == [] and first["anon_kb"] >= 900  # 1 MiB written, its own
    stored = [f for f in store.iterdir() if not f.name.endswith(".seen")]
    assert len(stored) == 1 and len(list(store.glob("*.seen"))) == 1, sorted(store.iterdir())
    for shared in (second, third):
        assert shared["files"] == [str(stored[0])]
        assert shared["anon_kb"] <= 8  # nothing of its own but a page the allocator may add
    assert after == {"others_unchanged": True, "written": 7}
    again = _run(peers_lib, env, 1)[0]  # another process: shared at once
    assert again["intact"] and again["files"] == [str(stored[0])]


def test_a_region_written_after_another_fill_is_shared_at_the_next(peers_lib: Path, lib_dir: Path,
                                                                      clean_env: dict[str, str],
                                                                      tmp_path: Path) -> None:
    """A region still all zeros at the thread's next fill waits for the one
    after (NCCL zeroes its memory stack's allocation before writing the peers)."""
    report = _run(peers_lib, _env(clean_env, lib_dir, tmp_path / "store"), 3, how="late")
    assert all(r["intact"] for r in report[:3])
    assert report[0]["files"] == [] and report[1]["files"] and report[1]["files"] == report[2]["files"]


def test_different_bytes_are_not_shared(peers_lib: Path, lib_dir: Path, clean_env: dict[str, str],
                                        tmp_path: Path) -> None:
    store = tmp_path / "store"
    report = _run(peers_lib, _env(clean_env, lib_dir, store), 3, values=(1, 2, 3))
    assert all(r["intact"] and r["files"] == [] for r in report[:3])
    assert len(list(store.glob("*.seen"))) == 3 and len(list(store.iterdir())) == 3


@pytest.mark.e2e  # a race, tried up to three times: 0.3-1 s
def test_a_write_during_the_replacement_is_kept(peers_lib: Path, lib_dir: Path, clean_env: dict[str, str],
                                                 tmp_path: Path) -> None:
    """Another thread writes into the region while it is compared and replaced:
    its writes fault, wait, and land in the new mapping; nothing is lost."""
    for attempt in range(3):  # the writer, on the other CPU, may be kept off it for the whole comparison
        report = _run(peers_lib, _env(clean_env, lib_dir, tmp_path / f"store{attempt}"), 3, how="hammer")
        assert all(r["intact"] for r in report[:3])
        assert report[2]["files"] and report[2]["anon_kb"] >= 4  # shared, then the writer's page copied
        if report[-1]["waits"] >= 1:  # the writer did write during the replacement
            break
    assert report[-1]["waits"] >= 1, report[-1]


@pytest.mark.parametrize("case", ["no-store", "not-nccl"])
def test_only_nccls_regions_with_a_store(case: str, peers_lib: Path, lib_dir: Path, clean_env: dict[str, str],
                                         tmp_path: Path) -> None:
    store = tmp_path / "store"
    env = _env(clean_env, lib_dir, store)
    lib = peers_lib
    if case == "no-store":
        del env["NCCLSIM_SHARED_PAGES"]
    else:
        lib = peers_lib.with_name("libother.so")
        peers_lib.rename(lib)
    report = _run(lib, env, 3)
    assert all(r["intact"] and r["files"] == [] for r in report[:3])
    assert list(store.iterdir()) == []


# NCCL's pool of proxy operations as it makes it (allocateArgs): ncclCalloc'd,
# then chained, a pointer to the next element in each (33 KB: one word per 8
# pages); the first element is then used, with this process's own values.
POOL_C = r"""
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
struct job { size_t count, size; long own; char *p; };
static void *progress(void *arg)
{
    struct job *j = arg;
    prctl(PR_SET_NAME, "NCCL Progress0");
    char *p = calloc(j->count, j->size);
    for (size_t i = 0; i + 1 < j->count; i++) *(char **)(p + i * j->size) = p + (i + 1) * j->size;
    *(long *)(p + 64) = j->own;
    sched_yield(); /* idle: its pool is shared */
    j->p = p;
    return NULL;
}
/* NCCL's progress thread makes the pool, chains it, uses its first element. */
char *pool(size_t count, size_t size, long own)
{
    struct job j = {count, size, own, NULL};
    pthread_t t;
    pthread_create(&t, NULL, progress, &j);
    pthread_join(t, NULL);
    return j.p;
}
/* NCCL's topology system: written bit by bit through init, by a thread
 * that allocates and zeroes more meanwhile. */
char *filled_slowly(size_t count, size_t size, long own, char *small, size_t n)
{
    char *p = calloc(count, size);
    for (size_t i = 0; i + 1 < count; i++) {
        *(char **)(p + i * size) = p + (i + 1) * size;
        if (i % 64 == 0) memset(small, 0, n);
    }
    *(long *)(p + 64) = own;
    return p;
}
void next_fill(char *small, size_t n) { memset(small, 0, n); }
"""

# argv: the library, this process's value, how the region is made ("pool";
# "slowly": then shared at a kernel launch of NCCL's, a second after;
# "stable": slowly, then shared at its thread's fill once it stopped growing). Prints
# where it lies, the store files mapped inside it (at the first look too),
# whether its bytes are still its own, its private memory (kB); where a freed
# region's place goes next; whether realloc of one keeps its bytes.
POOL_DRIVER = r"""
import ctypes, json, struct, sys
lib = ctypes.CDLL(sys.argv[1])
libc = ctypes.CDLL(None)
libc.realloc.restype = ctypes.c_void_p
libc.realloc.argtypes = (ctypes.c_void_p, ctypes.c_size_t)
libc.free.argtypes = (ctypes.c_void_p,)
lib.pool.restype = ctypes.c_void_p
lib.pool.argtypes = (ctypes.c_size_t, ctypes.c_size_t, ctypes.c_long)
COUNT, SIZE, own, how = 256, 33016, int(sys.argv[2]), sys.argv[3]
lib.filled_slowly.restype = ctypes.c_void_p
lib.filled_slowly.argtypes = (ctypes.c_size_t, ctypes.c_size_t, ctypes.c_long, ctypes.c_char_p, ctypes.c_size_t)
small = ctypes.create_string_buffer(64)

def expected(p):
    b = bytearray(COUNT * SIZE)
    for i in range(COUNT - 1):
        struct.pack_into("<Q", b, i * SIZE, p + (i + 1) * SIZE)
    struct.pack_into("<q", b, 64, own)
    return bytes(b)

def make():
    if how == "pool":
        return lib.pool(COUNT, SIZE, own)
    return lib.filled_slowly(COUNT, SIZE, own, small, 64)

def mapped(p):
    return sorted({a["path"] for a in areas(p, p + COUNT * SIZE) if "/" in a["path"]})

p = make()
lib.next_fill(small, 64)
report = {"at_first_look": mapped(p)}
if how == "slowly":
    import time
    time.sleep(1.1)  # noted a second before: its init is over
    libc.ncclsim_shared_pages_settle()
elif how == "stable":
    import time
    for wait in (0.06, 0.11):  # looked at again after 50 ms (grown since), then 100 ms (as large)
        time.sleep(wait)
        lib.next_fill(small, 64)
found = areas(p, p + COUNT * SIZE)
report |= {"p": p, "files": sorted({a["path"] for a in found if "/" in a["path"]}),
          "anon_kb": sum(a["anon"] for a in found), "intact": ctypes.string_at(p, COUNT * SIZE) == expected(p)}
head = ctypes.string_at(p, 4096)
q = libc.realloc(p, 2 * COUNT * SIZE)
report["realloc_keeps"] = q != p and ctypes.string_at(q, 4096) == head
libc.free(q)
again = make()
report["place_again"] = again == p
print(json.dumps(report))
"""


@pytest.mark.parametrize("how", ["pool", pytest.param("slowly", marks=pytest.mark.e2e),  # 1.1 s each
                                 pytest.param("stable", marks=pytest.mark.e2e)])
def test_sparse_regions_share_the_pages_equal_in_their_place(how: str, tmp_path: Path, lib_dir: Path,
                                                             clean_env: dict[str, str]) -> None:
    """A sparse region of NCCL's lies at the same address in every process, so
    its chained pointers are the same bytes: the first process leaves a
    marker, the second stores its pages, the third maps them all but the
    page that holds its own values. A pool of proxy operations is shared when
    its progress thread idles; a region written slowly through NCCL's init
    once its thread finds it no larger than the time before, or at NCCL's
    next kernel launch. free and realloc know the placed region."""
    src = tmp_path / "pool.c"
    src.write_text(POOL_C)
    lib = tmp_path / "libnccl.so.2"
    subprocess.run(["cc", "-shared", "-fPIC", "-O2", "-pthread", "-Wall", "-Werror", str(src), "-o", str(lib)],
                   check=True)
    store = tmp_path / "store"
    env = _env(clean_env, lib_dir, store)
    runs = []
    for own in (11, 22, 33):
        proc = subprocess.run([sys.executable, "-c", AREAS + POOL_DRIVER, str(lib), str(own), how], env=env,
                              capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0, proc.stderr
        runs.append(json.loads(proc.stdout))
    first, second, third = runs
    assert first["p"] == second["p"] == third["p"]
    assert all(r["intact"] and r["realloc_keeps"] and r["place_again"] for r in runs)
    stored = [f for f in store.iterdir() if not f.name.endswith(".seen")]
    assert len(stored) == 1 and f"-at{first['p']:x}" in stored[0].name, sorted(store.iterdir())
    assert first["files"] == [] and first["anon_kb"] >= 1000  # a page of its own for each of 255 pointers
    assert second["files"] == third["files"] == [str(stored[0])]
    assert third["anon_kb"] <= 16  # the page with its own values (and one the allocator may add)
    if how != "pool":  # growing at its thread's first look: shared later (stable: with no launch)
        assert third["at_first_look"] == []


# Regions of NCCL's init that hold their last bytes only once it is over:
# blocks of 404 KiB, a few words written in each 51,200-byte structure (a
# thousand per process, at different places in different processes), and
# structures of 1.2 MB written with zeros but for a page in 16.
INIT_C = r"""
#include <stdlib.h>
#include <string.h>
char *empty(size_t bytes)
{
    char *p = calloc(1, bytes);
    __asm__ volatile("" : : "r"(p) : "memory"); /* not a tail call: calloc sees this library as its caller */
    return p;
}
char *block(size_t bytes, long v)
{
    char *p = calloc(1, bytes);
    for (size_t at = 0; at + 16 <= bytes; at += 51200) ((volatile long *)(p + at))[1] = v;
    return p;
}
char *zeroed(size_t bytes, long v)
{
    char *p = calloc(1, bytes);
    for (size_t at = 0; at < bytes; at += 4096) *(volatile char *)(p + at) = 0;
    for (size_t at = 0; at < bytes; at += 16 * 4096) *(volatile long *)(p + at) = v;
    return p;
}
void next_fill(char *small, size_t n) { memset(small, 0, n); }
"""

# argv: the library, how many empty regions of the size come first (another
# place), "block" or "zeroed". Prints where the region lies, the store files
# mapped inside it before NCCL's kernel launch and after, whether its bytes
# are intact, its private memory (kB).
INIT_DRIVER = r"""
import ctypes, json, struct, sys, time
lib = ctypes.CDLL(sys.argv[1])
libc = ctypes.CDLL(None)
before, how = int(sys.argv[2]), sys.argv[3]
size = (101 if how == "block" else 293) * 4096
make = getattr(lib, how)
make.restype = lib.empty.restype = ctypes.c_void_p
make.argtypes = (ctypes.c_size_t, ctypes.c_long)
lib.empty.argtypes = (ctypes.c_size_t,)
small = ctypes.create_string_buffer(64)
for _ in range(before):
    lib.empty(size)
p = make(size, 5)
expected = bytearray(size)
for at in range(0, size - 15, 51200) if how == "block" else range(0, size, 16 * 4096):
    struct.pack_into("<q", expected, at + (8 if how == "block" else 0), 5)

def mapped():
    return sorted({a["path"] for a in areas(p, p + size) if "/" in a["path"]})

for wait in (0, 0.06, 0.11):  # its thread's looks: at once, after 50 ms, after 100 ms
    time.sleep(wait)
    lib.next_fill(small, 64)
report = {"before_launch": mapped()}
libc.ncclsim_shared_pages_settle()  # noted more than 100 ms before: NCCL's init is over
found = areas(p, p + size)
report |= {"p": p, "files": mapped(), "anon_kb": sum(a["anon"] for a in found),
           "intact": ctypes.string_at(p, size) == bytes(expected)}
print(json.dumps(report))
"""


@pytest.mark.e2e  # three processes that wait 170 ms each: 0.6 s
@pytest.mark.parametrize("how", ["block", "zeroed"])
def test_regions_of_nccls_init_are_shared_at_its_launch(how: str, tmp_path: Path, lib_dir: Path,
                                                        clean_env: dict[str, str]) -> None:
    """A small sparse region (a block of NCCL's init) is looked up by its bytes
    wherever it lies: as soon as it stops growing, and again at NCCL's kernel
    launch (the first process, which left a marker, stores it then). A large
    one with a little data and zeros written over the rest is looked up by
    its place, at the launch only: the first process leaves a marker, the
    second stores the bytes, the third maps them, its zeros' pages given back."""
    src = tmp_path / "init.c"
    src.write_text(INIT_C)
    lib = tmp_path / "libnccl.so.2"
    subprocess.run(["cc", "-shared", "-fPIC", "-O2", "-Wall", "-Werror", str(src), "-o", str(lib)], check=True)
    store = tmp_path / "store"
    env = _env(clean_env, lib_dir, store)
    runs = []
    for before in (0, 1, 2) if how == "block" else (0, 0, 0):
        proc = subprocess.run([sys.executable, "-c", AREAS + INIT_DRIVER, str(lib), str(before), how], env=env,
                              capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0, proc.stderr
        runs.append(json.loads(proc.stdout))
    first, second, third = runs
    assert all(r["intact"] for r in runs)
    stored = [f for f in store.iterdir() if not f.name.endswith(".seen")]
    assert len(stored) == 1, sorted(store.iterdir())
    if how == "block":  # another place in every process, the same file
        assert len({first["p"], second["p"], third["p"]}) == 3 and "-at" not in stored[0].name
        assert first["before_launch"] == [] and first["files"] == [str(stored[0])]
        assert second["before_launch"] == third["before_launch"] == [str(stored[0])]
    else:
        assert first["p"] == second["p"] == third["p"] and f"-at{first['p']:x}" in stored[0].name
        assert all(r["before_launch"] == [] for r in runs)
        assert first["files"] == [] and first["anon_kb"] >= 1100  # 293 pages written, zeros or not
    assert second["files"] == third["files"] == [str(stored[0])]
    assert third["anon_kb"] <= 8  # nothing of its own but a page the allocator may add
