"""The probe workload: every process drives `gpus_per_process` GPUs of its
host; together they form one NCCL communicator over all ranks.

Run alone it uses the GPUs of one process; under mpiexec, mpi4py carries the
unique id and each process picks its GPUs from its rank among the processes
of its (simulated) host.
"""

from __future__ import annotations

import ctypes
import os
import socket
import sys
import time
from functools import partial
from typing import Any, Callable, Mapping, NamedTuple, Optional

from ncclsim.meminfo import meminfo, room
from ncclsim.probe import check
from ncclsim.probe.bindings import (CUDA_MEMCPY_D2H, CUDA_MEMCPY_H2D, CUDA_STREAM_NON_BLOCKING,
                                    NCCL_FLOAT32, Libraries, ProbeError)

OPERATIONS = ("allreduce", "allgather", "broadcast", "reduce", "reducescatter", "sendrecv",
              "alltoall")


class ProbeOptions(NamedTuple):
    operations: tuple[str, ...] = ()  # empty: initialise and destroy only
    sizes: tuple[int, ...] = (8, 1 << 20)
    gpus_per_process: int = 0  # 0: every GPU the process sees when alone, else mpi_gpus_per_process
    iterations: int = 1
    warmup: int = 0  # untimed iterations before each operation and size (as nccl-tests' -w)
    check: bool = True  # compare every output with what NCCL must compute
    redop: str = "sum"  # the reductions' operator (check.REDUCTIONS)
    mpi_gpus_per_process: int = 1  # launch's --gpus-per-process, in its ranks
    # A size after the first two runs only while every machine has this many
    # bytes of memory and swap available (0: always): NCCL connects an
    # algorithm and grows its proxy's pools when a size first needs them,
    # which a large shape may not have room for after its init.
    min_free: int = 0


class OpResult(NamedTuple):
    operation: str
    size: int
    seconds: float
    # CPU time all processes of the run spent meanwhile (every thread: the
    # program's, NCCL's, the emulated GPUs'), always real time: a measure of
    # the simulation's work that the machine's idle time and other load
    # leave out.
    cpu_seconds: float = 0.0


class ProbeResult:
    """What rank 0 reports; the run fills in its operations and destroy time."""

    def __init__(self, nccl_version: str, nranks: int, processes: int, hosts: int, init_seconds: float) -> None:
        self.nccl_version, self.nranks, self.processes, self.hosts = nccl_version, nranks, processes, hosts
        self.init_seconds = init_seconds
        self.destroy_seconds = 0.0
        self.operations: list[OpResult] = []
        self.left_out: list[int] = []  # sizes --min-free left out

    def to_json(self) -> dict[str, Any]:
        return {"nccl_version": self.nccl_version, "nranks": self.nranks,
                "processes": self.processes, "hosts": self.hosts,
                "init_seconds": round(self.init_seconds, 4),
                "destroy_seconds": round(self.destroy_seconds, 4),
                "operations": [{"operation": o.operation, "size": o.size,
                                "seconds": round(o.seconds, 6), "cpu_seconds": round(o.cpu_seconds, 6)}
                               for o in self.operations],
                "left_out": self.left_out}


class World:
    """The processes of the run: mpi4py's world, or just this process."""

    def __init__(self) -> None:
        self.comm: Any = None
        if launched_by_mpi(os.environ):
            from mpi4py import MPI  # imported only under MPI: it initialises MPI
            self.comm = MPI.COMM_WORLD
        self.rank = self.comm.Get_rank() if self.comm else 0
        self.size = self.comm.Get_size() if self.comm else 1

    def bcast(self, value: Any) -> Any:
        return self.comm.bcast(value, root=0) if self.comm else value

    def allgather(self, value: Any) -> list[Any]:
        return self.comm.allgather(value) if self.comm else [value]

    def abort(self, status: int) -> None:
        """End this process at once, without MPI_Finalize: the others may be
        waiting for it inside NCCL (bootstrap, a collective) and MPI_Finalize
        would wait for them. mpiexec stops the rest of the job when a process
        exits with an error before finalising; the exit status stays this one's."""
        if self.comm and self.size > 1:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(status)


def launched_by_mpi(environ: Mapping[str, str]) -> bool:
    return any(k in environ for k in ("PMI_RANK", "PMI_SIZE", "PMIX_RANK", "OMPI_COMM_WORLD_RANK"))


def host_key() -> str:
    """What tells simulated hosts apart: NCCL_HOSTID, else the hostname."""
    return os.environ.get("NCCL_HOSTID") or socket.gethostname()


class Rank:
    """One GPU driven by this process: its communicator, stream and buffers."""

    def __init__(self, libs: Libraries, device: int, rank: int, nbytes: int) -> None:
        self.libs, self.device, self.rank = libs, device, rank
        self.comm, self.stream = ctypes.c_void_p(), ctypes.c_void_p()
        self.send, self.recv = ctypes.c_void_p(), ctypes.c_void_p()
        self.nbytes = nbytes
        self.use()
        libs.cuda_check(libs.cuda.cudaStreamCreateWithFlags(self.stream, CUDA_STREAM_NON_BLOCKING),
                        f"cudaStreamCreate on GPU {device}")
        if nbytes:
            for buf in (self.send, self.recv):
                libs.cuda_check(libs.cuda.cudaMalloc(buf, nbytes), f"cudaMalloc({nbytes}) on GPU {device}")

    def use(self) -> None:
        self.libs.cuda_check(self.libs.cuda.cudaSetDevice(self.device), f"cudaSetDevice({self.device})")

    def sync(self) -> None:
        self.use()
        self.libs.cuda_check(self.libs.cuda.cudaStreamSynchronize(self.stream),
                             f"cudaStreamSynchronize on GPU {self.device}")

    def fill_send(self, data: bytes) -> None:
        self.use()
        self.libs.cuda_check(self.libs.cuda.cudaMemcpy(self.send, data, len(data), CUDA_MEMCPY_H2D),
                             f"cudaMemcpy to GPU {self.device}")

    def clear_recv(self) -> None:
        self.use()
        self.libs.cuda_check(self.libs.cuda.cudaMemset(self.recv, 0, self.nbytes),
                             f"cudaMemset on GPU {self.device}")

    def copy_out(self, size: int) -> bytes:
        self.use()
        out = ctypes.create_string_buffer(size)
        self.libs.cuda_check(self.libs.cuda.cudaMemcpy(out, self.recv, size, CUDA_MEMCPY_D2H),
                             f"cudaMemcpy from GPU {self.device}")
        return out.raw

    def free(self) -> None:
        self.use()
        for buf in (self.send, self.recv):
            if buf.value:
                self.libs.cuda.cudaFree(buf)
        self.libs.cuda.cudaStreamDestroy(self.stream)


def _elements(size: int) -> int:
    return max(size // 4, 1)


def _check(op: str, r: Rank, size: int, nranks: int, redop: str) -> None:
    """Raise when rank r's output of `op` is not what NCCL must compute."""
    want = check.expected(op, r.rank, nranks, _elements(size), redop)
    if want is None:
        return
    problem = check.first_difference(r.copy_out(len(want)), want)
    if problem:
        raise ProbeError(f"{op} of {size} bytes on rank {r.rank}: wrong result: {problem}")


def _issuer(op: str, r: Rank, size: int, nranks: int, redop: str) -> Callable[[], None]:
    """What enqueues one operation of `size` bytes (nccl-tests' convention) on
    rank r, its arguments worked out once: the timed loop calls it back to
    back, and the probe's own time per call is part of what it measures."""
    nccl = r.libs.nccl
    count, red = _elements(size), check.REDUCTIONS[redop]
    c, s, snd, rcv = r.comm.value, r.stream.value, r.send.value or 0, r.recv.value or 0
    calls: list[Callable[[], int]]
    if op == "allreduce":
        calls = [partial(nccl.ncclAllReduce, snd, rcv, count, NCCL_FLOAT32, red, c, s)]
    elif op == "broadcast":
        calls = [partial(nccl.ncclBroadcast, snd, rcv, count, NCCL_FLOAT32, 0, c, s)]
    elif op == "reduce":
        calls = [partial(nccl.ncclReduce, snd, rcv, count, NCCL_FLOAT32, red, 0, c, s)]
    elif op == "allgather":
        calls = [partial(nccl.ncclAllGather, snd, rcv, max(count // nranks, 1), NCCL_FLOAT32, c, s)]
    elif op == "reducescatter":
        calls = [partial(nccl.ncclReduceScatter, snd, rcv, max(count // nranks, 1), NCCL_FLOAT32, red, c, s)]
    elif op == "sendrecv":
        calls = [partial(nccl.ncclSend, snd, count, NCCL_FLOAT32, (r.rank + 1) % nranks, c, s),
                 partial(nccl.ncclRecv, rcv, count, NCCL_FLOAT32, (r.rank - 1) % nranks, c, s)]
    elif op == "alltoall":
        per = max(count // nranks, 1)
        calls = []
        for peer in range(nranks):
            off = peer * per * 4
            calls += [partial(nccl.ncclSend, snd + off, per, NCCL_FLOAT32, peer, c, s),
                      partial(nccl.ncclRecv, rcv + off, per, NCCL_FLOAT32, peer, c, s)]
    else:
        raise ProbeError(f"unknown operation {op!r}: choose from {', '.join(OPERATIONS)}")

    def issue() -> None:
        for call in calls:
            result = call()
            if result != 0:
                r.libs.nccl_check(result, f"{op} of {size} bytes on rank {r.rank}")

    # several calls (sends and receives) go together, or each waits for the other
    return issue if len(calls) == 1 else partial(_grouped, r.libs, [(r, issue)], op)


def _grouped(libs: Libraries, calls: list[tuple[Rank, Callable[[], None]]], what: str) -> None:
    """Each rank's call in one NCCL group, its GPU made current for it."""
    libs.nccl_check(libs.nccl.ncclGroupStart(), f"ncclGroupStart ({what})")
    for r, call in calls:
        r.use()
        call()
    libs.nccl_check(libs.nccl.ncclGroupEnd(), f"ncclGroupEnd ({what})")


def _issue_all(libs: Libraries, issues: list[tuple[Rank, Callable[[], None]]], what: str) -> None:
    """One operation on every GPU of this process: grouped when there are
    several (as nccl-tests does); alone, its GPU is current throughout and
    it needs no group."""
    if len(issues) == 1:
        issues[0][1]()
    else:
        _grouped(libs, issues, what)


def _room_for(size: int, index: int, opts: ProbeOptions, world: World, result: ProbeResult,
              log: Callable[[str], None]) -> bool:
    """Whether the size at `index` of opts.sizes runs (--min-free); every
    process asks at the same point and gets the same answer."""
    if result.left_out:
        return size not in result.left_out
    if index < 2 or not opts.min_free:
        return True
    here = room(meminfo())  # None where /proc/meminfo does not tell: no limit
    least = min(world.allgather(opts.min_free if here is None else here))
    if least >= opts.min_free:
        return True
    result.left_out = list(opts.sizes[index:])
    log(f"sizes from {size} B left out: {least / 1e9:.1f} GB of memory and swap available, "
        f"less than --min-free {opts.min_free / 1e9:.1f} GB")
    return False


def _operations(libs: Libraries, opts: ProbeOptions, world: World, ranks: list[Rank], nranks: int,
                nbytes: int, result: ProbeResult, log: Callable[[str], None]) -> None:
    """Every operation at every size, timed and (unless --no-check) checked."""
    # No operation writes its input: one fill serves them all (and a fault
    # that wrote into it shows in every later check).
    if opts.check and opts.operations:
        for r in ranks:
            r.fill_send(check.pattern(r.rank, 0, nbytes // 4))
    for op in opts.operations:
        for index, size in enumerate(opts.sizes):
            if not _room_for(size, index, opts, world, result, log):
                continue
            if opts.check:
                for r in ranks:
                    r.clear_recv()
            issues = [(r, _issuer(op, r, size, nranks, opts.redop)) for r in ranks]
            for _ in range(opts.warmup):
                _issue_all(libs, issues, op)
            for r in ranks:
                r.sync()
            t, cpu = time.perf_counter(), time.process_time()
            for _ in range(opts.iterations):
                _issue_all(libs, issues, op)
            for r in ranks:
                r.sync()
            seconds, cpu = time.perf_counter() - t, time.process_time() - cpu
            result.operations.append(OpResult(op, size, seconds, sum(world.allgather(cpu))))
            if opts.check:
                for r in ranks:
                    _check(op, r, size, nranks, opts.redop)
            log(f"{op:<14} {size:>12} B  {'checked' if opts.check else 'done'}")


def run(libs: Libraries, opts: ProbeOptions, world: Optional[World] = None,
        log: Callable[[str], None] = lambda s: None) -> ProbeResult:
    world = world or World()
    keys = world.allgather(host_key())
    hosts = list(dict.fromkeys(keys))
    local = [i for i, k in enumerate(keys) if k == keys[world.rank]]
    local_rank = local.index(world.rank)

    visible = ctypes.c_int()
    libs.cuda_check(libs.cuda.cudaGetDeviceCount(visible), "cudaGetDeviceCount")
    gpp = opts.gpus_per_process or (visible.value if world.size == 1 else opts.mpi_gpus_per_process)
    first = local_rank * gpp
    if first + gpp > visible.value:
        raise ProbeError(f"process {world.rank} needs GPUs {first}..{first + gpp - 1} of its host, "
                         f"which has {visible.value}")

    nranks = world.size * gpp
    uid = libs.shared_unique_id(world.rank == 0, world.bcast)

    # Room for every operation's output (alltoall rounds its blocks up).
    nbytes = (_elements(max(opts.sizes)) + nranks) * 4 if opts.operations else 0
    ranks = [Rank(libs, first + i, world.rank * gpp + i, nbytes) for i in range(gpp)]
    t0 = time.perf_counter()
    def init(r: Rank) -> None:
        libs.nccl_check(libs.nccl.ncclCommInitRank(r.comm, nranks, uid, r.rank),
                        f"ncclCommInitRank (rank {r.rank})")
    _grouped(libs, [(r, partial(init, r)) for r in ranks], "init")
    result = ProbeResult(libs.nccl_version(), nranks, world.size, len(hosts), time.perf_counter() - t0)
    log(f"initialised {nranks} ranks on {len(hosts)} host(s) in {result.init_seconds:.2f} s")

    try:
        _operations(libs, opts, world, ranks, nranks, nbytes, result, log)
    except BaseException:
        # NCCL's threads must stop before the process unloads NCCL at exit
        # (they would run unmapped code); a failed run aborts its communicators.
        for r in ranks:
            r.use()
            libs.nccl.ncclCommAbort(r.comm)
        raise

    t = time.perf_counter()
    for r in ranks:
        r.use()
        libs.nccl_check(libs.nccl.ncclCommDestroy(r.comm), f"ncclCommDestroy (rank {r.rank})")
        r.free()
    result.destroy_seconds = time.perf_counter() - t
    log(f"destroyed {len(ranks)} communicator(s) in {result.destroy_seconds:.2f} s")
    return result
