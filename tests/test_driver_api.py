"""The simulated driver (libcuda.so.1) called directly, as NCCL and the runtime do.

Each scenario runs tests/workloads/driver_checks.py in its own process (the
platform is loaded once per process) with LD_LIBRARY_PATH naming ncclsim's lib
directory; the script calls the driver through cffi and prints
`RESULT <json>`. Sharing scenarios run two such processes joined by a Unix
socket pair: one exports memory, the other imports it, and each checks the
other's bytes.
"""

from __future__ import annotations

import json
import random
import socket
import subprocess
import sys
from pathlib import Path
from typing import Optional

import pytest

ROOT = Path(__file__).resolve().parent.parent
CHECKS = ROOT / "tests" / "workloads" / "driver_checks.py"

MiB = 1 << 20
# cuda.h
CUDA_SUCCESS, CUDA_ERROR_OUT_OF_MEMORY, CUDA_ERROR_NOT_INITIALIZED = 0, 2, 3
CUDA_ERROR_INVALID_DEVICE, CUDA_ERROR_INVALID_CONTEXT, CUDA_ERROR_NOT_FOUND = 101, 201, 500
CUDA_ERROR_INVALID_VALUE, CUDA_ERROR_NOT_SUPPORTED = 1, 801
CU_GET_PROC_ADDRESS_SUCCESS, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND = 0, 1
CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT = 2
CU_MEM_ALLOCATION_TYPE_PINNED, CU_MEM_LOCATION_TYPE_DEVICE = 1, 1
CU_MEMORYTYPE_DEVICE = 2
CU_CTX_SCHED_BLOCKING_SYNC = 4


@pytest.fixture
def driver_env(clean_env: dict[str, str], lib_dir: Path) -> dict[str, str]:
    env = dict(clean_env)
    env.pop("LD_PRELOAD", None)
    env["LD_LIBRARY_PATH"] = str(lib_dir)
    env["NCCLSIM_LOG"] = "0"
    return env


def parse_result(check: str, r: subprocess.CompletedProcess) -> dict:
    assert r.returncode == 0, f"{check} failed ({r.returncode}):\n{r.stdout}\n{r.stderr}"
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("RESULT ")]
    assert len(lines) == 1, f"{check}: expected one RESULT line:\n{r.stdout}\n{r.stderr}"
    return json.loads(lines[0][len("RESULT "):])


def run_check(env: dict[str, str], check: str, *args: str, platform: Optional[Path] = None) -> dict:
    env = dict(env)
    if platform is not None:
        env["NCCLSIM_PLATFORM"] = str(platform)
    r = subprocess.run([sys.executable, str(CHECKS), check, *args], env=env, capture_output=True,
                       text=True, timeout=60)
    return parse_result(check, r)


def run_pair(env: dict[str, str], exporter: tuple[str, ...], importer: tuple[str, ...],
             ) -> tuple[dict, dict]:
    """Run two checks at once, each given its end of a Unix socket pair as first argument."""
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    procs = []
    try:
        for sock, (check, *args) in ((a, exporter), (b, importer)):
            procs.append(subprocess.Popen(
                [sys.executable, str(CHECKS), check, str(sock.fileno()), *args], env=env,
                pass_fds=[sock.fileno()], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                text=True))
        a.close()
        b.close()
        results = []
        for p, check in zip(procs, (exporter[0], importer[0])):
            try:
                stdout, stderr = p.communicate(timeout=60)
            except subprocess.TimeoutExpired:
                for q in procs:
                    q.kill()
                raise
            results.append(parse_result(check, subprocess.CompletedProcess(p.args, p.returncode,
                                                                          stdout, stderr)))
        return results[0], results[1]
    finally:
        a.close()
        b.close()
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()


# --------------------------------------------------------------------------------------------------
# Sharing memory between processes


def test_vmm_posix_fd_round_trip_across_processes(driver_env):
    seed = str(random.randrange(1 << 30))
    exp, imp = run_pair(driver_env, ("vmm_export", seed, "5"), ("vmm_import", seed, "2"))
    # B read exactly what A wrote, through its own mapping of the imported handle...
    assert imp["size"] == 4 * MiB
    assert imp["data_ok"] is True
    # ...the imported handle still names A's device...
    assert imp["prop"] == {"type": CU_MEM_ALLOCATION_TYPE_PINNED,
                           "location_type": CU_MEM_LOCATION_TYPE_DEVICE, "location_id": 5}
    assert imp["range"] == [0, 4 * MiB]
    # ...and A sees B's reply in its mapping, the rest as it left it.
    assert exp["done"] == "done"
    assert exp["reply_ok"] is True
    assert exp["rest_unchanged"] is True
    assert exp["granularity"] == 2 * MiB


def test_legacy_ipc_handle_across_processes(driver_env):
    seed = str(random.randrange(1 << 30))
    exp, imp = run_pair(driver_env, ("ipc_export", seed), ("ipc_import", seed))
    assert imp["data_ok"] is True
    assert imp["owner_device"] == 4  # the exporter allocated on device 4
    assert exp["done"] == "done" and exp["reply_ok"] is True


def test_multicast_object_shared_by_two_processes(driver_env):
    """What NCCL's NVLS setup does: one process creates a multicast object and
    passes its POSIX fd, each adds its device and binds memory (binding waits
    for the whole team), both map the object; then unbind and release."""
    a, b = run_pair(driver_env, ("mc_create", "3"), ("mc_join", "6"))
    assert a["attribute"] == 1  # the built-in platform: H100s on NVSwitches
    assert a["granularity"] == 2 * MiB
    assert a["odd_size"] == CUDA_ERROR_INVALID_VALUE  # not a multiple of the granularity
    assert a["third_device"] == CUDA_ERROR_INVALID_VALUE  # a team of two
    assert b["add_twice"] == CUDA_ERROR_INVALID_VALUE
    for side in (a, b):
        assert side["bind_again"] == CUDA_ERROR_INVALID_VALUE  # that range is bound
        assert side["unbind_twice"] == CUDA_ERROR_INVALID_VALUE


def test_no_multicast_without_it_in_the_platform(driver_env, tmp_path):
    plat = tmp_path / "p.conf"
    plat.write_text("[platform]\nmulticast = 0\n" + SMALL)
    res = run_check(driver_env, "mc_unsupported", platform=plat)
    assert res == {"attribute": 0, "create": CUDA_ERROR_NOT_SUPPORTED}


def test_vmm_map_only_inside_a_reservation(driver_env):
    res = run_check(driver_env, "vmm_map_outside_reservation")
    if not res["placed_at_hint"]:
        pytest.skip("cuMemAddressReserve did not honour the address hint; layout not testable")
    assert res["inside"] == CUDA_SUCCESS
    assert res["past_end"] != CUDA_SUCCESS, "mapped 2 MiB beyond the end of the reservation"
    assert res["hole"] != CUDA_SUCCESS, "mapped address space that was never reserved"
    assert res["live"] != CUDA_SUCCESS, "mapped over memory the process was using"
    assert res["live_intact"] is True, "cuMemMap replaced the process's own memory"


def test_ipc_open_of_own_handle(driver_env):
    res = run_check(driver_env, "ipc_same_process")
    assert res == {"content_same": True, "alloc_intact_after_close": True}


# --------------------------------------------------------------------------------------------------
# Pointer queries and capacity


def test_address_range_of_interior_pointer(driver_env):
    res = run_check(driver_env, "address_range")
    assert res["base"] == res["ptr"] == res["start"]
    assert res["requested"] <= res["size"] < res["requested"] + 2 * MiB
    assert res["attr_size"] == res["size"]
    assert res["memory_type"] == CU_MEMORYTYPE_DEVICE
    assert res["ordinal"] == 2
    assert res["unknown_rc"] == CUDA_ERROR_NOT_FOUND  # host stack memory
    assert res["after_free_rc"] == CUDA_ERROR_NOT_FOUND


SMALL = """\
[gpu]
model = h100
bus_id = 0000:18:00.0
memory = 1073741824
[gpu]
model = h100
bus_id = 0000:2a:00.0
"""


@pytest.mark.parametrize("configured", [False, True], ids=["default-h100", "1GiB-gpu"])
def test_allocations_beyond_capacity_fail(driver_env, tmp_path, configured):
    plat = None
    if configured:
        plat = tmp_path / "small.conf"
        plat.write_text(SMALL)
    res = run_check(driver_env, "capacity", platform=plat)
    if configured:
        assert res["total"] == 1 << 30
    assert res["second_rc"] == CUDA_ERROR_OUT_OF_MEMORY
    assert res["vmm_rc"] == CUDA_ERROR_OUT_OF_MEMORY
    assert res["retry_rc"] == CUDA_SUCCESS  # after freeing the first
    assert res["vmm_retry_rc"] == CUDA_SUCCESS
    assert res["free_end"] == res["total"]  # everything given back
    assert res["other_device_rc"] == CUDA_SUCCESS


# --------------------------------------------------------------------------------------------------
# Devices and contexts


def test_contexts_and_devices(driver_env):
    res = run_check(driver_env, "contexts")
    assert res["count_before_init"] == CUDA_ERROR_NOT_INITIALIZED
    assert res["count"] == 8
    assert res["driver_version"] == 13000
    # Primary context: flags settable while inactive, active while retained.
    assert res["state_initial"] == [0, 0]
    assert res["state_after_flags"] == [CU_CTX_SCHED_BLOCKING_SYNC, 0]
    assert res["state_retained"] == [CU_CTX_SCHED_BLOCKING_SYNC, 1]
    assert res["same_primary"] is True and res["distinct_devices"] is True
    assert res["state_one_release"] == [CU_CTX_SCHED_BLOCKING_SYNC, 1]
    assert res["state_released"] == [CU_CTX_SCHED_BLOCKING_SYNC, 0]
    assert res["release_unretained"] != CUDA_SUCCESS
    # The current-context stack.
    assert res["current_initial"] == "none"
    assert res["get_device_no_ctx"] == CUDA_ERROR_INVALID_CONTEXT
    assert res["after_push_c0"] == "c0" and res["after_push_c1"] == "c1"
    assert res["device_top"] == 1
    assert res["popped_first"] is True and res["after_pop"] == "c0"
    assert res["popped_second"] is True and res["after_pop_all"] == "none"
    assert res["pop_empty"] == CUDA_ERROR_INVALID_CONTEXT
    # Ordinals past the last device.
    for k in ("device_get_bad", "device_get_negative", "attribute_bad", "retain_bad", "name_bad"):
        assert res[k] == CUDA_ERROR_INVALID_DEVICE, k
    assert res["name_last"] == "NVIDIA H100 80GB HBM3"


def test_driver_version_and_count_from_platform(driver_env, tmp_path):
    plat = tmp_path / "p.conf"
    plat.write_text("[platform]\ndriver_version = 12040\n" + SMALL)
    res = run_check(driver_env, "contexts", platform=plat)
    assert res["driver_version"] == 12040
    assert res["count"] == 2
    assert res["device_get_bad"] == CUDA_ERROR_INVALID_DEVICE  # ordinal 2 of 2


def test_proc_address_of_unimplemented_and_too_old(driver_env):
    res = run_check(driver_env, "proc_address_unknown")
    # CUDA graphs are not simulated: found, as in every driver, and NOT_SUPPORTED when called.
    rc, status, fn = res["graph"]
    assert (rc, status) == (CUDA_SUCCESS, CU_GET_PROC_ADDRESS_SUCCESS) and fn != 0
    assert res["graph_call"] == CUDA_ERROR_NOT_SUPPORTED
    assert res["bogus"] == [CUDA_ERROR_NOT_FOUND, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND, 0]
    assert res["too_old"] == [CUDA_ERROR_NOT_FOUND, CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT, 0]
    rc, status, fn = res["ok"]
    assert (rc, status) == (CUDA_SUCCESS, CU_GET_PROC_ADDRESS_SUCCESS) and fn != 0


# --------------------------------------------------------------------------------------------------
# Occupancy of thread-block clusters (cuBLAS probes them when its handle is created)

CUDA_ERROR_INVALID_HANDLE, CUDA_ERROR_INVALID_CLUSTER_SIZE = 400, 912


def test_cluster_occupancy_from_the_gpcs_of_an_h100(driver_env):
    """132 SMs in 8 GPCs (2 of 18 SMs, 6 of 16); a cluster runs inside one GPC."""
    res = run_check(driver_env, "cluster_occupancy")
    ok = CUDA_SUCCESS
    # The largest cluster: 8 blocks (portable), 16 once the function allows non-portable sizes.
    assert res["potential_portable"] == [ok, 8]
    assert res["potential_non_portable"] == [ok, 16]
    # One block per SM (200 KiB of shared memory): clusters per GPC, summed.
    assert res["pairs"] == [ok, 66]
    assert res["eights"] == [ok, 2 + 2 + 6 * 2]
    assert res["sixteen"] == [ok, 8]
    # A shape is needed, at most the allowed size, none of its dimensions zero.
    assert res["no_shape"][0] == CUDA_ERROR_INVALID_CLUSTER_SIZE
    assert res["sixteen_portable"][0] == CUDA_ERROR_INVALID_CLUSTER_SIZE
    assert res["seventeen"][0] == CUDA_ERROR_INVALID_CLUSTER_SIZE
    assert res["empty_shape"][0] == CUDA_ERROR_INVALID_CLUSTER_SIZE
    # Nothing fits when a block needs more shared memory than an SM has.
    assert res["too_much_smem"] == [[ok, 0], [ok, 0]]
    # A function's required shape: the answer, and the only shape a configuration may give.
    assert res["required_potential"] == [ok, 2]
    assert res["required_active"] == [ok, 66]
    assert res["required_other_shape"][0] == CUDA_ERROR_INVALID_CLUSTER_SIZE
    # Launches accept what the queries accept, with grids that are whole clusters.
    assert res["launch_sixteen_portable"] == CUDA_ERROR_INVALID_CLUSTER_SIZE
    assert res["launch_sixteen"] == ok
    assert res["launch_grid_not_multiple"] == CUDA_ERROR_INVALID_CLUSTER_SIZE
    assert res["launch_required_odd_grid"] == CUDA_ERROR_INVALID_CLUSTER_SIZE
    assert res["launch_required"] == ok
    # Bad arguments, and no context to say which GPU.
    assert res["null_out"] == res["null_config"] == CUDA_ERROR_INVALID_VALUE
    assert res["bad_function"] == CUDA_ERROR_INVALID_HANDLE
    assert res["zero_block"] == [[CUDA_ERROR_INVALID_VALUE, -1]] * 2
    assert res["no_context"] == [[CUDA_ERROR_INVALID_CONTEXT, -1]] * 2


def test_no_clusters_before_hopper(driver_env, tmp_path):
    plat = tmp_path / "a100.conf"
    plat.write_text("[gpu]\nmodel = a100\nbus_id = 0000:18:00.0\n")
    res = run_check(driver_env, "cluster_unsupported", platform=plat)
    assert res["answers"] == [[CUDA_ERROR_NOT_SUPPORTED, -1]] * 2


# --------------------------------------------------------------------------------------------------
# Private export tables for tools: cuBLASLt keys its per-context state by the current context's id
# (TOOLS_TLS, TOOLS_CONTEXT) and plans clustered kernels with CLUSTER_PROTOTYPE; without them every
# cublasLtMatmulAlgoGetHeuristic failed with CUBLAS_STATUS_NOT_SUPPORTED.

def test_tools_tables_answer_the_current_context_its_device_and_id(driver_env):
    res = run_check(driver_env, "tools_tables")
    assert res["sizes"] == [3 * 8, 95 * 8, 17 * 8]  # slot 0: the table's size in bytes
    # TOOLS_TLS [2]: as cuCtxGetCurrent (NULL and success when none is current); [1]: as cuCtxSetCurrent.
    assert res["get_before_init"] == CUDA_ERROR_NOT_INITIALIZED
    assert res["get_none"] == [CUDA_SUCCESS, 0]
    assert res["get_null"] == CUDA_ERROR_INVALID_VALUE
    assert res["get_current"] == [CUDA_SUCCESS, True]
    assert res["set"] == CUDA_SUCCESS
    assert res["set_seen"] == [True, CUDA_SUCCESS, True]
    # TOOLS_CONTEXT [3]: the device ordinal; [4]: cuCtxGetId's id, different per context.
    assert res["device"] == [[CUDA_SUCCESS, 1], [CUDA_SUCCESS, 2]]
    assert res["id"] == [[CUDA_SUCCESS, True], [CUDA_SUCCESS, True]]
    assert res["ids_differ"] is True
    assert res["null_context"] == [CUDA_ERROR_INVALID_CONTEXT] * 2  # NULL is not "the current one"
    assert res["null_out"] == [CUDA_ERROR_INVALID_VALUE] * 2
    assert res["other_slot"] == CUDA_ERROR_NOT_SUPPORTED
    # CLUSTER_PROTOTYPE [4]: the GPC layout is not modelled (callers fall back); [8]: clusters on sm90.
    assert res["tpc_mapping"] == [CUDA_ERROR_NOT_SUPPORTED, 0, 0]
    assert res["cluster_launch"] == [CUDA_SUCCESS, 1]
    assert res["cluster_launch_bad"] == [CUDA_ERROR_INVALID_DEVICE, CUDA_ERROR_INVALID_VALUE]


def test_cluster_prototype_reports_no_cluster_launch_before_hopper(driver_env, tmp_path):
    plat = tmp_path / "a100.conf"
    plat.write_text("[gpu]\nmodel = a100\nbus_id = 0000:18:00.0\n")
    res = run_check(driver_env, "cluster_launch_unsupported", platform=plat)
    assert res["cluster_launch"] == [CUDA_SUCCESS, 0]


def test_unsupported_functions_are_exported_under_their_abi_symbols(driver_env):
    """cuBLASLt dlsyms cuTensorMapEncodeTiled, cuLinkCreate_v2, cuStreamBeginCapture_v2...
    and fails its initialisation when one is missing."""
    res = run_check(driver_env, "unsupported_exported")
    for symbol in ("cuTensorMapEncodeTiled", "cuLinkCreate", "cuLinkCreate_v2", "cuStreamBeginCapture_v2",
                   "cuTexRefSetAddress2D_v3", "cuMemFree"):
        assert res[symbol] == {"same_as_proc": True, "called": CUDA_ERROR_NOT_SUPPORTED}, symbol
    assert res["cuMemFree_v2"]["same_as_proc"] is True  # the simulated one, not a stub
    assert res["not_an_abi"] == 0


def test_each_process_publishes_the_gpus_it_uses(driver_env, tmp_path):
    """For NVML's process listings (nvidia-smi, gpustat): a file per process beside the
    platform file, a line per GPU it holds a context or memory on, gone at exit."""
    plat = tmp_path / "p.conf"
    plat.write_text(SMALL)
    res = run_check(driver_env, "processes_published", platform=plat)
    assert res == {"context": [["0000:2a:00.0", "0"]], "allocated": [["0000:2a:00.0", "1048576"]],
                   "freed": [["0000:2a:00.0", "0"]]}
    assert list((tmp_path / "processes").iterdir()) == []
