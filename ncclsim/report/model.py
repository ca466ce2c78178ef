"""The report of one simulated run: typed, and with one JSON form (`run.json`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

SCHEMA_VERSION = 1


@dataclass(frozen=True)
class RankInfo:
    rank: int
    host: Optional[str]  # NCCL_HOSTID when logged (simulated hosts share one hostname), else hostname
    hostname: str
    pid: int
    device: Optional[int]  # cudaDev
    log: str  # relative to the run directory
    init_complete: bool
    nvml_dev: Optional[int] = None
    busid: Optional[str] = None
    local_rank: Optional[int] = None
    exit_status: Optional[int] = None  # from an `exit` file beside the log, when the launcher wrote one
    nccl_version: Optional[str] = None  # the NCCL its process loaded, as logged

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {"rank": self.rank, "host": self.host, "hostname": self.hostname,
                               "pid": self.pid, "device": self.device, "nvml_dev": self.nvml_dev,
                               "busid": self.busid, "local_rank": self.local_rank, "log": self.log,
                               "init_complete": self.init_complete, "nccl_version": self.nccl_version}
        if self.exit_status is not None:
            doc["exit_status"] = self.exit_status
        return doc


@dataclass(frozen=True)
class TreeNode:
    up: Optional[int]  # None at the root
    down: tuple[int, ...]

    def to_json(self) -> dict[str, Any]:
        return {"up": self.up, "down": list(self.down)}


@dataclass(frozen=True)
class Connection:
    channel: int
    src: int
    dst: Optional[int]  # None for CollNet connections (rank to the switch)
    transport: str  # kind without device numbers: P2P/CUMEM, SHM/direct/direct, NET/IB/GDRDMA
    via: str  # as NCCL logged it
    conn_index: Optional[int] = None
    direction: Optional[str] = None  # send / receive / both: which end(s) logged it
    scope: Optional[str] = None  # intra_host / inter_host, None when a host is unknown

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {"channel": self.channel, "from": self.src, "to": self.dst,
                               "transport": self.transport, "via": self.via,
                               "conn_index": self.conn_index, "scope": self.scope}
        if self.direction is not None:
            doc["direction"] = self.direction
        return doc


@dataclass(frozen=True)
class Transports:
    counts: dict[str, int]
    intra_host: tuple[str, ...]
    inter_host: tuple[str, ...]
    unknown_scope: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {"counts": dict(self.counts), "intra_host": list(self.intra_host),
                "inter_host": list(self.inter_host), "unknown_scope": list(self.unknown_scope)}


@dataclass(frozen=True)
class Feature:
    """NVLS or CollNet: NCCL prints a channel count for both even when the
    feature is off, so `used` also needs devices/support and a searched graph."""
    channels: Optional[int]
    graph_channels: Optional[int]
    used: bool
    supported: Optional[bool] = None  # NVLS multicast support / CollNet devices on every rank
    # NVLS: head h -> its rank on each host (one host: the GPU that reduces share h)
    heads: tuple[tuple[int, ...], ...] = ()

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"channels": self.channels, "graph_channels": self.graph_channels,
                               "supported": self.supported, "used": self.used}
        if self.heads:
            out["heads"] = [list(h) for h in self.heads]
        return out


@dataclass(frozen=True)
class Pat:
    """PAT (AllGather and ReduceScatter): NCCL 2.23+ offers it when every host
    has one rank, and its tuning picks it from a size on."""
    available: Optional[bool]  # None: the logs do not tell
    used_by: tuple[str, ...]  # collectives NCCL ran with PAT
    why_not: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"available": self.available, "used_by": list(self.used_by), "why_not": self.why_not}


@dataclass(frozen=True)
class TuningEntry:
    collective: str
    nbytes: int
    algorithm: str
    protocol: str
    channels: Optional[int]
    calls: int = 1
    source: str = "tuning"  # "tuning": rank 0's `Bytes -> Algo` line; "best_tuning": a rank's `Best tuning`

    def to_json(self) -> dict[str, Any]:
        return {"collective": self.collective, "bytes": self.nbytes, "algorithm": self.algorithm,
                "protocol": self.protocol, "channels": self.channels, "calls": self.calls,
                "source": self.source}


@dataclass(frozen=True)
class Timing:
    """One collective at one size as the modelled timeline measured it
    (--clock model), in nccl-tests' terms: its size column and bandwidths."""
    collective: str
    nbytes: int  # nccl-tests' size (AllGather, ReduceScatter: the whole buffer, every rank's part)
    dtype: str
    algorithm: str
    protocol: str
    nranks: int
    time_us: float  # the median call, from its last rank's kernel start to its last rank's end
    algbw_gbps: float
    busbw_gbps: float
    samples: int  # kernels measured, all ranks together

    def to_json(self) -> dict[str, Any]:
        return {"collective": self.collective, "bytes": self.nbytes, "type": self.dtype,
                "algorithm": self.algorithm, "protocol": self.protocol, "nranks": self.nranks,
                "time_us": self.time_us, "algbw_GBps": self.algbw_gbps, "busbw_GBps": self.busbw_gbps,
                "samples": self.samples}


@dataclass(frozen=True)
class GraphChannel:
    gpus: tuple[int, ...]  # ranks in the order NCCL's search placed them
    nets: tuple[str, ...]  # NIC devices at the channel's ends

    def to_json(self) -> dict[str, Any]:
        return {"gpus": list(self.gpus), "nets": list(self.nets)}


@dataclass(frozen=True)
class Graph:
    kind: str  # ring, tree, collnet_chain, collnet_direct, nvls
    graph_id: Optional[int]
    pattern: int
    nchannels: int
    speed_intra: Optional[float]
    speed_inter: Optional[float]
    type_intra: Optional[str]
    type_inter: Optional[str]
    crossnic: Optional[int] = None
    same_channels: Optional[int] = None
    channels: tuple[GraphChannel, ...] = ()
    source: str = "graph_dump"  # or "log": rank 0's `Pattern ..` lines when no dump exists

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "id": self.graph_id, "pattern": self.pattern, "nchannels": self.nchannels,
                "speedintra": self.speed_intra, "speedinter": self.speed_inter,
                "typeintra": self.type_intra, "typeinter": self.type_inter, "crossnic": self.crossnic,
                "samechannels": self.same_channels, "channels": [c.to_json() for c in self.channels],
                "source": self.source}


@dataclass(frozen=True)
class Topology:
    """The parts of NCCL's topology dump (rank 0's host) a reader wants first."""
    file: str
    gpus: tuple[dict[str, Any], ...]
    nics: tuple[dict[str, Any], ...]
    nvlinks: int

    def to_json(self) -> dict[str, Any]:
        return {"file": self.file, "gpus": list(self.gpus), "nics": list(self.nics), "nvlinks": self.nvlinks}


@dataclass(frozen=True)
class ErrorEntry:
    rank: Optional[int]  # None when the line came before the process named its rank and none followed
    log: str
    message: str
    level: str = "WARN"
    source: Optional[str] = None  # file.cc:line in NCCL
    line: Optional[int] = None  # line number in the log

    def to_json(self) -> dict[str, Any]:
        return {"rank": self.rank, "log": self.log, "line": self.line, "level": self.level,
                "source": self.source, "message": self.message}


@dataclass(frozen=True)
class Check:
    """A consistency check of what the logs say (ring closes, trees agree...)."""
    name: str
    ok: bool
    detail: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "ok": self.ok, "detail": self.detail}


@dataclass(frozen=True)
class NicPath:
    """A NIC of a GPU's host and the best path to it from the GPU (widest, then shortest)."""
    nic: str  # node id of the topology graph: h<i>/nic<dev>
    path_gbps: Optional[float]  # the path's bottleneck, GB/s one direction; None: unknown
    hops: Optional[int]  # links along the path; None when the NIC is not in the topology

    def to_json(self) -> dict[str, Any]:
        return {"nic": self.nic, "path_gbps": self.path_gbps, "hops": self.hops}


@dataclass(frozen=True)
class NicUse(NicPath):
    """A NIC a rank's inter-host connections leave by (NCCL's `via NET/<net>/<dev>`)."""
    channels: tuple[int, ...] = ()
    nearest: bool = False  # as near as the GPU's nearest NIC (as wide, no CPU crossed unless it does)

    def to_json(self) -> dict[str, Any]:
        return {**super().to_json(), "channels": list(self.channels), "nearest": self.nearest}


@dataclass(frozen=True)
class RankNics:
    rank: int
    gpu: str  # node id of the topology graph: h<i>/gpu<dev>
    nearest: Optional[NicPath]  # None: no NIC on the host
    used: tuple[NicUse, ...]  # empty: the rank sends nothing to another host itself

    def to_json(self) -> dict[str, Any]:
        return {"rank": self.rank, "gpu": self.gpu,
                "nearest": self.nearest.to_json() if self.nearest else None,
                "used": [u.to_json() for u in self.used]}


@dataclass(frozen=True)
class Nics:
    """The NICs ranks send to other hosts by, against their GPU's nearest NIC in
    the topology graph (ncclsim.topology); runs of more than one host only."""
    topology: tuple[str, ...]  # the file read for each host, relative to the run directory
    ranks: tuple[RankNics, ...]

    def to_json(self) -> dict[str, Any]:
        return {"topology": list(self.topology), "ranks": [r.to_json() for r in self.ranks]}


@dataclass(frozen=True)
class CommSummary:
    comm_id: str
    nranks: int
    nnodes: Optional[int]
    ranks_logged: int
    init_complete: int
    primary: bool

    def to_json(self) -> dict[str, Any]:
        return {"comm_id": self.comm_id, "nranks": self.nranks, "nnodes": self.nnodes,
                "ranks_logged": self.ranks_logged, "init_complete": self.init_complete,
                "primary": self.primary}


@dataclass(frozen=True)
class Report:
    """What NCCL did in one run, for its largest communicator (`communicators` lists all)."""
    run_dir: str
    nccl_version: Optional[str]
    hosts: tuple[str, ...]
    nranks: Optional[int]
    nnodes: Optional[int]
    local_ranks: Optional[int]
    channels: Optional[int]  # coll channels
    p2p_channels: Optional[int]
    rings: dict[int, tuple[int, ...]]
    trees: dict[int, dict[int, TreeNode]]
    connections: tuple[Connection, ...]
    transports: Transports
    nvls: Feature
    collnet: Feature
    pat: Pat
    tuning: tuple[TuningEntry, ...]
    graphs: tuple[Graph, ...]
    errors: tuple[ErrorEntry, ...]
    ranks: tuple[RankInfo, ...]
    communicators: tuple[CommSummary, ...]
    checks: tuple[Check, ...]
    logs: tuple[str, ...]
    topology: Optional[Topology] = None
    launch: Optional[dict[str, Any]] = None
    nics: Optional[Nics] = None
    notes: tuple[str, ...] = field(default=())  # what could not be read, and why
    clock: Optional[str] = None  # the ranks' clock, launch --clock: "wall" or "model"; None: not launched by us
    timings: tuple[Timing, ...] = ()  # modelled kernel times (--clock model)
    timeline: Optional[str] = None  # the merged trace written with the report (rundir.TIMELINE_JSON)

    def to_json(self) -> dict[str, Any]:
        return {
            "schema_version": SCHEMA_VERSION,
            "run_dir": self.run_dir,
            "nccl_version": self.nccl_version,
            "hosts": list(self.hosts),
            "nranks": self.nranks,
            "nnodes": self.nnodes,
            "local_ranks": self.local_ranks,
            "channels": self.channels,
            "p2p_channels": self.p2p_channels,
            "rings": {str(c): list(r) for c, r in sorted(self.rings.items())},
            "trees": {str(c): {str(r): n.to_json() for r, n in sorted(nodes.items())}
                      for c, nodes in sorted(self.trees.items())},
            "connections": [c.to_json() for c in self.connections],
            "transports": self.transports.to_json(),
            "nvls": self.nvls.to_json(),
            "collnet": self.collnet.to_json(),
            "pat": self.pat.to_json(),
            "tuning": [t.to_json() for t in self.tuning],
            "clock": self.clock,
            "timings": [t.to_json() for t in self.timings],
            "timeline": self.timeline,
            "graphs": [g.to_json() for g in self.graphs],
            "topology": self.topology.to_json() if self.topology else None,
            "nics": self.nics.to_json() if self.nics else None,
            "errors": [e.to_json() for e in self.errors],
            "ranks": [r.to_json() for r in self.ranks],
            "communicators": [c.to_json() for c in self.communicators],
            "checks": [c.to_json() for c in self.checks],
            "logs": list(self.logs),
            "launch": self.launch,
            "notes": list(self.notes),
        }
