"""The NCCL net plugin libnccl-net-ncclsim.so (fake_cuda/net/).

1. Properties through every exported interface version, read with cffi
   declarations written here from NCCL's headers (not from the plugin's own
   header), so a layout slip on either side shows up as wrong values.
2. Two processes connect both ways and exchange 0 B, 1 B, 1 MiB and 64 MiB
   messages (tags matched, actual sizes reported); a closed peer is an error.
   From and into simulated GPU memory, the large messages go as references
   (the receiver copies from the sender's memory) with the same results.
   One thread's listen comms share a port; connections reach their own comm;
   with the host library preloaded, a thread asking an empty listen comm sleeps.
3. Unmodified NCCL (2.30.7 installed, 2.21.5 from the cache) loads the plugin
   and connects 2 simulated hosts x 2 GPUs through it under mpiexec.
4. CollNet (ncclCollNetPlugin_v8): no devices unless the platform's fabric
   reduces in the network; then three processes form a group and every one
   gets the group's reduction, the same bits everywhere, and the windows of
   its gathers and reduce-scatters.

This file is also the harness the subprocesses of 1, 2 and 4 run:
`python test_net_plugin.py props VERSION` / `peer VERSION a|b [device]` / `shared VERSION` /
`idle VERSION` / `passes VERSION` / `collnet RANK NRANKS`.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import select
import subprocess
import sys
import time
from pathlib import Path

PLUGIN = "libnccl-net-ncclsim.so"
VERSIONS = tuple(range(5, 13))  # every version the plugin exports
SIZES = (0, 1, 1 << 20, 64 << 20)
# Without payload (NCCLSIM_NO_PAYLOAD) the harness builds its sparse messages
# word by word: smaller, and the largest ends in a short word.
SPARSE_SIZES = (0, 1, 1 << 16, (1 << 20) + 5)

# ---- NCCL's plugin ABI (from NVIDIA/nccl ext-net/example/nccl/net_v*.h and
# plugins/net/example/nccl/net_v*.h). Vtables other than v5 and v12 are
# declared up to getProperties, all this file calls through them. ----

CDEF = """
typedef struct { char* name; char* pciPath; uint64_t guid; int ptrSupport; int speed; int port;
  float latency; int maxComms; int maxRecvs; } props_v6;
typedef struct { char* name; char* pciPath; uint64_t guid; int ptrSupport; int speed; int port;
  float latency; int maxComms; int maxRecvs; int netDeviceType; int netDeviceVersion; } props_v7;
typedef struct { char* name; char* pciPath; uint64_t guid; int ptrSupport; int regIsGlobal; int speed;
  int port; float latency; int maxComms; int maxRecvs; int netDeviceType; int netDeviceVersion; } props_v8;
typedef struct { char* name; char* pciPath; uint64_t guid; int ptrSupport; int regIsGlobal; int forceFlush;
  int speed; int port; float latency; int maxComms; int maxRecvs; int netDeviceType; int netDeviceVersion;
  struct { int ndevs; int devs[4]; } vProps; size_t maxP2pBytes; size_t maxCollBytes; } props_v9;
typedef props_v9 props_v10;
typedef struct { char* name; char* pciPath; uint64_t guid; int ptrSupport; int regIsGlobal; int forceFlush;
  int speed; int port; float latency; int maxComms; int maxRecvs; int netDeviceType; int netDeviceVersion;
  struct { int ndevs; int devs[4]; } vProps; size_t maxP2pBytes; size_t maxCollBytes;
  int maxMultiRequestSize; } props_v11;
typedef struct { char* name; char* pciPath; uint64_t guid; int ptrSupport; int regIsGlobal; int forceFlush;
  int speed; int port; float latency; int maxComms; int maxRecvs; int netDeviceType; int netDeviceVersion;
  struct { int ndevs; int devs[8]; } vProps; size_t maxP2pBytes; size_t maxCollBytes;
  int maxMultiRequestSize; int16_t railId; int16_t planeId; } props_v12;

typedef struct {
  const char* name;
  int (*init)(void* logger);
  int (*devices)(int* ndev);
  int (*getProperties)(int dev, props_v6* props);
  int (*listen)(int dev, void* handle, void** listenComm);
  int (*connect)(int dev, void* handle, void** sendComm);
  int (*accept)(void* listenComm, void** recvComm);
  int (*regMr)(void* comm, void* data, int size, int type, void** mhandle);
  int (*deregMr)(void* comm, void* mhandle);
  int (*isend)(void* sendComm, void* data, int size, int tag, void* mhandle, void** request);
  int (*irecv)(void* recvComm, int n, void** data, int* sizes, int* tags, void** mhandles, void** request);
  int (*iflush)(void* recvComm, int n, void** data, int* sizes, void** mhandles, void** request);
  int (*test)(void* request, int* done, int* sizes);
  int (*closeSend)(void* sendComm);
  int (*closeRecv)(void* recvComm);
  int (*closeListen)(void* listenComm);
} net_v5;
typedef struct { const char* name; int (*init)(void*); int (*devices)(int*);
  int (*getProperties)(int, props_v6*); } net_v6;
typedef struct { const char* name; int (*init)(void*); int (*devices)(int*);
  int (*getProperties)(int, props_v7*); } net_v7;
typedef struct { const char* name; int (*init)(void*); int (*devices)(int*);
  int (*getProperties)(int, props_v8*); } net_v8;
typedef struct { const char* name; int (*init)(void*); int (*devices)(int*);
  int (*getProperties)(int, props_v9*); } net_v9;
typedef struct { const char* name; int (*init)(void*, void*); int (*devices)(int*);
  int (*getProperties)(int, props_v10*); } net_v10;
typedef struct { int trafficClass; } comm_config;
typedef struct { const char* name; int (*init)(void**, uint64_t, comm_config*, void*, void*);
  int (*devices)(int*); int (*getProperties)(int, props_v11*); } net_v11;
typedef struct {
  const char* name;
  int (*init)(void** ctx, uint64_t commId, comm_config* config, void* logger, void* profiler);
  int (*devices)(int* ndev);
  int (*getProperties)(int dev, props_v12* props);
  int (*listen)(void* ctx, int dev, void* handle, void** listenComm);
  int (*connect)(void* ctx, int dev, void* handle, void** sendComm, void** sendDevComm);
  int (*accept)(void* listenComm, void** recvComm, void** recvDevComm);
  int (*regMr)(void* comm, void* data, size_t size, int type, void** mhandle);
  int (*regMrDmaBuf)(void* comm, void* data, size_t size, int type, uint64_t offset, int fd, void** mhandle);
  int (*deregMr)(void* comm, void* mhandle);
  int (*isend)(void* sendComm, void* data, size_t size, int tag, void* mhandle, void* phandle, void** request);
  int (*irecv)(void* recvComm, int n, void** data, size_t* sizes, int* tags, void** mhandles, void** phandles,
               void** request);
  int (*iflush)(void* recvComm, int n, void** data, int* sizes, void** mhandles, void** request);
  int (*test)(void* request, int* done, int* sizes);
  int (*closeSend)(void* sendComm);
  int (*closeRecv)(void* recvComm);
  int (*closeListen)(void* listenComm);
  void* getDeviceMr;
  void* irecvConsumed;
  void* makeVDevice;
  int (*finalize)(void* ctx);
  void* setNetAttr;
} net_v12;
typedef struct { void* mhandle; void* address; uint32_t size; } sge_v8;
typedef struct {
  const char* name;
  int (*init)(void* logFunction);
  int (*devices)(int* ndev);
  int (*getProperties)(int dev, props_v8* props);
  int (*listen)(int dev, void* handle, void** listenComm);
  int (*connect)(void* handles[], int nranks, int rank, void* listenComm, void** collComm);
  int (*reduceSupport)(int dataType, int redOp, int* supported);
  int (*regMr)(void* collComm, void* data, size_t size, int type, void** mhandle);
  void* regMrDmaBuf;
  int (*deregMr)(void* collComm, void* mhandle);
  int (*iallreduce)(void* collComm, void* sendData, void* recvData, int count, int dataType, int redOp,
                    void* sendMhandle, void* recvMhandle, void** request);
  int (*iallgather)(void* collComm, void* sendData, int nRecvParts, sge_v8* recvParts, size_t bytesPerRank,
                    size_t windowOffset, size_t windowBytes, void* sendMhandle, void** request);
  int (*ireducescatter)(void* collComm, int nSendParts, sge_v8* sendParts, void* recvData, size_t bytesPerRank,
                        size_t windowOffset, size_t windowBytes, int dataType, int redOp, void* recvMhandle,
                        void** request);
  int (*iflush)(void* collComm, void* data, int size, void* mhandle, void** request);
  int (*test)(void* request, int* done, int* size);
  int (*closeColl)(void* collComm);
  int (*closeListen)(void* listenComm);
} collnet_v8;
extern collnet_v8 ncclCollNetPlugin_v8;
""" + "".join(f"extern net_v{v} ncclNetPlugin_v{v};\n" for v in VERSIONS)

NCCL_PTR_HOST, NCCL_PTR_CUDA = 1, 2
NCCL_REMOTE_ERROR = 6


class Net:
    """One interface version of the plugin, with the version differences
    (context argument, int or size_t sizes) hidden."""

    def __init__(self, path: str, version: int) -> None:
        import cffi
        self.ffi = cffi.FFI()
        self.ffi.cdef(CDEF)
        self.lib = self.ffi.dlopen(path)
        self.version = version
        self.t = self.ffi.addressof(self.lib, f"ncclNetPlugin_v{version}")
        self.ctx = self.ffi.NULL

    def check(self, rc: int, what: str) -> None:
        if rc != 0:
            raise RuntimeError(f"{what} returned {rc}")

    def init(self) -> None:
        t, ffi = self.t, self.ffi
        if self.version >= 11:
            ctx = ffi.new("void**")
            self.check(t.init(ctx, 0x1234, ffi.new("comm_config*", [-1]), ffi.NULL, ffi.NULL), "init")
            self.ctx = ctx[0]
        elif self.version == 10:
            self.check(t.init(ffi.NULL, ffi.NULL), "init")
        else:
            self.check(t.init(ffi.NULL), "init")

    def devices(self) -> int:
        n = self.ffi.new("int*")
        self.check(self.t.devices(n), "devices")
        return n[0]

    def properties(self, dev: int) -> dict:
        p = self.ffi.new(f"props_v{6 if self.version == 5 else self.version}*")
        self.check(self.t.getProperties(dev, p), "getProperties")
        out = {}
        for name, _ in self.ffi.typeof(p[0]).fields:
            v = getattr(p, name)
            if name in ("name", "pciPath"):
                v = self.ffi.string(v).decode()
            elif name == "vProps":
                v = list(v.devs)[:v.ndevs]
            out[name] = v
        return out

    # -- connections (full vtables: v5 and v12) --
    def listen(self, dev: int):
        handle = self.ffi.new("char[128]")
        lc = self.ffi.new("void**")
        args = (self.ctx,) if self.version >= 11 else ()
        self.check(self.t.listen(*args, dev, handle, lc), "listen")
        return lc[0], handle

    def connect(self, dev: int, handle):
        sc = self.ffi.new("void**")
        if self.version >= 11:
            self.check(self.t.connect(self.ctx, dev, handle, sc, self.ffi.NULL), "connect")
        else:
            self.check(self.t.connect(dev, handle, sc), "connect")
        return sc[0] or None

    def accept(self, lcomm):
        rc = self.ffi.new("void**")
        extra = (self.ffi.NULL,) if self.version >= 7 else ()
        self.check(self.t.accept(lcomm, rc, *extra), "accept")
        return rc[0] or None

    def isend(self, comm, buf, size: int, tag: int):
        req = self.ffi.new("void**")
        extra = (self.ffi.NULL,) if self.version >= 10 else ()
        self.check(self.t.isend(comm, buf, size, tag, self.ffi.NULL, *extra, req), "isend")
        return req[0] or None

    def irecv(self, comm, buf, capacity: int, tag: int):
        rc, req = self.irecv_rc(comm, buf, capacity, tag)
        self.check(rc, "irecv")
        return req

    def irecv_rc(self, comm, buf, capacity: int, tag: int):
        req = self.ffi.new("void**")
        data = self.ffi.new("void*[1]", [buf])
        sizes = self.ffi.new("size_t[1]" if self.version >= 9 else "int[1]", [capacity])
        tags = self.ffi.new("int[1]", [tag])
        mh = self.ffi.new("void*[1]")
        extra = (self.ffi.new("void*[1]"),) if self.version >= 10 else ()
        rc = self.t.irecv(comm, 1, data, sizes, tags, mh, *extra, req)
        return rc, req[0] or None

    def test(self, req) -> tuple[int, bool, int]:
        done, size = self.ffi.new("int*"), self.ffi.new("int[8]")
        rc = self.t.test(req, done, size)
        return rc, bool(done[0]), size[0]


def pattern(seed: int, n: int) -> bytes:
    """Bytes that differ per message and per offset (4093 is prime)."""
    block = bytes((i * 131 + seed * 17 + 1) & 0xFF for i in range(4093))
    return (block * (n // len(block) + 1))[:n]


def sparse(data: bytes) -> bytes:
    """What a message without payload holds (NCCLSIM_NO_PAYLOAD): zeros but
    one 8-byte word in three (as LL128's flags; an odd tail stays)."""
    words = bytearray(data)
    for at in range(0, len(words) - len(words) % 8, 8):
        if at // 8 % 3:
            words[at:at + 8] = bytes(8)
    return bytes(words)


NO_PAYLOAD = os.environ.get("NCCLSIM_NO_PAYLOAD") == "1"
STALE = 0xAA  # what a receive buffer holds before the message
if NO_PAYLOAD:
    SIZES = SPARSE_SIZES


def message(seed: int, n: int) -> bytes:
    return sparse(pattern(seed, n)) if NO_PAYLOAD else pattern(seed, n)


def received(seed: int, n: int, room: int) -> bytes:
    """A receive buffer of `room` bytes after the message: without payload
    only its non-zero words were written, the rest is as it was."""
    data = message(seed, n)
    if not NO_PAYLOAD:
        return data + bytes(room - n)
    out = bytearray([STALE]) * room
    for at in range(0, n, 8):
        word = data[at:at + 8]  # the last one may be short
        if any(word):
            out[at:at + len(word)] = word
    return bytes(out)


def say(*words: object) -> None:
    print(*words, flush=True)


def harness_props(path: str, version: int) -> None:
    net = Net(path, version)
    net.init()
    say(json.dumps({"name": net.ffi.string(net.t.name).decode(), "ndev": net.devices(),
                    "devices": [net.properties(d) for d in range(net.devices())]}))


def connect_and_accept(net: "Net", dev: int, handle, lcomm, timeout: float = 60) -> tuple:
    """A send comm to `handle` and the receive comm `lcomm` accepts: both
    calls are non-blocking, so each is repeated until both are made."""
    send = recv = None
    deadline = time.monotonic() + timeout
    while send is None or recv is None:
        send = send or net.connect(dev, handle)
        recv = recv or net.accept(lcomm)
        if time.monotonic() > deadline:
            raise RuntimeError("connect/accept did not finish")
    return send, recv


class DeviceMemory:
    """Buffers in simulated GPU memory, from ncclsim's driver (loaded before
    the plugin looks for it, as NCCL's process has it)."""

    def __init__(self, plugin_path: str) -> None:
        import cffi
        self.ffi = cffi.FFI()
        self.ffi.cdef("int cuInit(unsigned); int cuDevicePrimaryCtxRetain(void**, int);"
                      "int cuCtxSetCurrent(void*); int cuMemAlloc_v2(unsigned long long*, size_t);")
        self.cuda = self.ffi.dlopen(str(Path(plugin_path).with_name("libcuda.so.1")))
        ctx = self.ffi.new("void**")
        for rc in (self.cuda.cuInit(0), self.cuda.cuDevicePrimaryCtxRetain(ctx, 0), self.cuda.cuCtxSetCurrent(ctx[0])):
            if rc:
                raise RuntimeError(f"driver set-up returned {rc}")

    def buffer(self, net: "Net", data: bytes):
        """A device buffer holding `data` (at least 1 byte), as a char* of net's."""
        ptr = self.ffi.new("unsigned long long*")
        if self.cuda.cuMemAlloc_v2(ptr, max(len(data), 1)):
            raise RuntimeError("cuMemAlloc failed")
        buf = net.ffi.cast("char*", ptr[0])  # simulated memory is mapped at its device address
        net.ffi.memmove(buf, data, len(data))
        return buf


def harness_peer(path: str, version: int, role: str, device: bool = False) -> None:
    """Connect to the other peer both ways, exchange SIZES (from and into
    device memory when `device`), then (a) detect that the peer closed its
    connection, or (b) close it."""
    memory = DeviceMemory(path) if device else None
    net = Net(path, version)
    net.init()
    me, dev = (0, 0) if role == "a" else (1, 1)
    lcomm, handle = net.listen(dev)
    say("HANDLE", bytes(net.ffi.buffer(handle)).hex())
    peer_handle = net.ffi.new("char[128]", bytes.fromhex(sys.stdin.readline().split()[1]))
    send, recv = connect_and_accept(net, dev, peer_handle, lcomm)
    say("CONNECTED")

    # Receives posted in reverse tag order, into buffers larger than the
    # messages: tags decide the match and the real size is reported.
    rbufs = {i: memory.buffer(net, bytes(n + 16)) if memory else net.ffi.new("char[]", n + 16)
             for i, n in enumerate(SIZES)}
    if NO_PAYLOAD:
        for i, buf in rbufs.items():
            net.ffi.memmove(buf, bytes([STALE]) * (SIZES[i] + 16), SIZES[i] + 16)
    pending = {}
    for i in reversed(range(len(SIZES))):
        req = net.irecv(recv, rbufs[i], SIZES[i] + 16, tag=i)
        assert req is not None
        pending[("recv", i)] = req
    sbufs = {i: memory.buffer(net, message(me, n)) if memory else net.ffi.from_buffer("char[]", message(me, n) or b"\0")
             for i, n in enumerate(SIZES)}
    for i, n in enumerate(SIZES):
        req = net.isend(send, sbufs[i], n, tag=i)
        assert req is not None
        pending[("send", i)] = req
    deadline = time.monotonic() + 120
    while pending:
        for key, req in list(pending.items()):
            rc, done, size = net.test(req)
            if rc:
                raise RuntimeError(f"test {key} returned {rc}")
            if done:
                del pending[key]
                kind, i = key
                if size != SIZES[i]:
                    raise RuntimeError(f"{kind} {i}: size {size}, expected {SIZES[i]}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"transfers did not finish: {sorted(pending)}")
    for i, n in enumerate(SIZES):
        if net.ffi.buffer(rbufs[i], n + 16)[:] != received(1 - me, n, n + 16):
            raise RuntimeError(f"message {i} ({n} bytes): wrong bytes")
    say("EXCHANGED", len(SIZES))

    if role == "b":
        net.check(net.t.closeSend(send), "closeSend")
        say("CLOSED")
        sys.stdin.readline()  # until the test lets us go
    else:
        sys.stdin.readline()  # the peer closed its send side
        buf = net.ffi.new("char[16]")
        rc, req = net.irecv_rc(recv, buf, 16, tag=0)  # may already see the close
        deadline = time.monotonic() + 30
        while req is not None and rc == 0 and time.monotonic() < deadline:
            rc, done, _ = net.test(req)
            if done:
                raise RuntimeError("received a message from a closed peer")
        say("PEER-CLOSED-ERROR", rc)
        net.t.closeSend(send)
    net.check(net.t.closeRecv(recv), "closeRecv")
    net.check(net.t.closeListen(lcomm), "closeListen")
    if version >= 11:
        net.check(net.t.finalize(net.ctx), "finalize")
    say("BYE")


def harness_shared(path: str, version: int) -> None:
    """Listen comms of one thread share a port: connections reach the comm
    whose handle they were made from, whatever the order, one with a wrong
    key is dropped, and the port closes with the last comm."""
    import socket
    import struct
    net = Net(path, version)
    net.init()
    comms = [net.listen(0) for _ in range(3)]
    # the handle: magic, key, then the listener's sockaddr_in (port and address in network order)
    ends = {(socket.inet_ntoa(bytes(net.ffi.buffer(h))[20:24]), struct.unpack_from("!H", net.ffi.buffer(h), 18)[0])
            for _, h in comms}
    say("PORTS", len(ends))
    (end,) = ends
    stranger = socket.create_connection(end)
    stranger.sendall(struct.pack("<QQ", 0x6e63636c73696d31, 12345))  # the magic, a key of no comm
    sends = {}
    deadline = time.monotonic() + 60
    while len(sends) < 3:  # connect to the last comm first
        for i in reversed(range(3)):
            sends[i] = sends.get(i) or net.connect(0, comms[i][1])
            if sends[i] is None:
                del sends[i]
        if time.monotonic() > deadline:
            raise RuntimeError("connect did not finish")
    bufs = {i: net.ffi.new("char[8]", bytes([i + 1]) * 8) for i in range(3)}
    reqs = [net.isend(sends[i], bufs[i], 8, tag=0) for i in range(3)]
    got = []
    for lcomm, _ in comms:  # accept in listen order
        recv = None
        while recv is None:
            recv = net.accept(lcomm)
            if time.monotonic() > deadline:
                raise RuntimeError("accept did not finish")
        rbuf = net.ffi.new("char[8]")
        req = net.irecv(recv, rbuf, 8, tag=0)
        while not net.test(req)[1]:
            pass
        got.append(bytes(net.ffi.buffer(rbuf))[0])
    for req in reqs:
        while not net.test(req)[1]:
            pass
    say("ROUTED", *got)
    stranger.settimeout(30)
    say("STRANGER", "closed" if stranger.recv(1) == b"" else "open")
    for lcomm, _ in comms:
        net.check(net.t.closeListen(lcomm), "closeListen")
    try:
        socket.create_connection(end, timeout=5).close()
        say("PORT", "open")
    except ConnectionRefusedError:
        say("PORT", "closed")


def harness_idle(path: str, version: int) -> None:
    """A thread asks an empty listen comm for its connection for a second, as
    NCCL's service thread does while its peers connect: with the host
    library preloaded it sleeps between asks as on empty accept()s (the
    plugin asks poll(), not accept(), and reports the sockets it found
    empty); then a connection made from another thread is accepted."""
    import threading
    net = Net(path, version)
    net.init()
    lcomm, handle = net.listen(0)
    asks, start, cpu = 0, time.monotonic(), time.thread_time()
    while time.monotonic() - start < 1.0:
        if net.accept(lcomm) is not None:
            raise RuntimeError("a connection nobody made")
        asks += 1
    say("IDLE", f"{(time.thread_time() - cpu) / (time.monotonic() - start):.2f}", asks)
    sent: list = []

    def connect() -> None:
        while not sent:
            comm = net.connect(0, handle)
            if comm is not None:
                sent.append(comm)

    threading.Thread(target=connect, daemon=True).start()
    deadline = time.monotonic() + 60
    while net.accept(lcomm) is None:
        if time.monotonic() > deadline:
            raise RuntimeError("accept did not finish")
    say("ACCEPTED")


def harness_passes(path: str, version: int) -> None:
    """One thread tests receives on two connections in turns (NCCL's proxy
    passes): a message sent after a pass's poll is read in the next pass,
    not in this one; it arrives whole; a thread testing one connection only
    still gets its message."""
    net = Net(path, version)
    net.init()
    deadline = time.monotonic() + 60

    def pair():
        lcomm, handle = net.listen(0)
        return connect_and_accept(net, 0, handle, lcomm)

    (send_a, recv_a), (send_b, recv_b) = pair(), pair()
    rbuf_a, rbuf_b = net.ffi.new("char[64]"), net.ffi.new("char[64]")
    req_a, req_b = net.irecv(recv_a, rbuf_a, 64, tag=1), net.irecv(recv_b, rbuf_b, 64, tag=1)
    for _ in range(3):  # passes over both, nothing sent
        assert not net.test(req_a)[1] and not net.test(req_b)[1]
    net.test(req_a)  # a new pass: its poll found nothing on b
    data = net.ffi.new("char[64]", bytes(range(64)))
    sreq = net.isend(send_b, data, 64, tag=1)
    time.sleep(0.2)  # the message is in b's socket
    in_this_pass = net.test(req_b)[1]
    net.test(req_a)  # the next pass: its poll sees b's message
    rc, in_next_pass, size = net.test(req_b)
    say("PASSES", int(in_this_pass), int(in_next_pass), size, int(bytes(net.ffi.buffer(rbuf_b)) == bytes(range(64))))
    while not net.test(sreq)[1]:
        pass
    # one connection only: every test is a pass of its own
    sreq = net.isend(send_a, data, 64, tag=1)
    tests = 0
    while not net.test(req_a)[1]:
        tests += 1
        if time.monotonic() > deadline:
            raise RuntimeError("the lone connection's message never came")
    say("ALONE", int(tests < 1000))
    while not net.test(sreq)[1]:
        pass


def harness_collnet(path: str, rank: int, nranks: int) -> None:
    """One member of a CollNet group: devices, reduce support, then (when
    offered) listen, connect to every member's handle, and AllReduce float32
    sums and int32 maxima and minima of COUNT elements; prints each result's
    bytes.
    Then AllGather and ReduceScatter windows (WINDOWS): prints the windows
    whose result differs from what the members' data make."""
    import cffi
    import hashlib
    import struct
    ffi = cffi.FFI()
    ffi.cdef(CDEF)
    t = ffi.addressof(ffi.dlopen(path), "ncclCollNetPlugin_v8")
    n = ffi.new("int*")
    if t.init(ffi.NULL) != 0 or t.devices(n) != 0:
        raise RuntimeError("init/devices failed")
    sup = ffi.new("int*")
    support = {}
    for name, (dtype, op) in {"f32_sum": (7, 0), "i32_prod": (2, 1), "f32_max": (7, 2), "i8_min": (0, 3),
                              "f32_avg": (7, 4), "f8e4m3_sum": (10, 0)}.items():
        t.reduceSupport(dtype, op, sup)
        support[name] = sup[0]
    say(json.dumps({"devices": n[0], "support": support}))
    if not n[0]:
        return
    lc, handle = ffi.new("void**"), ffi.new("char[128]")
    if t.listen(0, handle, lc) != 0:
        raise RuntimeError("listen failed")
    say("HANDLE", bytes(ffi.buffer(handle)).hex())
    handles = [ffi.new("char[128]", bytes.fromhex(sys.stdin.readline().split()[1])) for _ in range(nranks)]
    coll = ffi.new("void**")
    if t.connect(ffi.new("void*[]", handles), nranks, rank, lc[0], coll) != 0:
        raise RuntimeError("connect failed")
    say("CONNECTED")
    results = []
    for fmt, dtype, op, values in (("f", 7, 0, [rank * 0.25 + i * 1e-3 for i in range(COLLNET_COUNT)]),
                                   ("i", 2, 2, [collnet_int(rank, i) for i in range(COLLNET_COUNT)]),
                                   ("i", 2, 3, [collnet_int(rank, i) for i in range(COLLNET_COUNT)])):
        send = ffi.from_buffer("char[]", struct.pack(f"<{COLLNET_COUNT}{fmt}", *values))
        recv = ffi.new("char[]", 4 * COLLNET_COUNT)
        req, done = ffi.new("void**"), ffi.new("int*")
        if t.iallreduce(coll[0], send, recv, COLLNET_COUNT, dtype, op, ffi.NULL, ffi.NULL, req) != 0:
            raise RuntimeError("iallreduce failed")
        deadline = time.monotonic() + 60
        while not done[0]:
            if t.test(req[0], done, ffi.NULL) != 0 or time.monotonic() > deadline:
                raise RuntimeError("test failed or timed out")
        out = bytes(ffi.buffer(recv))
        results.append({"sha256": hashlib.sha256(out).hexdigest(), "head": out[:32].hex(), "last": out[-4:].hex()})
    say("RESULTS", json.dumps(results))
    say("WINDOWS", json.dumps(collnet_windows(ffi, t, coll[0], rank, nranks)))
    if t.closeColl(coll[0]) != 0 or t.closeListen(lc[0]) != 0:
        raise RuntimeError("close failed")


COLLNET_COUNT = 100_000  # 400 KB per member: more than a socket buffer holds


def collnet_int(rank: int, i: int) -> int:
    """Member rank's int32 element i: signs and order vary with i."""
    return (rank - 1) * (i % 7 - 3) * 1000 + i % 5
BYTES_PER_MEMBER = 300_000
# (offset, bytes) of the vector of every member's BYTES_PER_MEMBER: the whole
# vector, one spanning two members' parts, one inside the last member's part.
WINDOWS = [(0, 3 * BYTES_PER_MEMBER), (BYTES_PER_MEMBER - 2000, 150_000), (2 * BYTES_PER_MEMBER + 400, 5000)]


def collnet_windows(ffi, t, coll, rank: int, nranks: int) -> list[str]:
    """iallgather and ireducescatter of int32 data over WINDOWS: member m's
    part of the gathered vector holds m * 10^6 + index; for the reduction,
    member m's vector holds m + index. Returns what was wrong."""
    import struct
    n = nranks * BYTES_PER_MEMBER // 4
    gather_vec = b"".join(struct.pack("<i", (i * 4 // BYTES_PER_MEMBER) * 10**6 + i) for i in range(n))
    reduce_vec = [struct.pack(f"<{n}i", *(m + i for i in range(n))) for m in range(nranks)]
    wrong = []

    def wait(req) -> None:
        done, deadline = ffi.new("int*"), time.monotonic() + 60
        while not done[0]:
            if t.test(req[0], done, ffi.NULL) != 0 or time.monotonic() > deadline:
                raise RuntimeError("test failed or timed out")

    for off, size in WINDOWS:
        lo, hi = max(off, rank * BYTES_PER_MEMBER), min(off + size, (rank + 1) * BYTES_PER_MEMBER)
        mine = gather_vec[lo:hi] if hi > lo else b""
        recv, req = ffi.new("char[]", size), ffi.new("void**")
        part = ffi.new("sge_v8*", {"address": recv, "size": size})
        send = ffi.from_buffer("char[]", mine + b"\0")
        if t.iallgather(coll, send, 1, part, BYTES_PER_MEMBER, off, size, ffi.NULL, req) != 0:
            raise RuntimeError("iallgather failed")
        wait(req)
        if bytes(ffi.buffer(recv)) != gather_vec[off:off + size]:
            wrong.append(f"allgather {off}+{size}")
        out = ffi.new("char[]", max(hi - lo, 1))
        send = ffi.from_buffer("char[]", reduce_vec[rank][off:off + size])  # alive until the request completes
        part = ffi.new("sge_v8*", {"address": send, "size": size})
        if t.ireducescatter(coll, 1, part, out, BYTES_PER_MEMBER, off, size, 2, 0, ffi.NULL, req) != 0:
            raise RuntimeError("ireducescatter failed")
        wait(req)
        count = max(hi - lo, 0) // 4
        want = [sum(m + lo // 4 + i for m in range(nranks)) for i in range(count)]
        if list(struct.unpack(f"<{count}i", bytes(ffi.buffer(out))[:count * 4])) != want:
            wrong.append(f"reducescatter {off}+{size}")
    return wrong


if __name__ == "__main__":
    if sys.argv[1] == "props":
        harness_props(os.environ["NCCLSIM_NET_PLUGIN_PATH"], int(sys.argv[2]))
    elif sys.argv[1] == "shared":
        harness_shared(os.environ["NCCLSIM_NET_PLUGIN_PATH"], int(sys.argv[2]))
    elif sys.argv[1] == "idle":
        harness_idle(os.environ["NCCLSIM_NET_PLUGIN_PATH"], int(sys.argv[2]))
    elif sys.argv[1] == "passes":
        harness_passes(os.environ["NCCLSIM_NET_PLUGIN_PATH"], int(sys.argv[2]))
    elif sys.argv[1] == "collnet":
        harness_collnet(os.environ["NCCLSIM_NET_PLUGIN_PATH"], int(sys.argv[2]), int(sys.argv[3]))
    else:
        harness_peer(os.environ["NCCLSIM_NET_PLUGIN_PATH"], int(sys.argv[2]), sys.argv[3], sys.argv[4:] == ["device"])
    sys.exit(0)


# ---------------------------------------------------------------- the tests

import pytest  # noqa: E402  (the harness above runs without pytest)

from ncclsim.platform.config import (NicConfig, default_nic_guid, default_platform,  # noqa: E402
                                     write_platform)
from ncclsim.platform.pci import PciAddress  # noqa: E402

HARNESS = Path(__file__).resolve()
TWO_NICS = (("mlx5_0", 0x19, 400_000, 1, 0.0), ("eth7", 0x3b, 100_000, 2, 2.5))


def platform_with_nics(path: Path, host: int, gpus: int = 2, nics=TWO_NICS) -> Path:
    cfg = default_platform(host, gpus)
    domain = cfg.gpus[0].bus_id.domain
    write_platform(dataclasses.replace(cfg, nics=tuple(
        NicConfig(name=name, bus_id=PciAddress(domain, bus), speed_mbps=speed,
                  guid=default_nic_guid(host, i), port=port, latency_us=lat)
        for i, (name, bus, speed, port, lat) in enumerate(nics))), path)
    return path


@pytest.fixture(scope="module")
def plugin(lib_dir: Path) -> Path:
    p = lib_dir / PLUGIN
    assert p.exists(), f"{p} is missing: build with `python fake_cuda/build.py --out ncclsim/lib`"
    return p


@pytest.fixture
def harness_env(clean_env: dict[str, str], plugin: Path, tmp_path: Path) -> dict[str, str]:
    return {**clean_env, "NCCLSIM_NET_PLUGIN_PATH": str(plugin),
            "NCCLSIM_PLATFORM": str(platform_with_nics(tmp_path / "platform.conf", host=3))}


def test_exports_every_version_and_nothing_else(plugin: Path) -> None:
    out = subprocess.run(["nm", "-D", "--defined-only", str(plugin)], capture_output=True,
                         text=True, check=True).stdout
    names = {line.split()[-1] for line in out.splitlines() if line.split()[1:2] != ["A"]}
    names = {n for n in names if not n.startswith("_")}
    assert names == {f"ncclNetPlugin_v{v}" for v in VERSIONS} | {"ncclCollNetPlugin_v8"}


@pytest.mark.parametrize("version", VERSIONS)
def test_properties(version: int, harness_env: dict[str, str]) -> None:
    proc = subprocess.run([sys.executable, str(HARNESS), "props", str(version)], env=harness_env,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    info = json.loads(proc.stdout)
    assert info["name"] == "ncclsim" and info["ndev"] == 2
    for dev, (p, (name, bus, speed, port, lat)) in enumerate(zip(info["devices"], TWO_NICS)):
        assert p["name"] == name
        domain = default_platform(3, 2).gpus[0].bus_id.domain
        assert p["pciPath"] == f"/sys/devices/pci{domain:04x}:00/{domain:04x}:{bus:02x}:00.0"
        assert p["guid"] == default_nic_guid(3, dev)
        assert (p["speed"], p["port"], p["latency"]) == (speed, port, lat)
        assert p["ptrSupport"] == NCCL_PTR_HOST | NCCL_PTR_CUDA
        assert (p["maxComms"], p["maxRecvs"]) == (65536, 1)
        if version >= 7:
            assert (p["netDeviceType"], p["netDeviceVersion"]) == (0, 0)
        if version >= 8:
            assert p["regIsGlobal"] == 0
        if version >= 9:
            assert p["forceFlush"] == 0 and p["vProps"] == [dev]
            assert p["maxP2pBytes"] == p["maxCollBytes"] == 1 << 40
        if version >= 11:
            assert p["maxMultiRequestSize"] == 1
        if version >= 12:
            assert (p["railId"], p["planeId"]) == (-1, -1)


def read_line(proc: subprocess.Popen, timeout: float = 120) -> str:
    """One line of a harness's stdout, or fail (with its stderr) on timeout."""
    fd = proc.stdout.fileno()
    buf = b""
    end = time.monotonic() + timeout
    while not buf.endswith(b"\n"):
        left = end - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            proc.kill()
            pytest.fail(f"harness silent for {timeout} s; stderr: {proc.stderr.read().decode()[-3000:]}")
        chunk = os.read(fd, 1)
        if not chunk:
            proc.wait()
            pytest.fail(f"harness exited {proc.returncode}: {proc.stderr.read().decode()[-3000:]}")
        buf += chunk
    return buf.decode().strip()


def send_line(proc: subprocess.Popen, line: str) -> None:
    proc.stdin.write(line.encode() + b"\n")
    proc.stdin.flush()


@pytest.mark.parametrize("version, payload, memory", [
    pytest.param(5, "1", "host", marks=pytest.mark.e2e),  # int sizes
    (12, "1", "host"),  # size_t sizes and contexts
    pytest.param(12, "0", "host", marks=pytest.mark.e2e),  # without payload: the non-zero words travel
    (12, "1", "device"),  # simulated GPU memory: the large messages as references
    pytest.param(12, "0", "device", marks=pytest.mark.e2e)])  # without payload: the non-zero words travel still
def test_two_processes_exchange_messages(version: int, payload: str, memory: str,
                                         harness_env: dict[str, str]) -> None:
    env = {**harness_env, "NCCLSIM_NO_PAYLOAD": "0" if payload == "1" else "1",
           "NCCLSIM_LOG": "3"}  # debug: the lines of the comms' close
    peers = {role: subprocess.Popen([sys.executable, str(HARNESS), "peer", str(version), role, memory],
                                    env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, bufsize=0)
             for role in ("a", "b")}
    a, b = peers["a"], peers["b"]
    try:
        ha, hb = read_line(a), read_line(b)
        assert ha.startswith("HANDLE ") and hb.startswith("HANDLE ")
        send_line(a, hb)  # each connects to the other's listener
        send_line(b, ha)
        assert read_line(a) == read_line(b) == "CONNECTED"
        assert read_line(a) == read_line(b) == f"EXCHANGED {len(SIZES)}"
        assert read_line(b) == "CLOSED"
        send_line(a, "go")
        assert read_line(a, timeout=60) == f"PEER-CLOSED-ERROR {NCCL_REMOTE_ERROR}"
        send_line(b, "go")
        assert read_line(a) == read_line(b) == "BYE"
        logs = {}
        for role, p in peers.items():
            assert p.wait(timeout=30) == 0, p.stderr.read().decode()
            logs[role] = p.stderr.read().decode()
        # each closes a send and a receive comm that carried the four messages;
        # with the driver loaded the peers know they share the machine: large
        # messages travel as references and every byte through a Unix socket
        by_ref = 2 if memory == "device" and payload == "1" else 0  # 1 MiB and 64 MiB
        via = "a Unix socket" if memory == "device" else "TCP"
        for role, log in logs.items():
            closes = re.findall(r"close (send|recv) comm after (\d+) messages, (\d+) of them by reference, over (.*)",
                                log)
            assert sorted(closes) == [("recv", "4", str(by_ref), via), ("send", "4", str(by_ref), via)], \
                (role, log[-3000:])
    finally:
        for p in (a, b):
            if p.poll() is None:
                p.kill()
            p.wait()


@pytest.mark.parametrize("version", [5, 12])
def test_listen_comms_of_a_thread_share_one_port(version: int, harness_env: dict[str, str]) -> None:
    """A simulated cluster receives on more connections than the machine has
    ephemeral ports: each thread's listen comms on a device share one."""
    proc = subprocess.run([sys.executable, str(HARNESS), "shared", str(version)], env=harness_env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.split("\n")[:4] == ["PORTS 1", "ROUTED 1 2 3", "STRANGER closed", "PORT closed"]


@pytest.mark.e2e  # two seconds of asking
def test_an_empty_listen_comm_sleeps_its_asker(harness_env: dict[str, str], lib_dir: Path) -> None:
    """NCCL's service thread asks for a connection in a loop until it comes;
    the host library makes an asker that finds nothing sleep rather than
    spin, though the plugin asks poll() rather than accept() (an empty
    accept() makes and frees a socket in the kernel). Without the preload
    the same loop spins: it asks ten times as often at least."""
    from ncclsim.platform.env import HOST_PRELOAD
    runs = {}
    for preload in (True, False):
        env = {**harness_env, "LD_PRELOAD": str(lib_dir / HOST_PRELOAD)} if preload else harness_env
        proc = subprocess.run([sys.executable, str(HARNESS), "idle", "12"], env=env,
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        idle, accepted = proc.stdout.split("\n")[:2]
        assert accepted == "ACCEPTED", proc.stdout
        _, share, asks = idle.split()
        runs[preload] = (float(share), int(asks))
    assert runs[True][0] < 0.3, runs  # yields, then sleeps of 1 to 32 ms
    assert runs[True][1] < runs[False][1] / 10, runs


def test_a_pass_reads_only_connections_its_poll_found_data_on(harness_env: dict[str, str]) -> None:
    """NCCL's proxy tests every pending receive once per pass; a read that
    finds nothing is a system call all the same. The plugin polls a
    thread's receive connections once per pass and reads only those with
    data (fake_cuda/net/net_ready.h): a message that arrives after the poll
    is read in the next pass, whole."""
    proc = subprocess.run([sys.executable, str(HARNESS), "passes", "12"], env=harness_env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.split("\n")[:2] == ["PASSES 0 1 64 1", "ALONE 1"], proc.stdout


E2E_NICS = (("mlx5_0", 0x19, 400_000, 1, 0.0), ("mlx5_1", 0x2b, 400_000, 1, 0.0))  # GPU bus + 1


def topology_xml(host: int) -> str:
    """Each NIC under the PCI switch of one GPU, as on an HGX board: the
    placement that gives GPU Direct RDMA."""
    cfg = default_platform(host, 2)
    switches = []
    for gpu, (name, bus, speed, port, _) in zip(cfg.gpus, E2E_NICS):
        d = gpu.bus_id.domain
        link = 'link_speed="32.0 GT/s PCIe" link_width="16"'
        switches.append(
            f'<pci busid="{d:04x}:{gpu.bus_id.bus - 1:02x}:00.0" class="0x060400" vendor="0x1000" '
            f'device="0xc030" subsystem_vendor="0x1000" subsystem_device="0xa064" {link}>'
            f'<pci busid="{gpu.bus_id}" class="0x030200" vendor="0x10de" device="0x2330" '
            f'subsystem_vendor="0x10de" subsystem_device="0x16c1" {link}/>'
            f'<pci busid="{PciAddress(d, bus)}" class="0x020000" vendor="0x15b3" device="0x1021" '
            f'subsystem_vendor="0x15b3" subsystem_device="0x0023" {link}><nic>'
            f'<net name="{name}" dev="{len(switches)}" speed="{speed}" port="{port}" latency="0" '
            f'guid="{default_nic_guid(host, len(switches)):#x}" maxconn="65536" gdr="1"/></nic></pci></pci>')
    return ('<system version="1"><cpu numaid="0" affinity="ffffffff" arch="x86_64" '
            'vendor="GenuineIntel" familyid="6" modelid="143">' + "".join(switches) + "</cpu></system>")


def run_two_hosts(build, plugin: Path, mpiexec: Path, env: dict[str, str], tmp_path: Path,
                  topology: bool) -> tuple[str, str]:
    """2 hosts x 2 GPUs, one process per GPU, init and destroy (cross-host
    collectives need device emulation). Returns (probe stdout, NCCL logs)."""
    import ncclsim
    from ncclsim.paths import cudart_lib_dir

    env = {**env, "NCCL_NET_PLUGIN": str(plugin), "NCCL_NET": "ncclsim",
           "NCCL_SOCKET_IFNAME": "lo", "NCCL_RUNTIME_CONNECT": "0", "NCCL_DEBUG": "INFO",
           "NCCL_DEBUG_FILE": str(tmp_path / "nccl.%h.%p.log"),
           "LD_LIBRARY_PATH": ":".join(map(str, (plugin.parent, build.lib_dir, cudart_lib_dir()))),
           "PYTHONPATH": str(Path(ncclsim.__file__).resolve().parent.parent)}
    argv = [str(mpiexec)]
    for h in (0, 1):
        per_host = ["-env", "NCCL_HOSTID", f"ncclsim-h{h}", "-env", "NCCLSIM_PLATFORM",
                    str(platform_with_nics(tmp_path / f"p{h}.conf", host=h, nics=E2E_NICS))]
        if topology:
            (tmp_path / f"topo{h}.xml").write_text(topology_xml(h))
            per_host += ["-env", "NCCL_TOPO_FILE", str(tmp_path / f"topo{h}.xml")]
        argv += ["-n", "2", *per_host, sys.executable, "-m", "ncclsim.probe"] + ([":"] if h == 0 else [])
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300)
    logs = sorted(tmp_path.glob("nccl.*.log"))
    text = "\n".join(log.read_text() for log in logs)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:] + text[-3000:]
    assert len(logs) == 4
    assert len(re.findall(r"NET/ncclsim : Using \[0\]mlx5_0:1/\S+ \[1\]mlx5_1:1/", text)) == 4
    assert len(re.findall(r"rank \d nRanks 4 nNodes 2 ", text)) == 4
    assert len(re.findall(r"Init COMPLETE", text)) == 4
    assert "destroyed 1 communicator(s)" in proc.stdout
    return proc.stdout, text


NET_CHANNEL = re.compile(r"(\d+)\[\d\] -> (\d+)\[\d\] \[(send|receive)\] via NET/ncclsim/(\d)(\S*)")


@pytest.mark.e2e
@pytest.mark.parametrize("nccl", ["installed", "2.21.5"])
def test_nccl_connects_two_hosts_through_the_plugin(nccl: str, nccl_build, plugin: Path,
                                                    mpiexec: Path, clean_env: dict[str, str],
                                                    tmp_path: Path) -> None:
    _, text = run_two_hosts(nccl_build(nccl), plugin, mpiexec, clean_env, tmp_path, topology=False)
    if nccl == "installed":  # 2.30 tries v12 first; 2.21 tries v8 first and logs nothing for it
        assert text.count("NET/Plugin: Loaded net plugin ncclsim (v12)") == 4
    else:
        assert text.count(f"NET/Plugin: Plugin name set by env to {plugin}") >= 4
    # Every rank has channels to the other host over the plugin, both ways.
    net = NET_CHANNEL.findall(text)
    assert {kind for _, _, kind, _, _ in net} == {"send", "receive"}
    assert {int(src) // 2 != int(dst) // 2 for src, dst, *_ in net} == {True}


@pytest.mark.e2e
def test_nccl_uses_gpu_direct_rdma_when_the_nic_sits_by_the_gpu(nccl_build, plugin: Path,
                                                                 mpiexec: Path,
                                                                 clean_env: dict[str, str],
                                                                 tmp_path: Path) -> None:
    _, text = run_two_hosts(nccl_build("installed"), plugin, mpiexec, clean_env, tmp_path,
                            topology=True)
    net = NET_CHANNEL.findall(text)
    assert net and all("/GDRDMA" in extra for *_, extra in net), net


def _collnet_env(harness_env: dict[str, str], tmp_path: Path, offered: bool) -> dict[str, str]:
    plat = Path(harness_env["NCCLSIM_PLATFORM"])
    if offered:
        text = plat.read_text().replace("collnet = 0", "collnet = 1")
        plat = tmp_path / "collnet.conf"
        plat.write_text(text)
    return {**harness_env, "NCCLSIM_PLATFORM": str(plat)}


def test_no_collnet_unless_the_fabric_has_it(harness_env: dict[str, str], tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, str(HARNESS), "collnet", "0", "1"],
                          env=_collnet_env(harness_env, tmp_path, False), capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["devices"] == 0


@pytest.mark.e2e
def test_collnet_group_reduces_across_three_processes(harness_env: dict[str, str], tmp_path: Path) -> None:
    """The switch reduces what SHARP does (sum, max, min; no product, average
    or fp8). Every member gets the group's sum (float32), maximum and minimum
    (int32), in the same bits, computed in member order as NCCL's operators
    do; AllGather and
    ReduceScatter deliver each window (whole, across two members' parts,
    inside one) as the members' data make it."""
    import struct
    env = _collnet_env(harness_env, tmp_path, True)
    procs = [subprocess.Popen([sys.executable, str(HARNESS), "collnet", str(r), "3"], env=env, stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, bufsize=0) for r in range(3)]
    try:
        infos = [json.loads(read_line(p)) for p in procs]
        support = {"f32_sum": 1, "i32_prod": 0, "f32_max": 1, "i8_min": 1, "f32_avg": 0, "f8e4m3_sum": 0}
        assert all(i == {"devices": 2, "support": support} for i in infos), infos
        handles = [read_line(p) for p in procs]
        assert all(h.startswith("HANDLE ") for h in handles)
        for p in procs:
            for h in handles:
                send_line(p, h)
        assert all(read_line(p) == "CONNECTED" for p in procs)
        results = [json.loads(read_line(p).split(" ", 1)[1]) for p in procs]
        assert results[0] == results[1] == results[2]
        windows = [read_line(p) for p in procs]
        assert windows == ["WINDOWS []"] * 3, windows
        n = COLLNET_COUNT
        sums = struct.unpack("<8f", bytes.fromhex(results[0][0]["head"])) + \
            struct.unpack("<f", bytes.fromhex(results[0][0]["last"]))
        f32 = lambda x: struct.unpack("<f", struct.pack("<f", x))[0]  # noqa: E731
        want = [f32(sum(f32(r * 0.25 + i * 1e-3) for r in range(3))) for i in (*range(8), n - 1)]
        assert list(sums) == pytest.approx(want, rel=1e-6)
        for k, pick in ((1, max), (2, min)):
            got = struct.unpack("<8i", bytes.fromhex(results[0][k]["head"]))
            assert list(got) == [pick(collnet_int(r, i) for r in range(3)) for i in range(8)], pick
        for p in procs:
            assert p.wait(timeout=60) == 0, p.stderr.read().decode()[-2000:]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
