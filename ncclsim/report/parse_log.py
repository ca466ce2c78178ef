"""Parsers for single lines of an NCCL debug log, one small function per line kind.

NCCL's wording drifts between releases (2.21 through 2.32 are covered here), so
every parser matches the stable core of its line and ignores what follows.
Each returns None for a line that is not of its kind.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Callable, Optional

# `[time] host:pid:tid [dev] file.cc:123 (func) NCCL WARN msg` (2.2x+ warnings)
# or `host:pid:tid [dev] NCCL INFO msg`.
_PREFIX = re.compile(
    r"^(?:\[(?P<ts>[^\]]*)\]\s+)?"
    r"(?P<host>[^\s:\[\]]+):(?P<pid>\d+):(?P<tid>\d+)\s+\[(?P<dev>[^\]]*)\]\s+"
    r"(?:(?P<src>\S+:\d+)\s+(?:\((?P<func>[^)]*)\)\s+)?)?"
    r"NCCL\s+(?P<level>[A-Z]+)\b\s?(?P<body>.*)$")
_DEVICE = re.compile(r"-?\d+")


@dataclass(frozen=True)
class LogLine:
    host: str
    pid: int
    tid: int
    dev: Optional[int]
    level: str  # INFO, WARN, ATTN, ...
    body: str
    source: Optional[str] = None  # file.cc:line, on warnings
    timestamp: Optional[str] = None


def parse_line(line: str) -> Optional[LogLine]:
    m = _PREFIX.match(line.rstrip("\r\n"))
    if not m:
        return None
    dev = m["dev"].strip()
    return LogLine(host=m["host"], pid=int(m["pid"]), tid=int(m["tid"]),
                   dev=int(dev) if _DEVICE.fullmatch(dev) else None,
                   level=m["level"], body=m["body"].strip(), source=m["src"], timestamp=m["ts"])


def _int(text: Optional[str]) -> Optional[int]:
    return int(text) if text is not None else None


# --- identity ---------------------------------------------------------------

_VERSION = re.compile(r"^NCCL version (\S+)")


def parse_version(body: str) -> Optional[str]:
    m = _VERSION.match(body)
    return m[1] if m else None


_HOSTID = re.compile(r"^NCCL_HOSTID set (?:by environment )?to (\S+)")


def parse_hostid(body: str) -> Optional[str]:
    """The simulated host's identity: the real hostname is the same on every
    simulated host, NCCL_HOSTID is what NCCL tells hosts apart by."""
    m = _HOSTID.match(body)
    return m[1] if m else None


@dataclass(frozen=True)
class InitLine:
    """`ncclCommInitRank comm 0x.. rank r nranks n cudaDev d nvmlDev d busId b commId 0x.. - Init START|COMPLETE`."""
    comm: str
    rank: int
    nranks: int
    stage: str  # START or COMPLETE
    cuda_dev: Optional[int] = None
    nvml_dev: Optional[int] = None
    busid: Optional[str] = None
    comm_id: Optional[str] = None


_INIT = re.compile(r"\bcomm (0x[0-9a-fA-F]+|\(nil\)) rank (\d+) nranks (\d+)\b.*-\s*Init (START|COMPLETE)\s*$")


def _field(body: str, name: str, value: str = r"(\d+)") -> Optional[str]:
    m = re.search(rf"\b{name} {value}", body)
    return m[1] if m else None


def parse_init(body: str) -> Optional[InitLine]:
    if "Init " not in body:  # asked of every line: the search is unanchored
        return None
    m = _INIT.search(body)
    if not m:
        return None
    return InitLine(comm=m[1], rank=int(m[2]), nranks=int(m[3]), stage=m[4],
                    cuda_dev=_int(_field(body, "cudaDev")), nvml_dev=_int(_field(body, "nvmlDev")),
                    busid=busid_text(_field(body, "busId", r"([0-9a-fA-Fx]+)")),
                    comm_id=_field(body, "commId", r"(0x[0-9a-fA-F]+)"))


def busid_text(raw: Optional[str]) -> Optional[str]:
    """NCCL prints bus ids as the hex digits of `dddd:bb:dd.f` run together (0x18000)."""
    if raw is None:
        return None
    try:
        digits = f"{int(raw, 16):09x}"
    except ValueError:
        return raw
    return f"{digits[:-5].zfill(4)}:{digits[-5:-3]}:{digits[-3:-1]}.{digits[-1]}"


@dataclass(frozen=True)
class CommLine:
    """`comm 0x.. rank r nRanks n nNodes k localRanks l localRank i MNNVL m` (2.19+)."""
    comm: str
    rank: int
    nranks: int
    nnodes: Optional[int]
    local_ranks: Optional[int]
    local_rank: Optional[int]


_COMM = re.compile(r"^comm (0x[0-9a-fA-F]+) rank (\d+) nRanks (\d+)\b")


def parse_comm(body: str) -> Optional[CommLine]:
    m = _COMM.match(body)
    if not m:
        return None
    return CommLine(comm=m[1], rank=int(m[2]), nranks=int(m[3]), nnodes=_int(_field(body, "nNodes")),
                    local_ranks=_int(_field(body, "localRanks")), local_rank=_int(_field(body, "localRank")))


# --- rings and trees --------------------------------------------------------

@dataclass(frozen=True)
class RingOrder:
    """Rank 0's `Channel 00/02 :  0  7  6 ...`: the whole ring of one channel."""
    channel: int
    nchannels: int
    ranks: tuple[int, ...]


_RING_ORDER = re.compile(r"^Channel (\d+)/(\d+)\s*:((?:\s+\d+)+)\s*$")


def parse_ring_order(body: str) -> Optional[RingOrder]:
    m = _RING_ORDER.match(body)
    if not m:
        return None
    return RingOrder(int(m[1]), int(m[2]), tuple(int(r) for r in m[3].split()))


@dataclass(frozen=True)
class RingLink:
    """`Ring 00 : 9 -> 0 -> 7`: one rank's neighbours on one channel's ring."""
    channel: int
    prev: int
    rank: int
    next: int


_RING_LINK = re.compile(r"^Ring (\d+)\s*:\s*(-?\d+)\s*->\s*(\d+)\s*->\s*(-?\d+)\s*$")


def parse_ring_link(body: str) -> Optional[RingLink]:
    m = _RING_LINK.match(body)
    return RingLink(int(m[1]), int(m[2]), int(m[3]), int(m[4])) if m else None


@dataclass(frozen=True)
class TreeLink:
    channel: int
    rank: int
    up: int  # -1 at the root
    down: tuple[int, ...]  # children, -1 entries dropped


def _children(text: str) -> tuple[int, ...]:
    return tuple(c for c in (int(x) for x in text.split("/")) if c >= 0)


_TREES_ITEM = re.compile(r"\[(\d+)\]\s*(-?\d+(?:/-?\d+)*)->(\d+)->(-?\d+)")


def parse_trees(body: str) -> Optional[list[TreeLink]]:
    """`Trees [0] 1/8/-1->0->-1 [1] 1/-1/-1->0->8`: children -> rank -> parent per channel
    (None: no tree in the line)."""
    if not body.startswith("Trees"):
        return None
    return [TreeLink(int(c), int(r), int(up), _children(down))
            for c, down, r, up in _TREES_ITEM.findall(body)] or None


_TREE_LINE = re.compile(r"^Tree (\d+)\s*:\s*(-?\d+)\s*->\s*(\d+)\s*->\s*(-?\d+(?:/-?\d+)*)\s*$")


def parse_tree_line(body: str) -> Optional[TreeLink]:
    """`Tree 0 : -1 -> 0 -> 1/8/-1` (2.2x+): parent -> rank -> children."""
    m = _TREE_LINE.match(body)
    return TreeLink(int(m[1]), int(m[3]), int(m[2]), _children(m[4])) if m else None


# --- connections ------------------------------------------------------------

@dataclass(frozen=True)
class ConnLine:
    """`Channel 00/0 : 9[1] -> 0[0] [receive] via NET/Socket/0` and its variants."""
    channel: int
    conn_index: Optional[int]
    src: int
    dst: Optional[int]  # None for CollNet lines, which name one rank only
    via: str  # as logged: P2P/CUMEM/read, SHM/direct/direct, NET/IB/0(1)/GDRDMA ...
    side: Optional[str]  # send / receive when the line says which end logged it


# 2.21+: `Channel cc/i : a[d] -> b[d] [send] via ...`; older: `Channel cc : a[busid] -> ...`
# and `Ring cc : a -> b [send] via ...`.
_CONN = re.compile(
    r"^(?:Channel|Ring)\s+(\d+)(?:/(\d+))?\s*:\s*(\d+)(?:\[[^\]]*\])?\s*->\s*(\d+)(?:\[[^\]]*\])?"
    r"\s*(?:\[(send|receive)\])?\s*via\s+(.+?)\s*$")
_COLLNET_CONN = re.compile(r"^Coll(?:Net)?\s+(\d+)(?:/(\d+))?\s*:\s*(\d+)\s*\[(send|receive)\]\s*via\s+(.+?)\s*$")


def parse_connection(body: str) -> Optional[ConnLine]:
    m = _CONN.match(body)
    if m:
        return ConnLine(int(m[1]), _int(m[2]), int(m[3]), int(m[4]), m[6], m[5])
    m = _COLLNET_CONN.match(body)
    if m:
        return ConnLine(int(m[1]), _int(m[2]), int(m[3]), None, m[5], m[4])
    return None


@dataclass(frozen=True)
class Via:
    transport: str  # the kind, device numbers left out: NET/IB/GDRDMA, P2P/CUMEM/read
    net_dev: Optional[int] = None
    proxy_rank: Optional[int] = None  # PXN: another rank's NIC does the sending


_DEV_PART = re.compile(r"^(\d+)(?:\((\d+)\))?$")


def parse_via(via: str) -> Via:
    """Splits `NET/IB/0(1)/GDRDMA` into its kind and the device/proxy numbers,
    so connections are counted by kind and not per NIC."""
    kept: list[str] = []
    net_dev = proxy = None
    for part in via.split("/"):
        if "=" in part:  # settings such as 2.32's `flush=None` describe, not distinguish
            continue
        m = _DEV_PART.match(part)
        if m and net_dev is None and kept:
            net_dev, proxy = int(m[1]), _int(m[2])
        else:
            kept.append(part)
    return Via("/".join(kept), net_dev, proxy)


# --- channel counts, features, graphs ----------------------------------------

_CHANNEL_COUNT = re.compile(r"(\d+) (coll|collnet|nvls|p2p) channels(?! per)")


def parse_channel_counts(body: str) -> Optional[dict[str, int]]:
    """`24 coll channels, 24 collnet channels, 0 nvls channels, 32 p2p channels, ...`
    (the collnet and nvls parts appear from 2.17/2.19 on)."""
    if "coll channels" not in body:
        return None
    counts = {kind: int(n) for n, kind in _CHANNEL_COUNT.findall(body)}
    return counts or None


_COLLNET_DEVICES = re.compile(r"^(?:Rank \d+: (\d+) CollNet devices|Local CollNet device counts across ranks: min (\d+))")


def parse_collnet_devices(body: str) -> Optional[int]:
    m = _COLLNET_DEVICES.match(body)
    if not m:
        return None
    return int(m[1] if m[1] is not None else m[2])


_NVLS_SUPPORT = re.compile(r"^NVLS multicast support is (not )?available")


def parse_nvls_support(body: str) -> Optional[bool]:
    m = _NVLS_SUPPORT.match(body)
    return None if not m else m[1] is None


_NVLS_COMM = re.compile(r"^NVLS comm \S+ headRank (-?\d+) nHeads (\d+)")


def parse_nvls_comm(body: str) -> Optional[tuple[int, int]]:
    """`NVLS comm 0x.. headRank 0 nHeads 4 ...`: (this rank's head index or -1, heads)."""
    m = _NVLS_COMM.match(body)
    return None if not m else (int(m[1]), int(m[2]))


_NVLS_HEAD = re.compile(r"^NVLS Head\s+(\d+):((?:\s+-?\d+)+)\s*$")


def parse_nvls_head(body: str) -> Optional[tuple[int, tuple[int, ...]]]:
    """`NVLS Head  1:  2 10` (several hosts only): head 1 is rank 2 on the first
    host, rank 10 on the second."""
    m = _NVLS_HEAD.match(body)
    return None if not m else (int(m[1]), tuple(int(x) for x in m[2].split()))


@dataclass(frozen=True)
class GraphLine:
    """`Pattern 4, crossNic 0, nChannels 1, bw 1.2/1.2, type NVL/PHB, sameChannels 1`."""
    pattern: int
    crossnic: int
    nchannels: int
    speed_intra: float
    speed_inter: float
    type_intra: str
    type_inter: str
    same_channels: Optional[int]


_GRAPH = re.compile(r"^Pattern (\d+), crossNic (\d+), nChannels (\d+), (?:bw|speed) ([\d.]+)/([\d.]+), "
                    r"type (\w+)/(\w+)(?:, sameChannels (\d+))?")


def parse_graph_line(body: str) -> Optional[GraphLine]:
    m = _GRAPH.match(body)
    if not m:
        return None
    return GraphLine(int(m[1]), int(m[2]), int(m[3]), float(m[4]), float(m[5]), m[6], m[7], _int(m[8]))


# --- tuning -----------------------------------------------------------------

# NCCL's enum order, for releases that print numbers instead of names.
ALGORITHMS = ("TREE", "RING", "COLLNET_DIRECT", "COLLNET_CHAIN", "NVLS", "NVLS_TREE", "PAT")
PROTOCOLS = ("LL", "LL128", "SIMPLE")


def _named(value: str, names: tuple[str, ...]) -> str:
    if value.isdigit() and int(value) < len(names):
        return names[int(value)]
    return value.upper()


@dataclass(frozen=True)
class TuningLine:
    """`AllReduce: 8 Bytes -> Algo RING proto LL channel{Lo..Hi}={0..0}` (rank 0 only);
    some releases print `8 Bytes -> Algo 1 proto 0 time 5.2`, the collective only on the call line before."""
    collective: Optional[str]
    nbytes: int
    algorithm: str
    protocol: str
    channels: Optional[int]


_TUNING = re.compile(r"^(?:(\w+): )?(\d+) Bytes -> Algo (\w+) proto (\w+)"
                     r"(?:.*?channel\{Lo\.\.Hi\}=\{(\d+)\.\.(\d+)\})?(?:.*?nchannels (\d+))?")


def parse_tuning(body: str) -> Optional[TuningLine]:
    m = _TUNING.match(body)
    if not m:
        return None
    channels = int(m[6]) - int(m[5]) + 1 if m[5] is not None else _int(m[7])
    return TuningLine(m[1], int(m[2]), _named(m[3], ALGORITHMS), _named(m[4], PROTOCOLS), channels)


@dataclass(frozen=True)
class CallLine:
    """`AllReduce: opCount 0 sendbuff .. count 2 datatype 7 op 0 root 0 comm 0x..`: one API call."""
    collective: str
    count: int
    datatype: int
    comm: Optional[str]

    @property
    def nbytes(self) -> Optional[int]:
        size = DATATYPE_SIZES.get(self.datatype)
        return None if size is None else self.count * size


# ncclDataType_t: int8 uint8 int32 uint32 int64 uint64 half float double bfloat16 fp8e4m3 fp8e5m2
DATATYPE_SIZES = {0: 1, 1: 1, 2: 4, 3: 4, 4: 8, 5: 8, 6: 2, 7: 4, 8: 8, 9: 2, 10: 1, 11: 1}

_CALL = re.compile(r"^(\w+): opCount \w+ .*?\bcount (\d+) datatype (\d+)")


def parse_call(body: str) -> Optional[CallLine]:
    m = _CALL.match(body)
    if not m:
        return None
    return CallLine(m[1], int(m[2]), int(m[3]), _field(body, "comm", r"(0x[0-9a-fA-F]+)"))


_BEST = re.compile(r"^Best tuning, algorithm, (\w+), protocol, (\w+)")


def parse_best_tuning(body: str) -> Optional[tuple[str, str]]:
    """`Best tuning, algorithm, RING, protocol, LL` (2.2x+, every rank, after the call line)."""
    m = _BEST.match(body)
    return (_named(m[1], ALGORITHMS), _named(m[2], PROTOCOLS)) if m else None


# --- every parser, in the order a line is asked ------------------------------

Parser = Callable[[str], Any]  # a line's body -> what it read, or None
Kind = tuple[Parser, Any]  # a line's parser and what it read (parse_body)

# (the line's first words it can match, or None for any; the parser). A parser
# whose pattern is anchored is asked only of lines starting with its word, so a
# line costs a few tests rather than one per kind; the order decides ties.
_PARSERS: tuple[tuple[Optional[tuple[str, ...]], Parser], ...] = (
    (("NCCL",), parse_version),
    (("NCCL_HOSTID",), parse_hostid),
    (None, parse_init),
    (("comm",), parse_comm),
    (("Channel", "Ring", "Coll", "CollNet"), parse_connection),
    (("Channel",), parse_ring_order),
    (("Ring",), parse_ring_link),
    (("Trees",), parse_trees),
    (("Tree",), parse_tree_line),
    (None, parse_channel_counts),
    (("Rank", "Local"), parse_collnet_devices),
    (("NVLS",), parse_nvls_support),
    (("NVLS",), parse_nvls_comm),
    (("NVLS",), parse_nvls_head),
    (("Pattern",), parse_graph_line),
    (None, parse_tuning),  # `AllReduce: 8 Bytes ..` or `8 Bytes ..`
    (None, parse_call),
    (("Best",), parse_best_tuning),
)
_ANY_WORD = tuple(parser for words, parser in _PARSERS if words is None)
_BY_WORD = {word: tuple(parser for words, parser in _PARSERS if words is None or word in words)
            for word in {w for words, _ in _PARSERS for w in words or ()}}


def parse_body(body: str) -> Optional[Kind]:
    """The one kind a line's body is, as (its parser, what the parser read), or None.
    Every reader of a log asks this once per line and dispatches on the parser."""
    first = body.split(None, 1)
    for parser in _BY_WORD.get(first[0], _ANY_WORD) if first else _ANY_WORD:
        value = parser(body)
        if value is not None:
            return parser, value
    return None
