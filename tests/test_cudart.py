"""The simulated driver under NVIDIA's real CUDA runtime (libcudart.so.12 from PyPI).

Each scenario runs tests/workloads/cudart_checks.py in its own process (the
platform is loaded once per process), with LD_LIBRARY_PATH naming ncclsim's
libcuda.so.1 and the runtime wheel, and NCCLSIM_PLATFORM naming a platform
file the test writes where it needs one. The script drives the runtime through
cffi and prints `RESULT <json>`; the assertions are here.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Optional

import pytest

import ncclsim.paths
from ncclsim.platform.config import default_platform, write_platform
from ncclsim.platform.models import GpuCatalog
from ncclsim.platform.pci import PciAddress

ROOT = Path(__file__).resolve().parent.parent
CHECKS = ROOT / "tests" / "workloads" / "cudart_checks.py"

GiB = 1 << 30
# driver_types.h
cudaSuccess, cudaErrorMemoryAllocation, cudaErrorNoDevice, cudaErrorInvalidDevice = 0, 2, 100, 101
cudaErrorNotReady = 600
cudaMemoryTypeUnregistered, cudaMemoryTypeHost, cudaMemoryTypeDevice = 0, 1, 2


@pytest.fixture
def cudart_env(clean_env: dict[str, str], lib_dir: Path) -> dict[str, str]:
    env = dict(clean_env)
    env.pop("LD_PRELOAD", None)
    env["LD_LIBRARY_PATH"] = f"{lib_dir}:{ncclsim.paths.cudart_lib_dir()}"
    env["NCCLSIM_LOG"] = "0"
    return env


def run_check(env: dict[str, str], check: str, platform: Optional[Path] = None,
              ) -> tuple[dict, subprocess.CompletedProcess]:
    env = dict(env)
    if platform is not None:
        env["NCCLSIM_PLATFORM"] = str(platform)
    r = subprocess.run([sys.executable, str(CHECKS), check], env=env, capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0, f"{check} failed ({r.returncode}):\n{r.stdout}\n{r.stderr}"
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("RESULT ")]
    assert len(lines) == 1, f"{check}: expected one RESULT line:\n{r.stdout}\n{r.stderr}"
    return json.loads(lines[0][len("RESULT "):]), r


def bus_id(text: str) -> PciAddress:
    return PciAddress.parse(text)


# --------------------------------------------------------------------------------------------------
# Devices as configured


def test_default_platform_has_eight_h100(cudart_env, lib_dir, catalog: GpuCatalog):
    res, r = run_check(cudart_env, "devices")
    assert res["rc"] == cudaSuccess
    assert res["count"] == 8
    # The runtime loaded ncclsim's driver, not some other libcuda.so.1.
    assert res["libcuda"] == [str((lib_dir / "libcuda.so.1").resolve())]
    assert res["driver_version"] == 13000
    h100 = catalog.get("h100")
    expected = default_platform(0, 8, "h100", catalog)  # the Python twin of the C default
    for i, (dev, gpu) in enumerate(zip(res["devices"], expected.gpus)):
        assert dev["name"] == h100.name == "NVIDIA H100 80GB HBM3"
        assert dev["cc"] == dev["prop_cc"] == [9, 0]
        assert dev["total_mem"] == dev["meminfo_total"] == h100.total_memory
        assert dev["sm_count"] == h100.attributes["MULTIPROCESSOR_COUNT"]
        assert bus_id(dev["bus_id"]) == gpu.bus_id, f"device {i}"
        assert dev["pci"] == dev["prop_pci"] == [gpu.bus_id.domain, gpu.bus_id.bus, gpu.bus_id.device]
        assert dev["by_bus_id"] == i
        # cudaGetDeviceProperties_v2 wrote no further than sizeof(cudaDeviceProp).
        assert dev["untouched_tail"] == 4096 - 1032
    assert r.stderr == ""


@pytest.mark.parametrize("ngpus, model", [(1, "a100"), (5, "h100"), (16, "h100")])
def test_configured_gpu_count(cudart_env, tmp_path, catalog, ngpus, model):
    cfg = default_platform(0, ngpus, model, catalog, sys_pci_devices=tmp_path)
    plat = tmp_path / "platform.conf"
    write_platform(cfg, plat, catalog)
    res, _ = run_check(cudart_env, "devices", plat)
    assert res["rc"] == cudaSuccess
    assert res["count"] == ngpus
    assert [bus_id(d["bus_id"]) for d in res["devices"]] == [g.bus_id for g in cfg.gpus]
    assert {d["name"] for d in res["devices"]} == {catalog.get(model).name}


MIXED = """\
# written by test_cudart.py
[platform]
host_index = 2
driver_version = 12040
[gpu]
model = a100
bus_id = 0000:07:00.0
memory = 42949672960
[gpu]
model = a100
bus_id = 0000:0F:00.0
[gpu]
model = h100
bus_id = 0002:c1:00.0
"""


def test_configured_models_memory_and_bus_ids(cudart_env, tmp_path, catalog):
    plat = tmp_path / "mixed.conf"
    plat.write_text(MIXED)
    res, r = run_check(cudart_env, "devices", plat)
    assert res["rc"] == cudaSuccess and res["count"] == 3
    assert res["driver_version"] == 12040
    a100, h100 = catalog.get("a100"), catalog.get("h100")
    d0, d1, d2 = res["devices"]
    assert [d["name"] for d in res["devices"]] == [a100.name, a100.name, h100.name]
    assert [d["cc"] for d in res["devices"]] == [[8, 0], [8, 0], [9, 0]]
    assert [d["prop_cc"] for d in res["devices"]] == [[8, 0], [8, 0], [9, 0]]
    assert [d["total_mem"] for d in res["devices"]] == [40 * GiB, a100.total_memory, h100.total_memory]
    assert [d["meminfo_total"] for d in res["devices"]] == [40 * GiB, a100.total_memory,
                                                            h100.total_memory]
    assert [d["bus_id"].lower() for d in res["devices"]] == ["0000:07:00.0", "0000:0f:00.0",
                                                             "0002:c1:00.0"]
    assert [d["pci"] for d in res["devices"]] == [[0, 7, 0], [0, 15, 0], [2, 0xC1, 0]]
    assert [d["by_bus_id"] for d in res["devices"]] == [0, 1, 2]
    assert r.stderr == ""


# --------------------------------------------------------------------------------------------------
# Memory and streams


def test_memcpy_memset_round_trips(cudart_env):
    res, _ = run_check(cudart_env, "copies")
    assert res == {"sync_round_trip": True, "default_kind_round_trip": True, "memset": True,
                   "async_round_trip": True, "stream_query_after_sync": cudaSuccess}


def test_event_elapsed_time_covers_host_function(cudart_env):
    res, _ = run_check(cudart_env, "event_timing")
    assert 40.0 <= res["elapsed_ms"] < 2000.0, res
    assert res["query_before"] == cudaErrorNotReady, "the end event completed before the sleep"
    assert res["query_after"] == cudaSuccess
    assert res["sync_waited_s"] >= 0.02, "cudaEventSynchronize did not wait for the host function"


def test_host_functions_run_in_stream_order(cudart_env):
    res, _ = run_check(cudart_env, "host_func_order")
    # All three ran, in order, by the time cudaStreamSynchronize returned.
    assert res["order"] == [1, 2, 3]
    assert res["query_while_pending"] == cudaErrorNotReady
    assert res["ran_on_caller_thread"] is False


@pytest.mark.e2e
def test_a_full_stream_queue_blocks_the_submitting_thread(cudart_env):
    """As on a GPU, a program that submits without synchronising blocks once
    about a thousand operations are pending, rather than queueing without end."""
    res, _ = run_check(cudart_env, "queue_depth")
    assert 512 <= res["submitted_while_held"] <= 2048, res
    assert res["submitted"] == res["ran"] == res["total"], res


@pytest.mark.parametrize("what", ["stream", "event"])
def test_asking_again_and_again_costs_little_cpu(cudart_env, lib_dir, what):
    """nccl-tests and frameworks wait by querying in a loop: after a few
    not-ready answers a query waits for the work a little, so the asking
    thread leaves the CPU to the emulated GPUs. The host library (preloaded
    into every rank) tells the program's queries from NCCL's."""
    env = {**cudart_env, "LD_PRELOAD": str(lib_dir / "libncclsim-host.so")}
    res, _ = run_check(env, f"polling_{what}")
    assert res["first"] == cudaErrorNotReady and res["last"] == cudaSuccess, res
    assert res["wall_s"] >= 0.3, res
    assert res["not_ready_answers"] >= 5, res
    assert res["cpu_s"] < 0.25 * res["wall_s"], res


def test_stream_wait_event_orders_across_streams(cudart_env):
    res, _ = run_check(cudart_env, "wait_event")
    assert res["order_at_b_sync"] == ["A", "B"]
    # Without the wait the other stream does not hold back: the check can tell.
    assert res["control_order"] == ["D", "C"]


def test_mem_get_info_tracks_malloc_and_costs_no_rss(cudart_env):
    res, _ = run_check(cudart_env, "meminfo")
    total = res["total"]
    assert total == res["dev0_total"] > 0
    assert res["free0"] <= total
    assert GiB <= res["free0"] - res["free1"] <= GiB + (2 << 20)
    assert res["free2"] == res["free0"]
    assert res["dev0_free"] == res["dev0_total"], "device 0 charged for device 1's allocation"
    rss0, rss1, rss2 = res["rss_kib"]
    assert rss1 - rss0 < 8 * 1024, f"an untouched 1 GiB cudaMalloc grew RSS by {rss1 - rss0} KiB"
    # ...and the memory is real: touching 16 MiB of it shows up.
    assert rss2 - rss1 >= 12 * 1024


def test_host_alloc_and_pointer_attributes(cudart_env):
    res, _ = run_check(cudart_env, "host_alloc")
    assert res["host_dev"] == res["host"] != 0
    assert res["dev_attrs"] == {"type": cudaMemoryTypeDevice, "device": 3, "devicePointer": res["dev"]}
    assert res["inner_attrs"] == {"type": cudaMemoryTypeDevice, "device": 3,
                                  "devicePointer": res["dev"] + 100}
    assert res["host_attrs"]["type"] == cudaMemoryTypeHost
    assert res["host_attrs"]["hostPointer"] == res["host"]
    assert res["plain_attrs"]["type"] == cudaMemoryTypeUnregistered


def test_peer_copy_and_stream_ordered_pool(cudart_env):
    res, _ = run_check(cudart_env, "peer_and_pool")
    assert res["can_access_peer"] == 1  # NVSwitch-connected H100s
    assert res["peer_round_trip"] is True
    assert res["pool_bytes"] is True
    assert res["pool_attrs"] == [cudaMemoryTypeDevice, 1]
    assert res["pool_charged"] >= 64 << 20


# --------------------------------------------------------------------------------------------------
# Bad input


def test_invalid_device_and_oversized_malloc(cudart_env):
    res, _ = run_check(cudart_env, "bad_input")
    assert res["count"] == 8
    assert res["set_device_count"] == cudaErrorInvalidDevice
    assert res["set_device_negative"] == cudaErrorInvalidDevice
    assert res["malloc_100gib"] == cudaErrorMemoryAllocation  # 100 GiB on an 80 GB H100
    assert res["malloc_after"] == cudaSuccess
    assert res["bus_id_count"] == cudaErrorInvalidDevice


@pytest.mark.parametrize("text, line, words", [
    ("[platform]\nhost_index = 0\n[gpu]\nmodel = h100\nbus_id = 0000:18:00.0\nbogus\n", 6, ["bogus"]),
    ("# comment\n[gpu]\nmodel = h999\nbus_id = 0000:18:00.0\n", 3, ["h999"]),
    ("[gpu]\nmodel = h100\nbus_id = 0000:18:00.0\n[gpu]\nmodel = h100\nbus_id = nonsense\n", 6,
     ["nonsense"]),
])
def test_malformed_platform_is_an_error_not_zero_devices(cudart_env, tmp_path, text, line, words):
    plat = tmp_path / "bad-platform.conf"
    plat.write_text(text)
    res, r = run_check(cudart_env, "count", plat)
    assert res["rc"] != cudaSuccess and res["rc_again"] != cudaSuccess, res
    err = r.stderr.splitlines()
    assert len(err) == 1, f"expected exactly one diagnostic line:\n{r.stderr}"
    assert f"{plat}:{line}:" in err[0]
    for w in words:
        assert w in err[0]


def test_missing_platform_file_is_an_error(cudart_env, tmp_path):
    plat = tmp_path / "does-not-exist.conf"
    res, r = run_check(cudart_env, "count", plat)
    assert res["rc"] != cudaSuccess
    err = r.stderr.splitlines()
    assert len(err) == 1 and str(plat) in err[0], r.stderr
