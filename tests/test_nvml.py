"""The fake NVML (fake_cuda/nvml -> libnvidia-ml.so.1) answers from the simulated platform.

Each scenario runs in its own Python process (the platform is loaded once per
process) that calls the library through cffi in ABI mode, with struct layouts
written here from NVIDIA's nvml.h, and prints its observations as JSON.
"""

from __future__ import annotations

import ctypes
import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
MODELS = json.loads((ROOT / "ncclsim" / "platform" / "gpu_models.json").read_text())["models"]

# NVML constants (nvml.h)
SUCCESS, UNINITIALIZED, INVALID_ARGUMENT, NOT_SUPPORTED = 0, 1, 2, 3
NOT_FOUND, INSUFFICIENT_SIZE, ARGUMENT_VERSION_MISMATCH, UNKNOWN = 6, 7, 25, 999
P2P_OK, P2P_NOT_SUPPORTED = 0, 5
P2P_READ, P2P_WRITE, P2P_NVLINK, P2P_ATOMICS, P2P_PCI = 0, 1, 2, 3, 4
NVLINK_DEVICE_TYPE_GPU, NVLINK_DEVICE_TYPE_SWITCH = 0, 2
FI_NVLINK_LINK_COUNT, FI_NVLINK_GET_SPEED, FI_NVLINK_GET_STATE = 91, 164, 165
FI_NVLINK_GET_VERSION, FI_C2C_LINK_COUNT = 166, 170
NVLINK_VERSION_3_0, NVLINK_VERSION_4_0 = 4, 6

DEFAULT_GPU_BUS = [0x18, 0x2A, 0x3A, 0x5D, 0x9A, 0xAB, 0xBA, 0xDB]
DEFAULT_SWITCH_BUS = [0x05, 0x06, 0x07, 0x08]

CDEF = """
typedef struct nvmlDevice_st *nvmlDevice_t;
typedef struct { char busIdLegacy[16]; unsigned domain, bus, device, pciDeviceId, pciSubSystemId;
                 char busId[32]; } nvmlPciInfo_t;
typedef struct { char busId[16]; unsigned domain, bus, device, pciDeviceId, pciSubSystemId;
                 unsigned reserved0, reserved1, reserved2, reserved3; } nvmlPciInfoLegacy_t;
typedef struct { unsigned version, domain, bus, device, pciDeviceId, pciSubSystemId, baseClass, subClass;
                 char busId[32]; } nvmlPciInfoExt_t;
typedef struct { unsigned long long total, free, used; } nvmlMemory_t;
typedef struct { unsigned version; unsigned long long total, reserved, free, used; } nvmlMemory_v2_t;
typedef union { double dVal; int siVal; unsigned uiVal; unsigned long ulVal; unsigned long long ullVal;
                long long sllVal; unsigned short usVal; } nvmlValue_t;
typedef struct { unsigned fieldId, scopeId; long long timestamp, latencyUsec; int valueType;
                 int nvmlReturn; nvmlValue_t value; } nvmlFieldValue_t;
typedef struct { unsigned environment, ccFeature, devToolsMode; } nvmlConfComputeSystemState_t;
typedef struct { unsigned version, environment, ccFeature, devToolsMode, multiGpuMode; }
        nvmlSystemConfComputeSettings_t;
typedef struct { unsigned long long protectedMemSizeKib, unprotectedMemSizeKib; } nvmlConfComputeMemSizeInfo_t;
typedef struct { unsigned version; unsigned char clusterUuid[16]; int status; unsigned cliqueId;
                 unsigned char state; unsigned healthMask; } nvmlGpuFabricInfo_v2_t;

int nvmlInit(void); int nvmlInit_v2(void); int nvmlInitWithFlags(unsigned); int nvmlShutdown(void);
const char *nvmlErrorString(int);
int nvmlSystemGetDriverVersion(char *, unsigned); int nvmlSystemGetNVMLVersion(char *, unsigned);
int nvmlSystemGetCudaDriverVersion(int *); int nvmlSystemGetCudaDriverVersion_v2(int *);
int nvmlDeviceGetCount(unsigned *); int nvmlDeviceGetCount_v2(unsigned *);
int nvmlDeviceGetHandleByIndex(unsigned, nvmlDevice_t *); int nvmlDeviceGetHandleByIndex_v2(unsigned, nvmlDevice_t *);
int nvmlDeviceGetHandleByPciBusId(const char *, nvmlDevice_t *);
int nvmlDeviceGetHandleByPciBusId_v2(const char *, nvmlDevice_t *);
int nvmlDeviceGetHandleByUUID(const char *, nvmlDevice_t *);
int nvmlDeviceGetIndex(nvmlDevice_t, unsigned *);
int nvmlDeviceGetName(nvmlDevice_t, char *, unsigned);
int nvmlDeviceGetUUID(nvmlDevice_t, char *, unsigned);
int nvmlDeviceGetPciInfo(nvmlDevice_t, nvmlPciInfoLegacy_t *);
int nvmlDeviceGetPciInfo_v2(nvmlDevice_t, nvmlPciInfoLegacy_t *);
int nvmlDeviceGetPciInfo_v3(nvmlDevice_t, nvmlPciInfo_t *);
int nvmlDeviceGetPciInfoExt(nvmlDevice_t, nvmlPciInfoExt_t *);
int nvmlDeviceGetCudaComputeCapability(nvmlDevice_t, int *, int *);
int nvmlDeviceGetMemoryInfo(nvmlDevice_t, nvmlMemory_t *);
int nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t, nvmlMemory_v2_t *);
int nvmlDeviceGetP2PStatus(nvmlDevice_t, nvmlDevice_t, int, int *);
int nvmlDeviceGetTopologyCommonAncestor(nvmlDevice_t, nvmlDevice_t, int *);
int nvmlDeviceGetCurrPcieLinkGeneration(nvmlDevice_t, unsigned *);
int nvmlDeviceGetCurrPcieLinkWidth(nvmlDevice_t, unsigned *);
int nvmlDeviceGetMaxPcieLinkGeneration(nvmlDevice_t, unsigned *);
int nvmlDeviceGetMaxPcieLinkWidth(nvmlDevice_t, unsigned *);
int nvmlDeviceGetPcieLinkMaxSpeed(nvmlDevice_t, unsigned *);
int nvmlDeviceGetNvLinkCapability(nvmlDevice_t, unsigned, int, unsigned *);
int nvmlDeviceGetNvLinkState(nvmlDevice_t, unsigned, int *);
int nvmlDeviceGetNvLinkVersion(nvmlDevice_t, unsigned, unsigned *);
int nvmlDeviceGetNvLinkRemotePciInfo(nvmlDevice_t, unsigned, nvmlPciInfoLegacy_t *);
int nvmlDeviceGetNvLinkRemotePciInfo_v2(nvmlDevice_t, unsigned, nvmlPciInfo_t *);
int nvmlDeviceGetNvLinkRemoteDeviceType(nvmlDevice_t, unsigned, int *);
int nvmlDeviceGetFieldValues(nvmlDevice_t, int, nvmlFieldValue_t *);
int nvmlDeviceGetGpuFabricInfoV(nvmlDevice_t, nvmlGpuFabricInfo_v2_t *);
int nvmlSystemGetConfComputeState(nvmlConfComputeSystemState_t *);
int nvmlSystemGetConfComputeSettings(nvmlSystemConfComputeSettings_t *);
int nvmlDeviceGetConfComputeMemSizeInfo(nvmlDevice_t, nvmlConfComputeMemSizeInfo_t *);
int nvmlDeviceGetMinorNumber(nvmlDevice_t, unsigned *);
int nvmlDeviceGetNumaNodeId(nvmlDevice_t, unsigned *);
int nvmlDeviceGetComputeMode(nvmlDevice_t, int *);
int nvmlDeviceGetArchitecture(nvmlDevice_t, unsigned *);
int nvmlDeviceGetBrand(nvmlDevice_t, int *);
int nvmlDeviceGetMaxClockInfo(nvmlDevice_t, int, unsigned *);
int nvmlDeviceGetClockInfo(nvmlDevice_t, int, unsigned *);
int nvmlDeviceGetPowerManagementLimit(nvmlDevice_t, unsigned *);
int nvmlDeviceGetEnforcedPowerLimit(nvmlDevice_t, unsigned *);
int nvmlDeviceGetPersistenceMode(nvmlDevice_t, int *);
int nvmlDeviceGetSerial(nvmlDevice_t, char *, unsigned);
int nvmlDeviceGetBoardPartNumber(nvmlDevice_t, char *, unsigned);
int nvmlDeviceGetCpuAffinity(nvmlDevice_t, unsigned, unsigned long *);
int nvmlDeviceGetMemoryErrorCounter(nvmlDevice_t, int, int, int, unsigned long long *);
typedef struct { unsigned pid; unsigned long long usedGpuMemory; } nvmlProcessInfo_v1_t;
typedef struct { unsigned pid; unsigned long long usedGpuMemory; unsigned gpuInstanceId, computeInstanceId; }
    nvmlProcessInfo_t;
int nvmlDeviceGetComputeRunningProcesses(nvmlDevice_t, unsigned *, nvmlProcessInfo_v1_t *);
int nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t, unsigned *, nvmlProcessInfo_t *);
"""

# Runs first in every child: loads the library, defines helpers; the body then
# calls emit(obj) once.
PRELUDE = """
import cffi, json, sys
ffi = cffi.FFI()
ffi.cdef(CDEF)
lib = ffi.dlopen(LIBPATH)
assert ffi.sizeof("nvmlPciInfo_t") == 68 and ffi.sizeof("nvmlPciInfoLegacy_t") == 52
assert ffi.sizeof("nvmlFieldValue_t") == 40 and ffi.sizeof("nvmlMemory_v2_t") == 40

def emit(obj):
    print("RESULT " + json.dumps(obj))

def hid(h):
    return int(ffi.cast("uintptr_t", h))

def handle(i):
    h = ffi.new("nvmlDevice_t *")
    rc = lib.nvmlDeviceGetHandleByIndex_v2(i, h)
    assert rc == 0, rc
    return h[0]

def s(cdata):
    return ffi.string(cdata).decode()

def text(fn, *args, size=96):
    buf = ffi.new("char[]", size)
    rc = fn(*args, buf, size)
    return s(buf) if rc == 0 else rc

def u(fn, *args, ctype="unsigned *"):
    out = ffi.new(ctype)
    rc = fn(*args, out)
    return out[0] if rc == 0 else ["rc", rc]

def fields(h, pairs):
    vals = ffi.new("nvmlFieldValue_t[]", len(pairs))
    for v, (fid, scope) in zip(vals, pairs):
        v.fieldId, v.scopeId, v.nvmlReturn = fid, scope, -1
    rc = lib.nvmlDeviceGetFieldValues(h, len(pairs), vals)
    assert rc == 0, rc
    return [[v.fieldId, v.scopeId, v.nvmlReturn, v.value.uiVal if v.nvmlReturn == 0 else None]
            for v in vals]

def lookup(name, key):
    h = ffi.new("nvmlDevice_t *")
    rc = getattr(lib, name)(key.encode(), h)
    return hid(h[0]) if rc == 0 else ["rc", rc]
"""


@pytest.fixture(scope="module")
def nvml_lib(tmp_path_factory) -> Path:
    """The installed libnvidia-ml.so.1 when there is one, else one built here (nvml only)."""
    try:
        sys.path.insert(0, str(ROOT))
        from ncclsim.paths import lib_dir

        installed = lib_dir() / "libnvidia-ml.so.1"
        if installed.exists():
            return installed
    except (ImportError, FileNotFoundError):
        pass
    finally:
        sys.path.remove(str(ROOT))
    out = tmp_path_factory.mktemp("nvml-lib")
    env = dict(os.environ)
    env.setdefault("NCCLSIM_OBJ_DIR", str(out / "obj"))
    r = subprocess.run([sys.executable, str(ROOT / "fake_cuda" / "build.py"), "--out", str(out),
                        "--only", "nvml"], env=env, capture_output=True, text=True)
    assert r.returncode == 0, f"build failed:\n{r.stdout}\n{r.stderr}"
    return out / "libnvidia-ml.so.1"


def child_env(**overrides: str | None) -> dict[str, str]:
    """The caller's environment without simulator settings (platform, host id, log, trace)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NCCLSIM_", "NCCL_"))}
    env["NCCLSIM_LOG"] = "0"
    for k, v in overrides.items():
        if v is None:
            env.pop(k, None)
        else:
            env[k] = v
    return env


def run_child(lib: Path, body: str, env: dict[str, str]) -> tuple[object, subprocess.CompletedProcess]:
    script = f"CDEF = {CDEF!r}\nLIBPATH = {str(lib)!r}\n" + PRELUDE + textwrap.dedent(body)
    r = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, f"child failed ({r.returncode}):\n{r.stdout}\n{r.stderr}"
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("RESULT ")]
    assert len(lines) == 1, r.stdout
    return json.loads(lines[0][len("RESULT "):]), r


def uuid_default(host: int, dev: int) -> str:
    """The platform's UUID rule: "ncsm", host (BE32), device (BE32), 00000001."""
    b = b"ncsm" + host.to_bytes(4, "big") + dev.to_bytes(4, "big") + (1).to_bytes(4, "big")
    h = b.hex()
    return f"GPU-{h[0:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


def default_domain(host: int) -> int:
    """Domain of a default host: its index, or 0x100+index if that names a real PCI device here."""
    if any(Path(f"/sys/bus/pci/devices/{host:04x}:{b:02x}:00.0").exists() for b in DEFAULT_GPU_BUS):
        return (0x100 + host) & 0xFFFF
    return host


def pci_ids(model: str) -> tuple[int, int]:
    m = MODELS[model]
    return ((int(m["pci_device_id"], 16) << 16) | 0x10DE,
            (int(m["pci_subsystem_id"], 16) << 16) | 0x10DE)


# --------------------------------------------------------------------------------------------------
# A configured host: two H100 on NVSwitches, an A100 wired directly to them, a PCIe-only L40S.

PLATFORM = """\
# written by test_nvml.py
[platform]
host_index = 3
driver_version = 12040
[gpu]
model = h100
bus_id = 0000:18:00.0
uuid = GPU-11111111-2222-3333-4444-555555555555
memory = 85000000000
numa_node = 0
[gpu]
model = h100
bus_id = 0000:2a:00.0
numa_node = 0
[gpu]
model = a100
bus_id = 0000:9a:00.0
numa_node = 1
pcie_gen = 3
pcie_width = 8
nvlink_remote = 0000:18:00.0*2, 0000:2a:00.0*3
[gpu]
model = l40s
bus_id = 0000:db:00.0
numa_node = 1
"""
CFG_MODELS = ["h100", "h100", "a100", "l40s"]
CFG_BUS = [0x18, 0x2A, 0x9A, 0xDB]
CFG_NUMA = [0, 0, 1, 1]
CFG_UUIDS = ["GPU-11111111-2222-3333-4444-555555555555", uuid_default(3, 1), uuid_default(3, 2),
             uuid_default(3, 3)]

CONFIGURED_BODY = """
r = {}
r["before_init"] = u(lib.nvmlDeviceGetCount_v2)
assert lib.nvmlInit_v2() == 0
r["count"] = u(lib.nvmlDeviceGetCount_v2)
r["count_v1"] = u(lib.nvmlDeviceGetCount)
n = r["count"]
r["cuda"] = u(lib.nvmlSystemGetCudaDriverVersion, ctype="int *")
r["cuda_v2"] = u(lib.nvmlSystemGetCudaDriverVersion_v2, ctype="int *")
r["driver"] = text(lib.nvmlSystemGetDriverVersion)
r["nvml_version"] = text(lib.nvmlSystemGetNVMLVersion)
gpus = []
for i in range(n):
    h = handle(i)
    g = {"handle": hid(h)}
    g["handle_v1"] = hid(handle(i))
    g["index"] = u(lib.nvmlDeviceGetIndex, h)
    g["minor"] = u(lib.nvmlDeviceGetMinorNumber, h)
    g["name"] = text(lib.nvmlDeviceGetName, h)
    g["uuid"] = text(lib.nvmlDeviceGetUUID, h)
    # v3 must not write past its 68 bytes; the legacy entry points not past 52.
    raw = ffi.new("unsigned char[128]", [0xAA] * 128)
    rc = lib.nvmlDeviceGetPciInfo_v3(h, ffi.cast("nvmlPciInfo_t *", raw))
    p = ffi.cast("nvmlPciInfo_t *", raw)
    g["pci_v3"] = [rc, s(p.busId), s(p.busIdLegacy), p.domain, p.bus, p.device, p.pciDeviceId,
                   p.pciSubSystemId, ffi.buffer(raw)[68:] == bytes([0xAA]) * 60]
    for fn in ("nvmlDeviceGetPciInfo", "nvmlDeviceGetPciInfo_v2"):
        raw = ffi.new("unsigned char[128]", [0xAA] * 128)
        rc = getattr(lib, fn)(h, ffi.cast("nvmlPciInfoLegacy_t *", raw))
        p = ffi.cast("nvmlPciInfoLegacy_t *", raw)
        g[fn] = [rc, s(p.busId), p.domain, p.bus, p.pciDeviceId, p.pciSubSystemId,
                 ffi.buffer(raw)[52:] == bytes([0xAA]) * 76]
    ext = ffi.new("nvmlPciInfoExt_t *")
    ext.version = ffi.sizeof("nvmlPciInfoExt_t") | (1 << 24)
    rc = lib.nvmlDeviceGetPciInfoExt(h, ext)
    g["pci_ext"] = [rc, s(ext.busId), ext.pciDeviceId, ext.baseClass, ext.subClass]
    ext.version = 48 | (1 << 24)
    g["pci_ext_bad_version"] = lib.nvmlDeviceGetPciInfoExt(h, ext)
    major, minor = ffi.new("int *"), ffi.new("int *")
    assert lib.nvmlDeviceGetCudaComputeCapability(h, major, minor) == 0
    g["cc"] = [major[0], minor[0]]
    m = ffi.new("nvmlMemory_t *")
    assert lib.nvmlDeviceGetMemoryInfo(h, m) == 0
    g["mem"] = [m.total, m.free, m.used]
    m2 = ffi.new("nvmlMemory_v2_t *")
    m2.version = 40 | (2 << 24)
    g["mem_v2_rc"] = lib.nvmlDeviceGetMemoryInfo_v2(h, m2)
    g["mem_v2"] = [m2.total, m2.reserved, m2.free, m2.used]
    g["numa"] = u(lib.nvmlDeviceGetNumaNodeId, h)
    g["pcie"] = [u(lib.nvmlDeviceGetCurrPcieLinkGeneration, h), u(lib.nvmlDeviceGetMaxPcieLinkGeneration, h),
                 u(lib.nvmlDeviceGetCurrPcieLinkWidth, h), u(lib.nvmlDeviceGetMaxPcieLinkWidth, h),
                 u(lib.nvmlDeviceGetPcieLinkMaxSpeed, h)]
    g["clocks"] = [u(lib.nvmlDeviceGetMaxClockInfo, h, c) for c in range(4)]
    g["clock_bad"] = u(lib.nvmlDeviceGetMaxClockInfo, h, 7)
    g["power"] = [u(lib.nvmlDeviceGetPowerManagementLimit, h), u(lib.nvmlDeviceGetEnforcedPowerLimit, h)]
    g["arch"] = u(lib.nvmlDeviceGetArchitecture, h)
    g["brand"] = u(lib.nvmlDeviceGetBrand, h, ctype="int *")
    g["compute_mode"] = u(lib.nvmlDeviceGetComputeMode, h, ctype="int *")
    g["serial"] = text(lib.nvmlDeviceGetSerial, h, size=30)
    g["part"] = text(lib.nvmlDeviceGetBoardPartNumber, h, size=80)
    g["lookup"] = [lookup("nvmlDeviceGetHandleByUUID", g["uuid"]),
                   lookup("nvmlDeviceGetHandleByUUID", g["uuid"].lower())]
    fv = fields(h, [(91, 0), (170, 0), (12345, 0)])
    g["fv_link_count"], g["fv_c2c"], g["fv_unknown"] = fv
    nl = fv[0][3]
    links = []
    for l in range(nl + 1):
        st = u(lib.nvmlDeviceGetNvLinkState, h, l, ctype="int *")
        cap = u(lib.nvmlDeviceGetNvLinkCapability, h, l, 0)
        ver = u(lib.nvmlDeviceGetNvLinkVersion, h, l)
        p = ffi.new("nvmlPciInfo_t *")
        rc = lib.nvmlDeviceGetNvLinkRemotePciInfo_v2(h, l, p)
        remote = [s(p.busId), s(p.busIdLegacy), p.pciDeviceId] if rc == 0 else ["rc", rc]
        lp = ffi.new("nvmlPciInfoLegacy_t *")
        rc = lib.nvmlDeviceGetNvLinkRemotePciInfo(h, l, lp)
        remote_v1 = s(lp.busId) if rc == 0 else ["rc", rc]
        typ = u(lib.nvmlDeviceGetNvLinkRemoteDeviceType, h, l, ctype="int *")
        fv = fields(h, [(165, l), (164, l), (166, l)])
        links.append({"state": st, "cap_p2p": cap, "version": ver, "remote": remote,
                      "remote_v1": remote_v1, "type": typ, "fv": fv})
    g["links"] = links
    g["link0_state_no_nvlink"] = u(lib.nvmlDeviceGetNvLinkState, h, 0, ctype="int *")
    gpus.append(g)
r["gpus"] = gpus
for key in ["0000:18:00.0", "00000000:18:00.0", "0000:2a:00.0", "0000:2A:00.0", "00000000:2a:00.0",
            "00000000:2A:00.0", "2a:00.0", "0000:9A:00", "0000:db:00.0", "0000:19:00.0", "zz:00.0", ""]:
    r.setdefault("by_bus", {})[key] = [lookup("nvmlDeviceGetHandleByPciBusId", key),
                                       lookup("nvmlDeviceGetHandleByPciBusId_v2", key)]
r["by_uuid_missing"] = lookup("nvmlDeviceGetHandleByUUID", "GPU-00000000-0000-0000-0000-000000000000")
p2p = {}
for i in range(n):
    for j in range(n):
        for idx in range(5):
            st = ffi.new("int *", -1)
            rc = lib.nvmlDeviceGetP2PStatus(handle(i), handle(j), idx, st)
            p2p[f"{i},{j},{idx}"] = [rc, st[0]]
r["p2p"] = p2p
topo = ffi.new("int *")
r["topo"] = {f"{i},{j}": (lib.nvmlDeviceGetTopologyCommonAncestor(handle(i), handle(j), topo), topo[0])[1]
             for i in range(n) for j in range(n)}
cc = ffi.new("nvmlSystemConfComputeSettings_t *")
cc.version = 20 | (1 << 24)
r["cc_settings"] = [lib.nvmlSystemGetConfComputeSettings(cc), cc.ccFeature, cc.multiGpuMode]
ccs = ffi.new("nvmlConfComputeSystemState_t *", [7, 7, 7])
r["cc_state"] = [lib.nvmlSystemGetConfComputeState(ccs), ccs.ccFeature]
fab = ffi.new("nvmlGpuFabricInfo_v2_t *")
fab.version = ffi.sizeof("nvmlGpuFabricInfo_v2_t") | (2 << 24)
r["fabric"] = lib.nvmlDeviceGetGpuFabricInfoV(handle(0), fab)
emit(r)
"""


@pytest.fixture(scope="module")
def configured(nvml_lib, tmp_path_factory):
    path = tmp_path_factory.mktemp("platform") / "host3.conf"
    path.write_text(PLATFORM)
    result, _ = run_child(nvml_lib, CONFIGURED_BODY, child_env(NCCLSIM_PLATFORM=str(path)))
    return result


def test_configured_enumeration(configured):
    r = configured
    assert r["before_init"] == ["rc", UNINITIALIZED]
    assert r["count"] == r["count_v1"] == 4
    assert r["cuda"] == r["cuda_v2"] == 12040
    assert r["driver"].startswith("550.")
    assert r["nvml_version"] == "12." + r["driver"]
    handles = [g["handle"] for g in r["gpus"]]
    assert len(set(handles)) == 4 and all(handles)
    for i, g in enumerate(r["gpus"]):
        model = MODELS[CFG_MODELS[i]]
        assert g["handle_v1"] == g["handle"]
        assert g["index"] == g["minor"] == i
        assert g["name"] == model["name"]
        assert g["uuid"] == CFG_UUIDS[i]
        assert g["numa"] == CFG_NUMA[i]
        assert g["cc"] == [model["sm"] // 10, model["sm"] % 10]


def test_configured_pci(configured):
    for i, g in enumerate(configured["gpus"]):
        dev_id, sub_id = pci_ids(CFG_MODELS[i])
        bus = CFG_BUS[i]
        assert g["pci_v3"] == [SUCCESS, f"00000000:{bus:02X}:00.0", f"0000:{bus:02X}:00.0", 0, bus, 0,
                               dev_id, sub_id, True]
        for fn in ("nvmlDeviceGetPciInfo", "nvmlDeviceGetPciInfo_v2"):
            assert g[fn] == [SUCCESS, f"0000:{bus:02X}:00.0", 0, bus, dev_id, sub_id, True]
        assert g["pci_ext"] == [SUCCESS, f"00000000:{bus:02X}:00.0", dev_id, 0x03, 0x02]
        assert g["pci_ext_bad_version"] == ARGUMENT_VERSION_MISMATCH
        model = MODELS[CFG_MODELS[i]]
        # GPU 2's link is the file's (as a topology file's can be), the others the model's.
        gen, width = (3, 8) if i == 2 else (model["pcie_gen"], model["pcie_width"])
        assert g["pcie"] == [gen, gen, width, width, gen]


def test_handle_lookups_agree(configured):
    r = configured
    h = [g["handle"] for g in r["gpus"]]
    expect = {"0000:18:00.0": h[0], "00000000:18:00.0": h[0], "0000:2a:00.0": h[1], "0000:2A:00.0": h[1],
              "00000000:2a:00.0": h[1], "00000000:2A:00.0": h[1], "2a:00.0": h[1], "0000:9A:00": h[2],
              "0000:db:00.0": h[3], "0000:19:00.0": ["rc", NOT_FOUND], "zz:00.0": ["rc", INVALID_ARGUMENT],
              "": ["rc", INVALID_ARGUMENT]}
    for key, want in expect.items():
        assert r["by_bus"][key] == [want, want], key
    for i, g in enumerate(r["gpus"]):
        assert g["lookup"] == [h[i], h[i]]
    assert r["by_uuid_missing"] == ["rc", NOT_FOUND]


def test_memory_clocks_power(configured):
    for i, g in enumerate(configured["gpus"]):
        model = MODELS[CFG_MODELS[i]]
        total = 85000000000 if i == 0 else model["total_memory"]
        t, free, used = g["mem"]
        assert t == total and free + used == total and 0 < used < total // 8
        assert g["mem_v2_rc"] == SUCCESS
        t2, reserved, free2, used2 = g["mem_v2"]
        assert t2 == total and reserved + free2 + used2 == total and reserved == used
        clocks = model["max_clocks_mhz"]
        assert g["clocks"] == [clocks["graphics"], clocks["sm"], clocks["memory"], clocks["video"]]
        assert g["clock_bad"] == ["rc", INVALID_ARGUMENT]
        assert g["power"] == [model["power_limit_w"] * 1000] * 2
        assert g["arch"] == {"hopper": 9, "ampere": 7, "ada": 8}[model["architecture"]]
        assert g["brand"] == 14 and g["compute_mode"] == 0
        assert len(g["serial"]) == 13 and g["serial"].isdigit()
        assert len(g["part"].split("-")) == 4
    assert configured["gpus"][0]["serial"] != configured["gpus"][1]["serial"]


def test_nvlinks(configured):
    g0, g1, g2, g3 = configured["gpus"]
    # H100 on default wiring: 18 links over the 4 NVSwitches 05..08 of its domain.
    for g in (g0, g1):
        assert g["fv_link_count"] == [FI_NVLINK_LINK_COUNT, 0, SUCCESS, 18]
        links = g["links"]
        assert len(links) == 19
        for l, link in enumerate(links[:18]):
            sw = DEFAULT_SWITCH_BUS[l % 4]
            assert link["state"] == 1 and link["cap_p2p"] == 1
            assert link["version"] == NVLINK_VERSION_4_0
            assert link["remote"] == [f"00000000:{sw:02X}:00.0", f"0000:{sw:02X}:00.0", (0x22A3 << 16) | 0x10DE]
            assert link["remote_v1"] == f"0000:{sw:02X}:00.0"
            assert link["type"] == NVLINK_DEVICE_TYPE_SWITCH
            assert link["fv"] == [[FI_NVLINK_GET_STATE, l, SUCCESS, 1], [FI_NVLINK_GET_SPEED, l, SUCCESS, 26562],
                                  [FI_NVLINK_GET_VERSION, l, SUCCESS, NVLINK_VERSION_4_0]]
        past = links[18]
        assert past["state"] == ["rc", INVALID_ARGUMENT] and past["remote"] == ["rc", INVALID_ARGUMENT]
        assert [f[2] for f in past["fv"]] == [INVALID_ARGUMENT] * 3
    # A100: 12 links, the 5 configured ones up and wired to GPUs 0 and 1.
    assert g2["fv_link_count"][3] == 12
    h100_dev, _ = pci_ids("h100")
    for l, link in enumerate(g2["links"][:12]):
        if l < 5:
            bus = 0x18 if l < 2 else 0x2A
            assert link["state"] == 1
            assert link["remote"][:2] == [f"00000000:{bus:02X}:00.0", f"0000:{bus:02X}:00.0"]
            assert link["remote"][2] == h100_dev
            assert link["remote_v1"] == f"0000:{bus:02X}:00.0"
            assert link["type"] == NVLINK_DEVICE_TYPE_GPU
            assert link["fv"][0][2:] == [SUCCESS, 1] and link["fv"][1][2:] == [SUCCESS, 25000]
        else:
            assert link["state"] == 0
            assert link["remote"] == ["rc", NOT_SUPPORTED] and link["remote_v1"] == ["rc", NOT_SUPPORTED]
            assert link["fv"][0][2:] == [SUCCESS, 0] and link["fv"][1][2:] == [SUCCESS, 0]
        assert link["version"] == NVLINK_VERSION_3_0
    # L40S: no NVLink at all.
    assert g3["fv_link_count"] == [FI_NVLINK_LINK_COUNT, 0, SUCCESS, 0]
    assert g3["link0_state_no_nvlink"] == ["rc", NOT_SUPPORTED]
    for g in configured["gpus"]:
        assert g["fv_c2c"] == [FI_C2C_LINK_COUNT, 0, SUCCESS, 0]
        assert g["fv_unknown"] == [12345, 0, NOT_SUPPORTED, None]


def test_p2p_every_pair(configured):
    p2p = configured["p2p"]
    nvlinked = {0, 1, 2}
    for i in range(4):
        for j in range(4):
            for idx in (P2P_READ, P2P_WRITE, P2P_PCI):
                assert p2p[f"{i},{j},{idx}"] == [SUCCESS, P2P_OK], (i, j, idx)
            if i != j:
                want = P2P_OK if i in nvlinked and j in nvlinked else P2P_NOT_SUPPORTED
                for idx in (P2P_NVLINK, P2P_ATOMICS):
                    assert p2p[f"{i},{j},{idx}"] == [SUCCESS, want], (i, j, idx)
    topo = configured["topo"]
    assert topo["0,0"] == 0 and topo["0,1"] == 40 and topo["0,2"] == 50 and topo["2,3"] == 40


def test_confidential_compute_and_fabric(configured):
    assert configured["cc_settings"] == [SUCCESS, 0, 0]
    assert configured["cc_state"] == [SUCCESS, 0]
    assert configured["fabric"] == NOT_SUPPORTED


# --------------------------------------------------------------------------------------------------
# No NCCLSIM_PLATFORM: the built-in 8 x H100 host.

DEFAULT_BODY = """
assert lib.nvmlInit() == 0
n = u(lib.nvmlDeviceGetCount_v2)
out = []
for i in range(n):
    h = handle(i)
    p = ffi.new("nvmlPciInfo_t *")
    assert lib.nvmlDeviceGetPciInfo_v3(h, p) == 0
    rp = ffi.new("nvmlPciInfo_t *")
    remote = [s(rp.busIdLegacy) if lib.nvmlDeviceGetNvLinkRemotePciInfo_v2(h, l, rp) == 0 else None
              for l in range(18)]
    out.append({"name": text(lib.nvmlDeviceGetName, h), "uuid": text(lib.nvmlDeviceGetUUID, h),
                "busId": s(p.busId), "domain": p.domain, "numa": u(lib.nvmlDeviceGetNumaNodeId, h),
                "by_bus": lookup("nvmlDeviceGetHandleByPciBusId", s(p.busId).lower()[4:]) == hid(h),
                "links": fields(h, [(91, 0)])[0][3], "remote": remote,
                "p2p": [u(lib.nvmlDeviceGetP2PStatus, h, handle(j), P2P, ctype="int *")
                        for j in range(n) for P2P in (0, 1, 2)]})
emit(out)
"""


@pytest.mark.parametrize("hostid,host", [(None, 0), ("ncclsim-h2", 2)])
def test_default_platform(nvml_lib, hostid, host):
    gpus, _ = run_child(nvml_lib, DEFAULT_BODY, child_env(NCCL_HOSTID=hostid))
    domain = default_domain(host)
    assert len(gpus) == 8
    for i, g in enumerate(gpus):
        assert g["name"] == "NVIDIA H100 80GB HBM3"
        assert g["uuid"] == uuid_default(host, i)
        assert g["busId"] == f"{domain:08X}:{DEFAULT_GPU_BUS[i]:02X}:00.0"
        assert g["domain"] == domain
        assert g["numa"] == (0 if i < 4 else 1)
        assert g["by_bus"] is True
        assert g["links"] == 18
        assert g["remote"] == [f"{domain:04X}:{DEFAULT_SWITCH_BUS[l % 4]:02X}:00.0" for l in range(18)]
        # READ, WRITE, NVLINK with every GPU (a GPU has no NVLink to itself)
        assert g["p2p"] == [P2P_NOT_SUPPORTED if (j == i and k == 2) else P2P_OK
                            for j in range(8) for k in range(3)]
    assert len({g["uuid"] for g in gpus}) == 8


# --------------------------------------------------------------------------------------------------
# A malformed platform file: nvmlInit fails, and the platform says why once.

MALFORMED_BODY = """
r = [lib.nvmlInit_v2(), lib.nvmlInit(), lib.nvmlInitWithFlags(0), u(lib.nvmlDeviceGetCount_v2),
     lib.nvmlShutdown()]
emit(r)
"""


@pytest.mark.parametrize("content,line", [
    ("[platform]\nhost_index = 0\n[gpu]\nmodel = h100\nbus_id = not-a-bus-id\n", 5),
    ("# comment\n[platform]\n[gpus]\n", 3),
    ("[platform]\n[gpu]\nmodel = h100\nbus_id = 0000:18:00.0\ncolour = green\n", 5),
], ids=["bad-bus-id", "unknown-section", "unknown-key"])
def test_malformed_platform(nvml_lib, tmp_path, content, line):
    path = tmp_path / "bad.conf"
    path.write_text(content)
    r, proc = run_child(nvml_lib, MALFORMED_BODY, child_env(NCCLSIM_PLATFORM=str(path)))
    assert r == [UNKNOWN, UNKNOWN, UNKNOWN, ["rc", UNINITIALIZED], UNINITIALIZED]
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, proc.stderr
    assert f"{path}:{line}:" in lines[0]


# --------------------------------------------------------------------------------------------------
# Error handling, reference counting and threads.

ERRORS_BODY = """
r = {}
r["string"] = [ffi.string(lib.nvmlErrorString(c)).decode() for c in (0, 1, 2, 3, 999)]
h0 = ffi.new("nvmlDevice_t *")
r["pre"] = [lib.nvmlDeviceGetHandleByIndex_v2(0, h0), lib.nvmlShutdown(),
            lookup("nvmlDeviceGetHandleByPciBusId_v2", "0000:18:00.0")]
assert lib.nvmlInit_v2() == 0 and lib.nvmlInitWithFlags(0) == 0
h = handle(0)
bogus = ffi.cast("nvmlDevice_t", hid(h) + 1)
null = ffi.cast("nvmlDevice_t", 0)
r["bad_handle"] = [u(lib.nvmlDeviceGetIndex, x) for x in (bogus, null)] + \\
                  [u(lib.nvmlDeviceGetP2PStatus, h, bogus, 0, ctype="int *")]
r["bad_index"] = lib.nvmlDeviceGetHandleByIndex_v2(8, h0)
small = ffi.new("char[8]")
r["small"] = [lib.nvmlDeviceGetName(h, small, 8), lib.nvmlDeviceGetUUID(h, small, 8),
              lib.nvmlSystemGetDriverVersion(small, 2)]
r["null_out"] = [lib.nvmlDeviceGetCount_v2(ffi.NULL), lib.nvmlDeviceGetMemoryInfo(h, ffi.NULL)]
m2 = ffi.new("nvmlMemory_v2_t *")
m2.version = 1
r["mem_v2_bad"] = lib.nvmlDeviceGetMemoryInfo_v2(h, m2)
r["p2p_bad_index"] = u(lib.nvmlDeviceGetP2PStatus, h, handle(1), 9, ctype="int *")
r["ecc"] = [u(lib.nvmlDeviceGetMemoryErrorCounter, h, 1, 1, loc, ctype="unsigned long long *")
            for loc in (2, 4, 8)]
r["after_one_shutdown"] = [lib.nvmlShutdown(), u(lib.nvmlDeviceGetCount_v2)]
r["after_two_shutdowns"] = [lib.nvmlShutdown(), u(lib.nvmlDeviceGetCount_v2), u(lib.nvmlDeviceGetIndex, h),
                            lib.nvmlShutdown()]
assert lib.nvmlInit() == 0
r["stable"] = hid(handle(0)) == hid(h)
mask = ffi.new("unsigned long[16]")
r["affinity"] = [lib.nvmlDeviceGetCpuAffinity(h, 16, mask), sum(bin(mask[k]).count("1") for k in range(16)),
                 lib.nvmlDeviceGetCpuAffinity(h, 0, mask)]
emit(r)
"""


def test_errors_and_refcount(nvml_lib):
    r, _ = run_child(nvml_lib, ERRORS_BODY, child_env())
    assert r["string"][0] == "Success" and r["string"][3] == "Not Supported"
    assert r["string"][4] == "Unknown Error" and len(set(r["string"])) == 5
    assert r["pre"] == [UNINITIALIZED, UNINITIALIZED, ["rc", UNINITIALIZED]]
    assert r["bad_handle"] == [["rc", INVALID_ARGUMENT]] * 3
    assert r["bad_index"] == INVALID_ARGUMENT
    assert r["small"] == [INSUFFICIENT_SIZE] * 3
    assert r["null_out"] == [INVALID_ARGUMENT] * 2
    assert r["mem_v2_bad"] == ARGUMENT_VERSION_MISMATCH
    assert r["p2p_bad_index"] == ["rc", INVALID_ARGUMENT]
    assert r["ecc"] == [0, ["rc", NOT_SUPPORTED], ["rc", INVALID_ARGUMENT]]  # DRAM, texture, bad
    assert r["after_one_shutdown"] == [SUCCESS, 8]
    assert r["after_two_shutdowns"] == [SUCCESS, ["rc", UNINITIALIZED], ["rc", UNINITIALIZED], UNINITIALIZED]
    assert r["stable"] is True
    assert r["affinity"][0] == SUCCESS and r["affinity"][1] >= 1 and r["affinity"][2] == INVALID_ARGUMENT


THREADS_BODY = """
import threading
errors = []
def worker(k):
    for it in range(300):
        rcs = [lib.nvmlInit_v2()]
        cnt = ffi.new("unsigned *")
        rcs.append(lib.nvmlDeviceGetCount_v2(cnt))
        h = ffi.new("nvmlDevice_t *")
        rcs.append(lib.nvmlDeviceGetHandleByIndex_v2((k + it) % 8, h))
        idx = ffi.new("unsigned *")
        rcs.append(lib.nvmlDeviceGetIndex(h[0], idx))
        rcs.append(lib.nvmlShutdown())
        if any(rcs) or cnt[0] != 8 or idx[0] != (k + it) % 8:
            errors.append((k, it, rcs))
threads = [threading.Thread(target=worker, args=(k,)) for k in range(8)]
for t in threads: t.start()
for t in threads: t.join()
emit({"errors": errors[:5], "final": u(lib.nvmlDeviceGetCount_v2)})
"""


def test_concurrent_init_shutdown(nvml_lib):
    r, _ = run_child(nvml_lib, THREADS_BODY, child_env())
    assert r["errors"] == []
    assert r["final"] == ["rc", UNINITIALIZED]  # every init was matched by a shutdown


# --------------------------------------------------------------------------------------------------
# NVIDIA's own Python bindings (nvidia-ml-py), when installed, read the same answers.

PYNVML_BODY = """
import ctypes
import pynvml
pynvml.nvmlInit()
out = []
for i in range(pynvml.nvmlDeviceGetCount()):
    h = pynvml.nvmlDeviceGetHandleByIndex(i)
    pci = pynvml.nvmlDeviceGetPciInfo(h)
    bus = pci.busId if isinstance(pci.busId, str) else pci.busId.decode()
    same = pynvml.nvmlDeviceGetHandleByPciBusId(bus)
    mem = pynvml.nvmlDeviceGetMemoryInfo(h)
    mem2 = pynvml.nvmlDeviceGetMemoryInfo(h, version=pynvml.nvmlMemory_v2)
    remote = pynvml.nvmlDeviceGetNvLinkRemotePciInfo(h, 0)
    fv = pynvml.nvmlDeviceGetFieldValues(h, [pynvml.NVML_FI_DEV_NVLINK_LINK_COUNT,
                                             (pynvml.NVML_FI_DEV_NVLINK_GET_STATE, 17)])
    ext = pynvml.nvmlPciInfoExt_v1_t()
    ext.version = pynvml.nvmlPciInfoExt_v1
    pynvml.nvmlDeviceGetPciInfoExt(h, ctypes.byref(ext))  # the binding passes c_info as given
    name = pynvml.nvmlDeviceGetName(h)
    uuid = pynvml.nvmlDeviceGetUUID(h)
    out.append({
        "name": name if isinstance(name, str) else name.decode(),
        "uuid": uuid if isinstance(uuid, str) else uuid.decode(),
        "busId": bus, "pciDeviceId": pci.pciDeviceId, "same": pynvml.nvmlDeviceGetIndex(same),
        "mem": [mem.total, mem.free + mem.used, mem2.total, mem2.reserved + mem2.free + mem2.used],
        "cc": list(pynvml.nvmlDeviceGetCudaComputeCapability(h)),
        "remote": remote.busId if isinstance(remote.busId, str) else remote.busId.decode(),
        "fv": [[v.nvmlReturn, v.value.uiVal] for v in fv],
        "ext": [ext.pciDeviceId, ext.baseClass],
        "p2p": pynvml.nvmlDeviceGetP2PStatus(h, pynvml.nvmlDeviceGetHandleByIndex((i + 1) % 8),
                                             pynvml.NVML_P2P_CAPS_INDEX_NVLINK),
        "maxspeed": pynvml.nvmlDeviceGetPcieLinkMaxSpeed(h),
    })
pynvml.nvmlShutdown()
emit(out)
"""


def test_pynvml_agrees(nvml_lib):
    pynvml = pytest.importorskip("pynvml")
    env = child_env(NCCL_HOSTID=None)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(Path(pynvml.__file__).parent),
                                                      env.get("PYTHONPATH")]))
    env["LD_LIBRARY_PATH"] = os.pathsep.join(filter(None, [str(nvml_lib.parent),
                                                           env.get("LD_LIBRARY_PATH")]))
    gpus, _ = run_child(nvml_lib, PYNVML_BODY, env)
    domain = default_domain(0)
    dev_id, _ = pci_ids("h100")
    assert len(gpus) == 8
    for i, g in enumerate(gpus):
        assert g["name"] == "NVIDIA H100 80GB HBM3" and g["uuid"] == uuid_default(0, i)
        assert g["busId"] == f"{domain:08X}:{DEFAULT_GPU_BUS[i]:02X}:00.0"
        assert g["pciDeviceId"] == dev_id and g["same"] == i
        total = MODELS["h100"]["total_memory"]
        assert g["mem"] == [total] * 4
        assert g["cc"] == [9, 0]
        assert g["remote"] == f"{domain:08X}:05:00.0"
        assert g["fv"] == [[SUCCESS, 18], [SUCCESS, 1]]
        assert g["ext"] == [dev_id, 3]
        assert g["p2p"] == P2P_OK
        assert g["maxspeed"] == 5


# --------------------------------------------------------------------------------------------------
# The function list (fake_cuda/nvml/nvml_functions.def): what the library exports, and all of nvml.h.

FUNCTIONS_DEF = ROOT / "fake_cuda" / "nvml" / "nvml_functions.def"


def function_rows() -> list[tuple[str, str]]:
    return re.findall(r"^([IDSH])\((\w+)\)$", FUNCTIONS_DEF.read_text(), re.M)


def nvml_header() -> Path | None:
    """NVIDIA's nvml.h: the nvidia-nvml-dev wheel's (a test dependency), else a CUDA toolkit's."""
    from ncclsim.paths import nvidia_package_dirs
    candidates = [d / sub / "include" / "nvml.h" for d in nvidia_package_dirs() for sub in ("cu13", "nvml")]
    candidates.append(Path("/usr/local/cuda/include/nvml.h"))
    return next((c for c in candidates if c.is_file()), None)


def header_function_names(text: str) -> set[str]:
    """Every function nvml.h declares, and every name its #defines map onto another function."""
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    text = re.sub(r"//[^\n]*", "", text)
    names = set(re.findall(r"DECLDIR\s*\**\s*(nvml\w+)\s*\(", text))
    names |= set(re.findall(r"DECLDIR\s+char\s*\*\s*(nvml\w+)\s*\(", text))
    aliases = re.findall(r"^\s*#\s*define\s+(nvml\w+)\s+(nvml\w+)\s*$", text, re.M)
    names |= {a for a, b in aliases if b in names}
    return names


def test_function_list_sorted_and_unique():
    names = [n for _, n in function_rows()]
    assert len(names) > 390
    assert names == sorted(names) and len(set(names)) == len(names)


def test_exports_are_the_function_list(nvml_lib):
    names = {n for _, n in function_rows()}
    lib = ctypes.CDLL(str(nvml_lib))
    assert [n for n in sorted(names) if not hasattr(lib, n)] == []
    nm = shutil.which("nm")
    if not nm:
        pytest.skip("nm (binutils) is not installed: cannot list the exported symbols")
    out = subprocess.run([nm, "-D", "--defined-only", str(nvml_lib)], capture_output=True, text=True,
                         check=True).stdout
    exported = {line.split()[-1] for line in out.splitlines() if line.split()[-1].startswith("nvml")}
    assert exported == names


def test_every_header_function_exported():
    header = nvml_header()
    assert header is not None, "no nvml.h: install the test extras (nvidia-nvml-dev)"
    want = header_function_names(header.read_text(errors="replace"))
    assert len(want) > 300, header
    have = {n for _, n in function_rows()}
    assert sorted(want - have) == []


def test_header_parser_on_sample():
    sample = """
    #define nvmlInit nvmlInit_v2
    #define nvmlGetBlacklistDeviceCount nvmlGetExcludedDeviceCount
    #define nvmlBlacklistDeviceInfo_t nvmlExcludedDeviceInfo_t
    nvmlReturn_t DECLDIR nvmlInit_v2(void);
    const DECLDIR char* nvmlErrorString(nvmlReturn_t result);
    nvmlReturn_t DECLDIR nvmlGetExcludedDeviceCount(unsigned int *deviceCount);
    /* nvmlReturn_t DECLDIR nvmlCommentedOut(void); */
    """
    assert header_function_names(sample) == {"nvmlInit", "nvmlInit_v2", "nvmlErrorString",
                                             "nvmlGetBlacklistDeviceCount", "nvmlGetExcludedDeviceCount"}


# Every function, called through ctypes with zeroed buffers: UNINITIALIZED before nvmlInit; after it
# a bad device handle is INVALID_ARGUMENT, stubs answer as their row says.
NOT_DEVICE_FIRST = {"nvmlDeviceGetCount", "nvmlDeviceGetCount_v2", "nvmlDeviceGetHandleByIndex",
                    "nvmlDeviceGetHandleByIndex_v2", "nvmlDeviceGetHandleByPciBusId",
                    "nvmlDeviceGetHandleByPciBusId_v2", "nvmlDeviceGetHandleBySerial", "nvmlDeviceGetHandleByUUID",
                    "nvmlDeviceGetHandleByUUIDV", "nvmlDeviceDiscoverGpus", "nvmlDeviceModifyDrainState",
                    "nvmlDeviceQueryDrainState", "nvmlDeviceRemoveGpu", "nvmlDeviceRemoveGpu_v2"}

GENERIC_BODY = """
import ctypes
ROWS = __ROWS__
DEVICE_FIRST = __DEVICE_FIRST__
c = ctypes.CDLL(LIBPATH)
bufs = [ctypes.create_string_buffer(4096) for _ in range(6)]
def call(name, first):
    f = getattr(c, name)
    f.restype = ctypes.c_int
    return f(first, *[ctypes.cast(b, ctypes.c_void_p) for b in bufs[1:]])
buf0 = ctypes.cast(bufs[0], ctypes.c_void_p)
skip = {"nvmlInit", "nvmlInit_v2", "nvmlInitWithFlags", "nvmlErrorString"}
r = {"before": {n: call(n, buf0) for k, n in ROWS if n not in skip}}
assert c.nvmlInit_v2() == 0
h = ctypes.c_void_p()
assert c.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(h)) == 0
bogus = ctypes.c_void_p(h.value + 1)
r["bad_handle"] = {n: call(n, bogus) for n in DEVICE_FIRST}
r["good_handle"] = {n: call(n, h) for k, n in ROWS if k == "D"}
r["system"] = {n: call(n, buf0) for k, n in ROWS if k in "SH"}
emit(r)
"""


def test_every_function_checks_init_and_handles(nvml_lib):
    rows = function_rows()
    device_first = sorted(n for _, n in rows if n.startswith(("nvmlDevice", "nvmlGpmQuery", "nvmlGpmSet",
                                                                 "nvmlGpmSampleGet", "nvmlGpmMig"))
                          and n not in NOT_DEVICE_FIRST)
    body = GENERIC_BODY.replace("__ROWS__", repr(rows)).replace("__DEVICE_FIRST__", repr(device_first))
    r, _ = run_child(nvml_lib, body, child_env())
    assert {n: rc for n, rc in r["before"].items() if rc != UNINITIALIZED} == {}
    assert {n: rc for n, rc in r["bad_handle"].items() if rc != INVALID_ARGUMENT} == {}
    assert set(r["good_handle"].values()) == {NOT_SUPPORTED}
    kinds = dict((n, k) for k, n in rows)
    assert {n: rc for n, rc in r["system"].items()
            if rc != (NOT_SUPPORTED if kinds[n] == "S" else INVALID_ARGUMENT)} == {}


# --------------------------------------------------------------------------------------------------
# Monitoring: what gpustat and nvitop ask, answered from the platform or as a documented idle GPU.

IDLE_TEMP_C, IDLE_POWER_FRACTION = 32, 10  # nvml_monitor.c: assumed idle readings
MONITOR_BODY = """
import ctypes
c = ctypes.CDLL(LIBPATH)
U, ULL, I = ctypes.c_uint, ctypes.c_ulonglong, ctypes.c_int
def q(name, *args, out=(U,)):
    outs = [t() for t in out]
    f = getattr(c, name)
    rc = f(*args, *[ctypes.byref(o) for o in outs])
    if rc:
        return ["rc", rc]
    return outs[0].value if len(outs) == 1 else [o.value for o in outs]
r = {"before": q("nvmlDeviceGetTemperature", None, 0)}
assert c.nvmlInit_v2() == 0
n = U()
assert c.nvmlDeviceGetCount_v2(ctypes.byref(n)) == 0
gpus = []
for i in range(n.value):
    h = ctypes.c_void_p()
    assert c.nvmlDeviceGetHandleByIndex_v2(i, ctypes.byref(h)) == 0
    g = {}
    g["util"] = q("nvmlDeviceGetUtilizationRates", h, out=(U, U))
    g["temp"] = q("nvmlDeviceGetTemperature", h, 0)
    g["temp_bad_sensor"] = q("nvmlDeviceGetTemperature", h, 1)
    tv = (U * 3)((12 | (1 << 24)), 0, 0)
    g["temp_v"] = [c.nvmlDeviceGetTemperatureV(h, tv), tv[2]]
    tv[0] = 12
    g["temp_v_bad"] = c.nvmlDeviceGetTemperatureV(h, tv)
    g["thresholds"] = [q("nvmlDeviceGetTemperatureThreshold", h, t) for t in range(9)]
    g["power"] = q("nvmlDeviceGetPowerUsage", h)
    g["limit"] = q("nvmlDeviceGetEnforcedPowerLimit", h)
    g["constraints"] = q("nvmlDeviceGetPowerManagementLimitConstraints", h, out=(U, U))
    g["energy"] = q("nvmlDeviceGetTotalEnergyConsumption", h, out=(ULL,))
    g["pstate"] = [q("nvmlDeviceGetPerformanceState", h, out=(I,)), q("nvmlDeviceGetPowerState", h, out=(I,))]
    ps = (I * 16)()
    g["pstates"] = [c.nvmlDeviceGetSupportedPerformanceStates(h, ps, 64), list(ps)[:3],
                    c.nvmlDeviceGetSupportedPerformanceStates(h, ps, 2)]
    g["fan"] = [q("nvmlDeviceGetFanSpeed", h), q("nvmlDeviceGetFanSpeed_v2", h, 0), q("nvmlDeviceGetNumFans", h)]
    g["ecc"] = [q("nvmlDeviceGetTotalEccErrors", h, e, k, out=(ULL,)) for e in (0, 1) for k in (0, 1)]
    g["ecc_bad"] = q("nvmlDeviceGetTotalEccErrors", h, 2, 0, out=(ULL,))
    g["ecc_mode"] = q("nvmlDeviceGetEccMode", h, out=(I, I))
    g["enc_dec"] = [q("nvmlDeviceGetEncoderUtilization", h, out=(U, U))[0],
                    q("nvmlDeviceGetDecoderUtilization", h, out=(U, U))[0]]
    g["display"] = [q("nvmlDeviceGetDisplayActive", h, out=(I,)), q("nvmlDeviceGetDisplayMode", h, out=(I,))]
    g["driver_model"] = [q("nvmlDeviceGetDriverModel", h, out=(I, I)), q("nvmlDeviceGetDriverModel_v2", h, out=(I, I))]
    procs = {}
    for fn in ("Compute", "Graphics", "MPSCompute"):
        for v in ("", "_v2", "_v3"):
            name = f"nvmlDeviceGet{fn}RunningProcesses{v}"
            for start in (0, 4):
                cnt = U(start)
                arr = (ULL * 16)(*([0xAA] * 16))
                rc = getattr(c, name)(h, ctypes.byref(cnt), arr if start else None)
                procs[f"{name}/{start}"] = [rc, cnt.value, list(arr) == [0xAA] * 16]
            procs[f"{name}/null"] = getattr(c, name)(h, None, None)
    g["procs"] = procs
    g["clocks"] = [q("nvmlDeviceGetClock", h, t, cid) for t in range(4) for cid in range(4)]
    g["clock_bad_id"] = q("nvmlDeviceGetClock", h, 0, 9)
    g["app_clocks"] = [q("nvmlDeviceGetApplicationsClock", h, t) for t in range(4)]
    cnt = U(0)
    arr = (U * 4)()
    g["mem_clocks"] = [c.nvmlDeviceGetSupportedMemoryClocks(h, ctypes.byref(cnt), None), cnt.value]
    cnt.value = 4
    g["mem_clocks"] += [c.nvmlDeviceGetSupportedMemoryClocks(h, ctypes.byref(cnt), arr), cnt.value, arr[0]]
    g["bus_width"] = q("nvmlDeviceGetMemoryBusWidth", h)
    g["cores"] = q("nvmlDeviceGetNumGpuCores", h)
    g["mig"] = q("nvmlDeviceGetMigMode", h, out=(U, U))
    g["is_mig"] = q("nvmlDeviceIsMigDeviceHandle", h)
    g["reasons"] = [q("nvmlDeviceGetCurrentClocksEventReasons", h, out=(ULL,)),
                    q("nvmlDeviceGetSupportedClocksEventReasons", h, out=(ULL,))]
    g["pcie_tx"] = [q("nvmlDeviceGetPcieThroughput", h, 0), q("nvmlDeviceGetPcieThroughput", h, 3)]
    vb = ctypes.create_string_buffer(32)
    g["vbios"] = [c.nvmlDeviceGetVbiosVersion(h, vb, 32), vb.value.decode()]
    ser = ctypes.create_string_buffer(30)
    assert c.nvmlDeviceGetSerial(h, ser, 30) == 0
    hs = ctypes.c_void_p()
    g["by_serial"] = [c.nvmlDeviceGetHandleBySerial(ser.value, ctypes.byref(hs)), hs.value == h.value]
    g["null_out"] = [c.nvmlDeviceGetUtilizationRates(h, None), c.nvmlDeviceGetPowerUsage(h, None),
                     c.nvmlDeviceGetTemperature(h, 0, None), c.nvmlDeviceGetPerformanceState(h, None)]
    cnt = U(0)
    g["nearest"] = [c.nvmlDeviceGetTopologyNearestGpus(h, 40, ctypes.byref(cnt), None), cnt.value]
    gpus.append(g)
r["gpus"] = gpus
cnt = U(7)
r["excluded"] = [c.nvmlGetExcludedDeviceCount(ctypes.byref(cnt)), cnt.value, c.nvmlGetBlacklistDeviceCount(None)]
cnt = U(7)
r["units"] = [c.nvmlUnitGetCount(ctypes.byref(cnt)), cnt.value]
name = ctypes.create_string_buffer(256)
import os
r["proc_name"] = [c.nvmlSystemGetProcessName(os.getpid(), name, 256), name.value.decode()]
br = ctypes.create_string_buffer(84)
ctypes.memmove(br, (84 | (1 << 24)).to_bytes(4, "little"), 4)
r["branch"] = [c.nvmlSystemGetDriverBranch(br, 80), br.raw[4:].split(b"\\0")[0].decode()]
emit(r)
"""


@pytest.fixture(scope="module")
def monitored(nvml_lib, tmp_path_factory):
    path = tmp_path_factory.mktemp("platform") / "host3.conf"
    path.write_text(PLATFORM)
    result, _ = run_child(nvml_lib, MONITOR_BODY, child_env(NCCLSIM_PLATFORM=str(path)))
    return result


def test_idle_utilisation_temperature_power(monitored):
    assert monitored["before"] == ["rc", UNINITIALIZED]
    for i, g in enumerate(monitored["gpus"]):
        model = MODELS[CFG_MODELS[i]]
        limit_mw = model["power_limit_w"] * 1000
        assert g["util"] == [0, 0] and g["enc_dec"] == [0, 0]
        assert g["temp"] == IDLE_TEMP_C and g["temp_bad_sensor"] == ["rc", INVALID_ARGUMENT]
        assert g["temp_v"] == [SUCCESS, IDLE_TEMP_C] and g["temp_v_bad"] == ARGUMENT_VERSION_MISMATCH
        assert g["thresholds"][:4] == [92, 89, 95, 87]
        assert g["thresholds"][4:8] == [["rc", NOT_SUPPORTED]] * 4 and g["thresholds"][8] == ["rc", INVALID_ARGUMENT]
        assert g["limit"] == limit_mw and g["power"] == limit_mw // IDLE_POWER_FRACTION
        assert g["constraints"] == [limit_mw // 4, limit_mw]
        assert g["energy"] > 0
        assert g["pstate"] == [0, 0]
        assert g["pstates"] == [SUCCESS, [0, 32, 32], INSUFFICIENT_SIZE]
        assert g["fan"] == [["rc", NOT_SUPPORTED]] * 3  # passively cooled data-centre boards
        assert g["display"] == [0, 0]
        assert g["driver_model"] == [["rc", NOT_SUPPORTED]] * 2  # Windows only
        assert g["null_out"] == [INVALID_ARGUMENT] * 4
        assert g["reasons"] == [0x1, 0x1FF]
        assert g["pcie_tx"] == [0, ["rc", INVALID_ARGUMENT]]


def test_ecc_clocks_board(monitored):
    for i, g in enumerate(monitored["gpus"]):
        model = MODELS[CFG_MODELS[i]]
        assert g["ecc"] == [0] * 4 and g["ecc_bad"] == ["rc", INVALID_ARGUMENT]
        assert g["ecc_mode"] == [1, 1]
        clocks = model["max_clocks_mhz"]
        want = [clocks["graphics"], clocks["sm"], clocks["memory"], clocks["video"]]
        assert g["clocks"] == [w for w in want for _ in range(4)]
        assert g["clock_bad_id"] == ["rc", INVALID_ARGUMENT]
        assert g["app_clocks"] == want
        assert g["mem_clocks"] == [INSUFFICIENT_SIZE, 1, SUCCESS, 1, clocks["memory"]]
        attrs = model["attributes"]
        assert g["bus_width"] == attrs["GLOBAL_MEMORY_BUS_WIDTH"]
        assert g["cores"] == attrs["MULTIPROCESSOR_COUNT"] * (64 if model["sm"] == 80 else 128)
        assert g["mig"] == ([0, 0] if model["sm"] in (80, 90) else ["rc", NOT_SUPPORTED])
        assert g["is_mig"] == 0
        assert g["vbios"][0] == SUCCESS and len(g["vbios"][1].split(".")) == 5
        assert g["by_serial"] == [SUCCESS, True]
        assert g["nearest"] == [SUCCESS, [1, 1, 1, 1][i]]  # the other GPU of its NUMA node


def test_process_listings_empty(monitored):
    for g in monitored["gpus"]:
        for key, got in g["procs"].items():
            if key.endswith("/null"):
                assert got == INVALID_ARGUMENT, key
            else:  # count 0, success, the caller's array untouched
                assert got == [SUCCESS, 0, True], key


def test_system_monitoring_queries(monitored):
    r = monitored
    assert r["excluded"] == [SUCCESS, 0, INVALID_ARGUMENT]
    assert r["units"] == [SUCCESS, 0]
    assert r["proc_name"][0] == SUCCESS and "python" in r["proc_name"][1]
    assert r["branch"] == [SUCCESS, "r550_00"]


# ---- running processes: the host's directory that each rank's driver writes ----

PROCESSES_BODY = """
assert lib.nvmlInit_v2() == 0
def listing(i, room, v1=False):
    count = ffi.new("unsigned *", room)
    infos = ffi.new("nvmlProcessInfo_v1_t[4]" if v1 else "nvmlProcessInfo_t[4]")
    fn = lib.nvmlDeviceGetComputeRunningProcesses if v1 else lib.nvmlDeviceGetComputeRunningProcesses_v3
    rc = fn(handle(i), count, infos)
    got = [[infos[k].pid, infos[k].usedGpuMemory] + ([] if v1 else [infos[k].gpuInstanceId])
           for k in range(min(count[0], room))] if rc == 0 else []
    return [rc, count[0], got]
m = ffi.new("nvmlMemory_v2_t *")
m.version = 40 | (2 << 24)
assert lib.nvmlDeviceGetMemoryInfo_v2(handle(0), m) == 0
emit({"asked_0": listing(0, 0), "gpu0": listing(0, 4), "gpu1_v1": listing(1, 4, v1=True),
      "gpu2": listing(2, 4), "used0": m.used})
"""


def test_running_processes_are_the_hosts_ranks(nvml_lib, tmp_path):
    """Each process's driver keeps dirname(NCCLSIM_PLATFORM)/processes/<pid> (bus id and bytes
    per GPU it uses); NVML lists the live ones and counts their memory as used."""
    plat = tmp_path / "host3.conf"
    plat.write_text(PLATFORM)
    procs = tmp_path / "processes"
    procs.mkdir()
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True, check=True).stdout.strip()
    (procs / gone).write_text("0000:18:00.0 5\n")  # killed before it removed its file
    (procs / ".77.tmp").write_text("0000:18:00.0 7\n")  # being written
    with subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"]) as rank:
        try:
            (procs / str(rank.pid)).write_text("0000:18:00.0 1048576\n0000:2a:00.0 0\n")
            r, _ = run_child(nvml_lib, PROCESSES_BODY, child_env(NCCLSIM_PLATFORM=str(plat)))
        finally:
            rank.kill()
    assert r["asked_0"] == [INSUFFICIENT_SIZE, 1, []]
    assert r["gpu0"] == [SUCCESS, 1, [[rank.pid, 1 << 20, 0xFFFFFFFF]]]
    assert r["gpu1_v1"] == [SUCCESS, 1, [[rank.pid, 0]]]
    assert r["gpu2"] == [SUCCESS, 0, []]
    assert r["used0"] == 1 << 20
    assert not (procs / gone).exists() and (procs / ".77.tmp").exists()
