"""Platform configuration on the Python side: models, default rule, file writer
and reader, and agreement with the C twin in fake_cuda/common/platform.c."""

from __future__ import annotations

import importlib.util
import subprocess
from pathlib import Path
from typing import Callable

import pytest

from ncclsim import NcclsimError
from ncclsim.platform.config import (
    BOARD_GPU_BUSES, NVSWITCH_BUSES, GpuConfig, PlatformConfig, PlatformConfigError,
    default_platform, default_uuid, format_platform, parse_platform, read_platform,
    write_platform)
from ncclsim.platform.models import GpuCatalog, UnknownModelError
from ncclsim.platform.pci import PciAddress, parse_uuid

REPO_ROOT = Path(__file__).resolve().parents[1]


# ---- models ----

def test_models_load(catalog: GpuCatalog) -> None:
    assert set(catalog.keys()) >= {"h100", "a100", "l40s"}
    h100 = catalog.get("h100")
    assert (h100.name, h100.sm, h100.nvlinks) == ("NVIDIA H100 80GB HBM3", 90, 18)
    assert h100.pci_device_id == 0x2330
    assert h100.attributes["MULTIPROCESSOR_COUNT"] == 132
    assert catalog.get("NVIDIA L40S").nvlinks == 0


# Each model's cited values (its "source" in gpu_models.json): compute capability,
# memory in bytes, SMs, NVLinks, NVLink generation, PCIe generation, PCI device id.
CITED = {
    "v100": (70, 34089730048, 80, 6, 2, 3, 0x1DB5),
    "a100-40gb": (80, 42505273344, 108, 12, 3, 4, 0x20B0),
    "a100-pcie": (80, 84974239744, 108, 12, 3, 4, 0x20B5),
    "a10g": (86, 22723 << 20, 80, 0, 0, 4, 0x2237),
    "l4": (89, 23612293120, 58, 0, 0, 4, 0x27B8),
    "h100-pcie": (90, 81008 << 20, 114, 12, 4, 5, 0x2331),
    "h100-nvl": (90, 99861594112, 132, 12, 4, 5, 0x2321),
    "h20": (90, 97285 << 20, 78, 18, 4, 5, 0x2329),
    "h200": (90, 143156 << 20, 132, 18, 4, 5, 0x2335),
    "b200": (100, 182642 << 20, 148, 18, 5, 5, 0x2901),
    "gb200": (100, 185998508032, 152, 18, 5, 5, 0x2941),
}


@pytest.mark.parametrize("key", sorted(CITED))
def test_model_has_its_cited_values(catalog: GpuCatalog, key: str) -> None:
    m = catalog.get(key)
    sm, memory, sms, nvlinks, nvlink_version, pcie_gen, device = CITED[key]
    assert (m.sm, m.total_memory, m.nvlinks, m.nvlink_version, m.pcie_gen, m.pci_device_id) == (
        sm, memory, nvlinks, nvlink_version, pcie_gen, device)
    a = m.attributes
    assert (a["COMPUTE_CAPABILITY_MAJOR"], a["COMPUTE_CAPABILITY_MINOR"]) == divmod(sm, 10)
    assert a["MULTIPROCESSOR_COUNT"] == sms
    assert a["CLOCK_RATE"] == 1000 * m.max_clocks_mhz.sm
    assert a["MEMORY_CLOCK_RATE"] == 1000 * m.max_clocks_mhz.memory
    # Only boards on an NVSwitch fabric (SXM, 18 links) join multicast objects.
    assert m.multicast is (nvlinks == 18)
    assert m.source and catalog.get(m.name) is m  # cited, and found by the name NVML shows


def test_catalog_lists_each_capabilitys_reference_model_first(catalog: GpuCatalog) -> None:
    """Importers that only know a compute capability or an NVLink count take the
    first model that has it: the existing models keep their place."""
    assert catalog.keys()[:3] == ["h100", "a100", "l40s"]
    first_by_sm = {}
    for m in catalog:
        first_by_sm.setdefault(m.sm, m.key)
    assert first_by_sm == {90: "h100", 80: "a100", 89: "l40s", 70: "v100", 86: "a10g",
                           100: "b200"}


def test_unknown_model_is_a_user_error(catalog: GpuCatalog) -> None:
    with pytest.raises(UnknownModelError, match="known: h100"):
        catalog.get("p100")
    with pytest.raises(NcclsimError):
        default_platform(0, 8, "p100", catalog)


# ---- default rule ----

def test_default_board(catalog: GpuCatalog, no_sys_pci: Path) -> None:
    cfg = default_platform(0, 8, "h100", catalog, no_sys_pci)
    assert cfg.hostname == "ncclsim-h0"
    assert cfg.driver_version == 13000
    assert [str(g.bus_id) for g in cfg.gpus] == [
        "0000:18:00.0", "0000:2a:00.0", "0000:3a:00.0", "0000:5d:00.0",
        "0000:9a:00.0", "0000:ab:00.0", "0000:ba:00.0", "0000:db:00.0"]
    assert [g.numa_node for g in cfg.gpus] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert all(g.memory == catalog.get("h100").total_memory for g in cfg.gpus)


@pytest.mark.parametrize("host", [0, 1, 7, 300])
def test_domain_is_host_index(catalog: GpuCatalog, no_sys_pci: Path, host: int) -> None:
    cfg = default_platform(host, 8, "h100", catalog, no_sys_pci)
    assert {g.bus_id.domain for g in cfg.gpus} == {host}
    assert cfg.hostname == f"ncclsim-h{host}"


def test_domain_moves_off_real_devices(catalog: GpuCatalog, no_sys_pci: Path) -> None:
    (no_sys_pci / "0000:9a:00.0").mkdir()
    cfg = default_platform(0, 8, "h100", catalog, no_sys_pci)
    assert {g.bus_id.domain for g in cfg.gpus} == {0x100}
    assert {a.domain for g in cfg.gpus for a in g.nvlink_remote} == {0x100}
    assert {g.bus_id.domain for g in default_platform(1, 8, "h100", catalog, no_sys_pci).gpus} == {1}


def test_uuids_unique_per_host_and_device(catalog: GpuCatalog, no_sys_pci: Path) -> None:
    uuids = [g.uuid for h in range(4) for g in default_platform(h, 8, "h100", catalog, no_sys_pci).gpus]
    assert len(set(uuids)) == 32
    assert default_uuid(1, 2) == "GPU-6e63736d-0000-0001-0000-000200000001"
    raw = parse_uuid(default_uuid(258, 7))
    assert raw[:4] == b"ncsm" and raw[4:8] == (258).to_bytes(4, "big")
    assert raw[8:12] == (7).to_bytes(4, "big") and raw[12:] == b"\0\0\0\1"


def test_nvlinks_spread_over_switches(catalog: GpuCatalog, no_sys_pci: Path) -> None:
    cfg = default_platform(2, 8, "h100", catalog, no_sys_pci)
    for g in cfg.gpus:
        assert len(g.nvlink_remote) == 18
        assert [a.bus for a in g.nvlink_remote[:4]] == list(NVSWITCH_BUSES)
        counts = {b: sum(a.bus == b for a in g.nvlink_remote) for b in NVSWITCH_BUSES}
        assert counts == {0x05: 5, 0x06: 5, 0x07: 4, 0x08: 4}
        assert {a.domain for a in g.nvlink_remote} == {2}
    assert all(len(g.nvlink_remote) == 12 for g in default_platform(0, 8, "a100", catalog).gpus)
    assert all(g.nvlink_remote == () for g in default_platform(0, 4, "l40s", catalog).gpus)


@pytest.mark.parametrize("ngpus", [1, 2, 3, 9, 16, 64])
def test_other_gpu_counts(catalog: GpuCatalog, no_sys_pci: Path, ngpus: int) -> None:
    cfg = default_platform(0, ngpus, "h100", catalog, no_sys_pci)
    buses = [g.bus_id.bus for g in cfg.gpus]
    assert len(set(buses)) == ngpus
    assert buses[:8] == list(BOARD_GPU_BUSES[:ngpus])
    assert not set(buses) & set(NVSWITCH_BUSES)
    assert all(0 < b <= 0xFF for b in buses)
    numa = [g.numa_node for g in cfg.gpus]
    assert numa == sorted(numa) and numa.count(0) == (ngpus + 1) // 2


@pytest.mark.parametrize("ngpus, host", [(0, 0), (65, 0), (8, -1), (8, 0x10000)])
def test_default_rejects_bad_shapes(catalog: GpuCatalog, ngpus: int, host: int) -> None:
    with pytest.raises(PlatformConfigError):
        default_platform(host, ngpus, "h100", catalog)


# ---- writer and reader ----

@pytest.mark.parametrize("host, ngpus, model", [(0, 8, "h100"), (5, 16, "a100"), (2, 3, "l40s")])
def test_round_trip(catalog: GpuCatalog, no_sys_pci: Path, tmp_path: Path,
                    host: int, ngpus: int, model: str) -> None:
    cfg = default_platform(host, ngpus, model, catalog, no_sys_pci)
    assert parse_platform(format_platform(cfg), catalog=catalog) == cfg
    path = tmp_path / "p.conf"
    assert write_platform(cfg, path, catalog) is True
    assert read_platform(path, catalog) == cfg
    assert write_platform(cfg, path, catalog) is False  # unchanged: not rewritten


def test_written_file_format(catalog: GpuCatalog, no_sys_pci: Path) -> None:
    text = format_platform(default_platform(0, 1, "h100", catalog, no_sys_pci))
    lines = [ln for ln in text.splitlines() if not ln.startswith("#")]
    assert lines == [
        "[platform]", "host_index = 0", "hostname = ncclsim-h0", "driver_version = 13000",
        "multicast = 1", "collnet = 0", "[gpu]", "model = h100", "bus_id = 0000:18:00.0",
        "uuid = GPU-6e63736d-0000-0000-0000-000000000001", "memory = 85045477376",
        "numa_node = 0",
        "nvlink_remote = " + ",".join(f"0000:{b:02x}:00.0" for b in [5, 6, 7, 8] * 4 + [5, 6])]


def test_compact_and_explicit_links(catalog: GpuCatalog) -> None:
    sw = [PciAddress(0, 5), PciAddress(0, 6)]
    gpu = GpuConfig("h100", PciAddress(0, 0x18), default_uuid(0, 0), 1 << 30, 0,
                    (sw[0],) * 4 + (sw[1],) * 2)
    text = format_platform(PlatformConfig(0, "h", (gpu,)))
    assert "nvlink_remote = 0000:05:00.0*4,0000:06:00.0*2\n" in text
    assert parse_platform(text, catalog=catalog).gpus[0] == gpu
    none = GpuConfig("h100", PciAddress(0, 0x18), default_uuid(0, 0), 1 << 30, 0, ())
    text = format_platform(PlatformConfig(0, "h", (none,)))
    assert "nvlink_remote =\n" in text  # explicitly no links, not the model's default
    assert parse_platform(text, catalog=catalog).gpus[0].nvlink_remote == ()


def test_reader_defaults(catalog: GpuCatalog) -> None:
    cfg = parse_platform("[platform]\nhost_index = 3\n[gpu]\nmodel = a100\nbus_id = 0003:2A:00.0\n",
                         catalog=catalog)
    (g,) = cfg.gpus
    assert cfg.hostname == "ncclsim-h3" and cfg.driver_version == 13000
    assert (str(g.bus_id), g.uuid, g.numa_node) == ("0003:2a:00.0", default_uuid(3, 0), -1)
    assert g.memory == catalog.get("a100").total_memory
    assert len(g.nvlink_remote) == 12 and {a.domain for a in g.nvlink_remote} == {3}


@pytest.mark.parametrize("text, where, problem", [
    ("[gpu]\nmodel = h100\nbus_id = 0000:18:00.0\ncolour = red\n", ":4:", "unknown key"),
    ("[gpu]\nmodel = p100\n", ":2:", "unknown GPU model"),
    ("[gpu]\nmodel = h100\nbus_id = 18\n", ":3:", "bus id"),
    ("[platform]\nhost_index = 70000\n", ":2:", "host_index"),
    ("[gpu]\nmodel = h100\nbus_id = 0:18:0.0\n[gpu]\nmodel = h100\nbus_id = 0000:18:00.0\n",
     ":0:", "same bus_id"),
    ("[platform]\nhost_index = 0\n", ":0:", "no [gpu] section"),
    ("host_index = 0\n", ":1:", "outside any section"),
    ("[gpus]\n", ":1:", "unknown section"),
])
def test_reader_errors(catalog: GpuCatalog, text: str, where: str, problem: str) -> None:
    with pytest.raises(PlatformConfigError) as e:
        parse_platform(text, "p.conf", catalog)
    assert str(e.value).startswith("p.conf" + where) and problem in str(e.value)


def test_missing_file_is_a_user_error(catalog: GpuCatalog, tmp_path: Path) -> None:
    with pytest.raises(NcclsimError, match="cannot open platform configuration"):
        read_platform(tmp_path / "absent.conf", catalog)


# ---- the C twin: fake_cuda/common/platform.c must read and default the same ----

HARNESS_C = r"""
#include "platform.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void dump(const fc_platform *p)
{
    char b[64];
    printf("[platform]\nhost_index = %d\nhostname = %s\ndriver_version = %d\nmulticast = %d\ncollnet = %d\n",
           p->host_index, p->hostname, p->driver_version, p->multicast, p->collnet);
    for (int i = 0; i < p->ngpus; i++) {
        const fc_gpu *g = &p->gpu[i];
        printf("[gpu]\nmodel = %s\n", g->model->key);
        fc_pci_format(&g->pci, b, sizeof b);
        printf("bus_id = %s\n", b);
        fc_uuid_format(g->uuid, b, sizeof b);
        printf("uuid = %s\nmemory = %llu\nnuma_node = %d\nnvlink_remote =", b,
               (unsigned long long)g->memory, g->numa_node);
        for (int l = 0; l < g->nvlinks; l++) {
            fc_pci_format(&g->nvlink_remote[l], b, sizeof b);
            printf("%s%s", l ? "," : " ", b);
        }
        printf("\n");
    }
}

int main(int argc, char **argv)
{
    static fc_platform p;
    char err[1200];
    if (argc == 3 && strcmp(argv[1], "default") == 0) {
        fc_platform_default(&p, atoi(argv[2]));
    } else if (argc == 3 && strcmp(argv[1], "load") == 0) {
        if (fc_platform_load(argv[2], &p, err, sizeof err)) {
            fprintf(stderr, "%s\n", err);
            return 1;
        }
    } else {
        return 2;
    }
    dump(&p);
    return 0;
}
"""

CTool = Callable[..., "subprocess.CompletedProcess[str]"]


@pytest.fixture(scope="session")
def c_platform(tmp_path_factory: pytest.TempPathFactory) -> CTool:
    """fake_cuda's platform code compiled with a harness that prints what it loaded."""
    spec = importlib.util.spec_from_file_location("fake_cuda_build", REPO_ROOT / "fake_cuda" / "build.py")
    assert spec and spec.loader
    build = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(build)
    d = tmp_path_factory.mktemp("c-platform")
    cuda_inc = build.cuda_include_dir()
    (d / "models.c").write_text(build.gpu_models_c(cuda_inc / "cuda.h"))
    (d / "harness.c").write_text(HARNESS_C)
    common = REPO_ROOT / "fake_cuda" / "common"
    cmd = ["cc", "-std=gnu11", "-D_GNU_SOURCE", "-Wall", "-Werror", f"-I{common}", f"-I{cuda_inc}",
           str(common / "platform.c"), str(common / "log.c"), str(d / "models.c"),
           str(d / "harness.c"), "-o", str(d / "harness"), "-pthread"]
    r = subprocess.run(cmd, capture_output=True, text=True)
    assert r.returncode == 0, f"compiling the platform harness failed:\n{r.stderr}"

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(d / "harness"), *args], capture_output=True, text=True,
                              timeout=60)
    return run


@pytest.mark.parametrize("host", [0, 3])
def test_c_default_matches_python(c_platform: CTool, catalog: GpuCatalog, host: int) -> None:
    r = c_platform("default", str(host))
    assert r.returncode == 0, r.stderr
    # Both consult the real /sys for the domain, so they must agree here too.
    assert parse_platform(r.stdout, catalog=catalog) == default_platform(host, 8, "h100", catalog)


@pytest.mark.parametrize("host, ngpus, model", [(1, 8, "h100"), (5, 16, "a100"), (2, 3, "l40s")])
def test_c_reads_python_file(c_platform: CTool, catalog: GpuCatalog, tmp_path: Path,
                             host: int, ngpus: int, model: str) -> None:
    cfg = default_platform(host, ngpus, model, catalog)
    write_platform(cfg, tmp_path / "p.conf", catalog)
    r = c_platform("load", str(tmp_path / "p.conf"))
    assert r.returncode == 0, r.stderr
    assert parse_platform(r.stdout, catalog=catalog) == cfg


def test_c_reader_defaults_match_python(c_platform: CTool, catalog: GpuCatalog,
                                        tmp_path: Path) -> None:
    text = ("[platform]\nhost_index = 4\n[gpu]\nmodel = h100\nbus_id = 0004:18:00.0\n"
            "[gpu]\nmodel = NVIDIA L40S\nbus_id = 0004:2a:00.0\nmemory = 0x40000000\n"
            "nvlink_remote = 0004:05:00.0*2, 0004:06:00.0\n").replace("[platform]\n", "[platform]\ncollnet = 1\n")
    (tmp_path / "p.conf").write_text(text)
    r = c_platform("load", str(tmp_path / "p.conf"))
    assert r.returncode == 0, r.stderr
    assert parse_platform(r.stdout, catalog=catalog) == parse_platform(text, catalog=catalog)


@pytest.mark.parametrize("text", [
    "[gpu]\nmodel = h100\nbus_id = 0000:18:00.0\ncolour = red\n",
    "[gpu]\nmodel = h100\nbus_id = 0:18:0.0\n[gpu]\nmodel = h100\nbus_id = 0000:18:00.0\n",
    "[platform]\ndriver_version = 9000\n[gpu]\nmodel = h100\nbus_id = 0000:18:00.0\n",
    "[gpu]\nmodel = h100\nbus_id = 0000:18:00.0\nnvlink_remote = 0000:05:00.0*19\n",
    "[platform]\nmulticast = yes\n[gpu]\nmodel = h100\nbus_id = 0000:18:00.0\n",
    "[platform]\ncollnet = 2\n[gpu]\nmodel = h100\nbus_id = 0000:18:00.0\n",
])
def test_c_and_python_reject_alike(c_platform: CTool, catalog: GpuCatalog, tmp_path: Path,
                                   text: str) -> None:
    path = tmp_path / "p.conf"
    path.write_text(text)
    r = c_platform("load", str(path))
    assert r.returncode == 1
    with pytest.raises(PlatformConfigError) as e:
        read_platform(path, catalog)
    location = f"{path}:{r.stderr.split(f'{path}:', 1)[1].split(':', 1)[0]}:"
    assert str(e.value).startswith(location), (r.stderr, str(e.value))
