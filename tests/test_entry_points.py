"""fake_cuda/driver/entry_points.def: the list behind cuGetProcAddress.

The file is read from the repository (tests live in it). Checked here: its
shape (sorted by name, versions ascending, per-thread variants named so), that
every function type of the CUDA headers' cudaTypedefs.h has its row, that
every listed symbol is exported by libcuda.so.1, and that cuGetProcAddress_v2
answers every (name, version, flags) exactly as the list says, compared with
dlsym of the listed symbol (an N row: a function answering
CUDA_ERROR_NOT_SUPPORTED). The lookups run in a child process through
tests/workloads/driver_checks.py (cffi for cuGetProcAddress, ctypes for dlsym).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import pytest

ROOT = Path(__file__).resolve().parent.parent
DEF_FILE = ROOT / "fake_cuda" / "driver" / "entry_points.def"
CHECKS = ROOT / "tests" / "workloads" / "driver_checks.py"

# cuda.h
CUDA_SUCCESS, CUDA_ERROR_NOT_FOUND, CUDA_ERROR_NOT_SUPPORTED = 0, 500, 801
UNSUPPORTED = "<not supported>"  # resolve()'s symbol for an N row
STATUS_SUCCESS, STATUS_SYMBOL_NOT_FOUND, STATUS_VERSION_NOT_SUFFICIENT = 0, 1, 2
FLAG_DEFAULT, FLAG_LEGACY_STREAM, FLAG_PER_THREAD_DEFAULT_STREAM = 0, 1, 2

# What NCCL 2.32.3 (cu12 wheel) asks cuGetProcAddress_v2 for at version 12090, flags 0,
# once the runtime is up (recorded from a real run against this driver).
NCCL_12090 = """
cuGetErrorString cuGetErrorName cuInit cuDeviceGet cuDeviceGetCount cuDeviceGetAttribute
cuDeviceGetUuid cuMemGetAddressRange cuCtxCreate cuCtxDestroy cuCtxGetCurrent cuCtxSetCurrent
cuCtxGetDevice cuDevicePrimaryCtxRetain cuDevicePrimaryCtxRelease cuLaunchKernel cuLaunchKernelEx
cuMemAddressReserve cuMemAddressFree cuMemCreate cuMemGetAllocationGranularity
cuMemExportToShareableHandle cuMemImportFromShareableHandle cuMemMap cuMemRelease
cuMemRetainAllocationHandle cuMemSetAccess cuMemUnmap cuMemGetAllocationPropertiesFromHandle
cuPointerGetAttribute cuPointerSetAttribute cuMemGetHandleForAddressRange cuStreamBatchMemOp
cuStreamWaitValue32 cuStreamWaitValue64 cuStreamWriteValue32 cuStreamWriteValue64 cuMemAlloc
cuStreamCreate cuStreamSynchronize
""".split()
# Also asked for, but optional to NCCL: without them it runs without NVLink SHARP (NVLS).
NCCL_12090_OPTIONAL = """
cuMulticastAddDevice cuMulticastBindMem cuMulticastBindAddr cuMulticastCreate
cuMulticastGetGranularity cuMulticastUnbind
""".split()


@dataclass(frozen=True)
class Entry:
    kind: str  # "E", "P" (per-thread default stream variant) or "N" (not supported)
    name: str
    version: int
    symbol: str  # exported; an N row's answers CUDA_ERROR_NOT_SUPPORTED
    line: int


_ENTRY = re.compile(r"^([EPN])\(\s*(cu\w+)\s*,\s*(\d+)\s*,\s*(cu\w+)\s*\)$")


def parse_def(text: str) -> list[Entry]:
    """Entries in file order. Comments are blanked (keeping line numbers); any
    other line that is not an entry is an error."""
    text = re.sub(r"/\*.*?\*/", lambda m: "\n" * m.group(0).count("\n"), text, flags=re.S)
    entries = []
    for lineno, raw in enumerate(text.splitlines(), 1):
        s = raw.split("//", 1)[0].strip()
        if not s:
            continue
        m = _ENTRY.match(s)
        assert m, f"{DEF_FILE.name}:{lineno}: not an E()/P()/N() entry: {raw!r}"
        entries.append(Entry(m.group(1), m.group(2), int(m.group(3)), m.group(4), lineno))
    return entries


def resolve(entries: list[Entry], name: str, version: int, flags: int,
            ) -> tuple[int, int, Optional[str]]:
    """What the list says cuGetProcAddress_v2 answers: (result, status, symbol)."""
    mine = [e for e in entries if e.name == name]
    if not mine:
        return CUDA_ERROR_NOT_FOUND, STATUS_SYMBOL_NOT_FOUND, None
    usable = [e for e in mine if e.version <= version]
    if not usable:
        return CUDA_ERROR_NOT_FOUND, STATUS_VERSION_NOT_SUFFICIENT, None
    best_e = max((e for e in usable if e.kind in "EN"), key=lambda e: e.version, default=None)
    best_p = max((e for e in usable if e.kind == "P"), key=lambda e: e.version, default=None)
    if flags & FLAG_PER_THREAD_DEFAULT_STREAM and best_p is not None and (
            best_e is None or best_p.version >= best_e.version):
        return CUDA_SUCCESS, STATUS_SUCCESS, best_p.symbol
    assert best_e is not None, name
    return CUDA_SUCCESS, STATUS_SUCCESS, UNSUPPORTED if best_e.kind == "N" else best_e.symbol


@pytest.fixture(scope="module")
def entries() -> list[Entry]:
    assert DEF_FILE.exists(), f"{DEF_FILE} is missing: these tests run from the source repository"
    e = parse_def(DEF_FILE.read_text())
    assert len(e) > 100, f"only {len(e)} entries parsed from {DEF_FILE}"
    return e


def lookup(lib_dir: Path, clean_env: dict[str, str], symbols: list[str],
           queries: list[tuple[str, int, int]], call: list[tuple[str, int]] = []) -> dict:
    env = dict(clean_env)
    env.pop("LD_PRELOAD", None)
    env["LD_LIBRARY_PATH"] = str(lib_dir)
    env["NCCLSIM_LOG"] = "0"
    r = subprocess.run([sys.executable, str(CHECKS), "proc_address"], env=env, text=True,
                       input=json.dumps({"symbols": symbols, "queries": queries, "call": call}),
                       capture_output=True, timeout=60)
    assert r.returncode == 0, f"proc_address failed ({r.returncode}):\n{r.stdout[-2000:]}\n{r.stderr}"
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("RESULT ")]
    assert len(lines) == 1, r.stdout[-2000:]
    return json.loads(lines[0][len("RESULT "):])


# --------------------------------------------------------------------------------------------------
# The file itself


def test_sorted_by_name_with_ascending_versions(entries):
    names = [e.name for e in entries]
    # Byte order: the driver binary-searches the table with strcmp.
    for a, b in zip(entries, entries[1:]):
        assert a.name.encode() <= b.name.encode(), f"line {b.line}: {b.name} after {a.name}"
    for kinds in ("EN", "P"):  # N rows share the default-stream versions with E rows
        seen: dict[str, int] = {}
        for e in entries:
            if e.kind not in kinds:
                continue
            prev = seen.get(e.name)
            assert prev is None or e.version > prev, (
                f"line {e.line}: {e.kind}({e.name}, {e.version}) not above version {prev}")
            seen[e.name] = e.version
    for a, b in zip(entries, entries[1:]):
        if a.name == b.name:
            assert a.version <= b.version, f"line {b.line}: versions of {b.name} go down"
    assert len(set(names)) > 150


def test_entry_shapes(entries):
    first: dict[str, Entry] = {}
    for e in entries:
        first.setdefault(e.name, e)
        assert 2000 <= e.version <= 13000 and e.version % 10 == 0, f"line {e.line}: {e.version}"
        assert e.symbol == e.name or e.symbol.startswith(e.name + "_"), (
            f"line {e.line}: {e.symbol} is not a variant of {e.name}")
        ptds = e.symbol.endswith(("_ptsz", "_ptds"))
        assert ptds == (e.kind == "P"), f"line {e.line}: {e.kind}(..., {e.symbol})"
    # Every name has a default-stream entry at its first version.
    for name, e in first.items():
        assert e.kind in "EN", f"line {e.line}: {name} starts with a per-thread entry"
    # Each symbol stands for one ABI: it is listed once per kind.
    seen = set()
    for e in entries:
        key = (e.kind, e.symbol)
        assert key not in seen, f"line {e.line}: {e.symbol} listed twice"
        seen.add(key)


def test_parser_rejects_garbage():
    with pytest.raises(AssertionError):
        parse_def("E(cuInit, 2000, cuInit)\nE(cuInit 2000 cuInit)\n")
    assert parse_def("/* E(x, 1, y)\n */\nE(cuInit, 2000, cuInit)\n") == [
        Entry("E", "cuInit", 2000, "cuInit", 3)]


# --------------------------------------------------------------------------------------------------
# The library against the file


def all_queries(entries: list[Entry]) -> list[tuple[str, int, int]]:
    """Around every listed version of every name, with each stream flag."""
    by_name: dict[str, list[int]] = {}
    for e in entries:
        by_name.setdefault(e.name, []).append(e.version)
    queries = []
    for name, versions in by_name.items():
        vs = {min(versions) - 10, 12090, 13000}
        for v in versions:
            vs |= {v, v + 10}
        for v in sorted(vs):
            for flags in (FLAG_DEFAULT, FLAG_LEGACY_STREAM, FLAG_PER_THREAD_DEFAULT_STREAM):
                queries.append((name, v, flags))
    return queries


EXPLICIT = [
    # (name, version, flags) -> listed symbol, or a (result, status) failure
    (("cuMemAlloc", 3020, 0), "cuMemAlloc_v2"),
    (("cuMemAlloc", 2000, 0), "cuMemAlloc"),
    (("cuMemAlloc", 12090, 0), "cuMemAlloc_v2"),
    (("cuStreamGetCaptureInfo", 11030, 0), "cuStreamGetCaptureInfo_v2"),
    (("cuStreamGetCaptureInfo", 12030, 0), "cuStreamGetCaptureInfo_v3"),
    (("cuStreamGetCaptureInfo", 11030, 2), "cuStreamGetCaptureInfo_v2_ptsz"),
    (("cuMemcpyAsync", 12090, 2), "cuMemcpyAsync_ptsz"),
    (("cuMemcpyAsync", 12090, 0), "cuMemcpyAsync"),
    (("cuMemcpyAsync", 12090, 1), "cuMemcpyAsync"),
    (("cuMemcpyHtoD", 12090, 2), "cuMemcpyHtoD_v2_ptds"),
    (("cuGetProcAddress", 12000, 0), "cuGetProcAddress_v2"),
    (("cuGetProcAddress", 11030, 0), "cuGetProcAddress"),
    (("cuMemCreate", 9000, 0), (CUDA_ERROR_NOT_FOUND, STATUS_VERSION_NOT_SUFFICIENT)),
    (("cuGraphCreate", 12090, 0), UNSUPPORTED),
    (("cuCtxSynchronize", 13000, 0), "cuCtxSynchronize_v2"),
    (("cuNoSuchCall", 12090, 0), (CUDA_ERROR_NOT_FOUND, STATUS_SYMBOL_NOT_FOUND)),
    (("cuMemAlloc_v2", 12090, 0), (CUDA_ERROR_NOT_FOUND, STATUS_SYMBOL_NOT_FOUND)),
    (("", 12090, 0), (CUDA_ERROR_NOT_FOUND, STATUS_SYMBOL_NOT_FOUND)),
]


def test_every_symbol_exported_and_every_lookup_as_listed(entries, lib_dir, clean_env):
    symbols = sorted({e.symbol for e in entries})  # N rows' too: libraries dlsym some
    queries = all_queries(entries)
    explicit = [q for q, _ in EXPLICIT]
    nccl = [(n, 12090, 0) for n in NCCL_12090 + NCCL_12090_OPTIONAL]
    unsupported = [(e.name, e.version) for e in entries if e.kind == "N"]
    res = lookup(lib_dir, clean_env, symbols, queries + explicit + nccl, unsupported)
    addr = res["symbols"]
    assert res["called"] == [CUDA_ERROR_NOT_SUPPORTED] * len(unsupported)
    missing = [s for s in symbols if not addr[s]]
    assert not missing, f"listed but not exported by libcuda.so.1: {missing}"
    assert len(set(addr.values())) > len(symbols) // 2  # sanity: real, distinct addresses

    def check(i: int, q: tuple[str, int, int], expected: tuple[int, int, Optional[str]]) -> None:
        rc, status, fn = res["v2"][i]
        want_rc, want_status, want_sym = expected
        if want_sym == UNSUPPORTED:  # a stub, exported as its N row's symbol
            assert fn and fn in addr.values(), q
            want_addr = fn
        else:
            want_addr = addr[want_sym] if want_sym else 0
        got = (rc, status, fn)
        want = (want_rc, want_status, want_addr)
        assert got == want, (f"cuGetProcAddress_v2{q}: got {got}, expected {want_sym or 'failure'} "
                             f"{want}")
        rc1, fn1 = res["v1"][i]
        assert (rc1, fn1) == (rc, fn), f"cuGetProcAddress{q} disagrees with _v2"

    for i, q in enumerate(queries):
        check(i, q, resolve(entries, *q))
    base = len(queries)
    for j, (q, want) in enumerate(EXPLICIT):
        if isinstance(want, str):
            assert resolve(entries, *q)[2] == want, f"entry_points.def no longer maps {q} to {want}"
            check(base + j, q, (CUDA_SUCCESS, STATUS_SUCCESS, want))
        else:
            check(base + j, q, (*want, None))
    base += len(EXPLICIT)
    for j, q in enumerate(nccl):
        check(base + j, q, resolve(entries, *q))
        if q[0] in NCCL_12090:
            assert res["v2"][base + j][0] == CUDA_SUCCESS, f"NCCL needs {q[0]}"


def _header_functions() -> dict[Path, set[tuple[str, int, bool]]]:
    """(name, version, per-thread) of every PFN_<name>_v<version> function type in the
    cudaTypedefs.h of the CUDA runtime wheel (12.x) and of a CUDA toolkit, where installed."""
    import nvidia.cuda_runtime  # the wheel ncclsim depends on
    found = [Path(p) / "include" / "cudaTypedefs.h" for p in nvidia.cuda_runtime.__path__]
    found += [p for p in (Path("/usr/local/cuda/include/cudaTypedefs.h"),) if p.exists()]
    typedef = re.compile(r"\(CUDAAPI \*PFN_(cu[A-Za-z0-9]+)_v(\d+)(_ptds|_ptsz)?\)")
    return {h: {(m.group(1), int(m.group(2)), bool(m.group(3))) for m in typedef.finditer(h.read_text())}
            for h in found if h.exists()}


def test_every_function_of_the_cuda_headers_has_its_row(entries):
    headers = _header_functions()
    assert headers, "no cudaTypedefs.h found (the nvidia-cuda-runtime wheel ships one)"
    default = {(e.name, e.version) for e in entries if e.kind in "EN"}
    per_thread = {e.name for e in entries if e.kind in "PN"}
    for header, functions in headers.items():
        assert len(functions) > 400, header
        missing = sorted(f"{n}_v{v}" for n, v, pt in functions if (n, v) not in default and not pt)
        assert not missing, f"{header}: no E() or N() row for {missing[:20]} ({len(missing)})"
        missing = sorted(f"{n}_v{v}_pt" for n, v, pt in functions if pt and n not in per_thread)
        assert not missing, f"{header}: no P() or N() row for {missing[:20]}"
