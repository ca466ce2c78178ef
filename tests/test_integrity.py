"""Unit tests of fake_cuda/driver/integrity.c (the runtime's integrity check).

integrity.c is compiled alone into a shared object with the system C compiler
and loaded through cffi. Expected values come from RFC 1319 (MD2) and
RFC 2104 (HMAC); the message layout is rebuilt here with
`struct` so that the C packing is checked independently.
"""

from __future__ import annotations

import os
import shlex
import shutil
import struct
import subprocess
from pathlib import Path

import pytest

cffi = pytest.importorskip("cffi")

ROOT = Path(__file__).resolve().parent.parent
SOURCE = ROOT / "fake_cuda" / "driver" / "integrity.c"

CDEF = """
void fc_md2(const uint8_t *msg, size_t len, uint8_t out[16]);
void fc_hmac_md2(const uint8_t key[16], const uint8_t *msg, size_t len, uint8_t out[16]);
void fc_integrity_key(uint8_t key[16]);
size_t fc_integrity_message(uint8_t *buf, size_t cap, uint32_t driver_version,
                            uint32_t runtime_version, uint32_t pid, uint32_t tid,
                            uintptr_t cudart_table, uintptr_t integrity_table,
                            uintptr_t check_fn, uint64_t unix_time, int ndev,
                            const uint8_t (*uuids)[16], const uint32_t *domain,
                            const uint32_t *bus, const uint32_t *device);
void fc_integrity_digest(uint32_t runtime_version, const uint8_t *msg, size_t len,
                         uint8_t out[16]);
"""

# The test vector of cuda-dark-api.md.
VECTOR = dict(
    driver_version=12020,
    runtime_version=0x2B4A,
    pid=0x4D08,
    tid=0x2B78,
    cudart_table=0x00007FF8C80717F0,
    integrity_table=0x00007FF8C825E4B0,
    check_fn=0x00007FF8C7DD0AD0,
    unix_time=0x64A365EE,
    devices=[(bytes.fromhex("6722cbcfc661f29274d6ed232a32131c"), 0, 4, 0)],
)
VECTOR_DIGEST = bytes.fromhex("7a7014f22846c3a784cdbf423331f1ea")
FIXED = bytes.fromhex("5c67cb031c184133e8d14c1faa83d38e")


@pytest.fixture(scope="module")
def lib(tmp_path_factory):
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    assert cc, "a C compiler (cc) is needed to build fake_cuda and this test"
    out = tmp_path_factory.mktemp("integrity") / "libintegrity.so"
    cmd = shlex.split(cc) + [
        "-std=gnu11", "-O2", "-fPIC", "-shared", "-Wall", "-Wextra", "-Werror",
        str(SOURCE), "-o", str(out),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    assert proc.returncode == 0, f"{' '.join(cmd)} failed:\n{proc.stderr}"
    ffi = cffi.FFI()
    ffi.cdef(CDEF)
    return ffi, ffi.dlopen(str(out))


def md2(lib, data: bytes) -> bytes:
    ffi, c = lib
    out = ffi.new("uint8_t[16]")
    c.fc_md2(data, len(data), out)
    return bytes(ffi.buffer(out))


def digest(lib, version: int, msg: bytes) -> bytes:
    ffi, c = lib
    out = ffi.new("uint8_t[16]")
    c.fc_integrity_digest(version, msg, len(msg), out)
    return bytes(ffi.buffer(out))


def key(lib) -> bytes:
    ffi, c = lib
    out = ffi.new("uint8_t[16]")
    c.fc_integrity_key(out)
    return bytes(ffi.buffer(out))


def message(lib, v=VECTOR, cap=None, **override) -> tuple[int, bytes]:
    ffi, c = lib
    v = {**v, **override}
    devs = v["devices"]
    n = len(devs)
    uuids = ffi.new("uint8_t[][16]", [list(d[0]) for d in devs] or 1)
    dom = ffi.new("uint32_t[]", [d[1] for d in devs] or 1)
    bus = ffi.new("uint32_t[]", [d[2] for d in devs] or 1)
    dev = ffi.new("uint32_t[]", [d[3] for d in devs] or 1)
    size = 4096 if cap is None else cap
    buf = ffi.new("uint8_t[]", max(size, 1))
    n_out = c.fc_integrity_message(
        buf, size, v["driver_version"], v["runtime_version"], v["pid"], v["tid"],
        v["cudart_table"], v["integrity_table"], v["check_fn"], v["unix_time"],
        n, uuids, dom, bus, dev)
    return n_out, bytes(ffi.buffer(buf, max(size, 1)))


def packed(v=VECTOR) -> bytes:
    """The message as cuda-dark-api.md describes it, built with struct."""
    out = struct.pack("<IIIIQQQQ", v["driver_version"], v["runtime_version"], v["pid"],
                      v["tid"], v["cudart_table"], v["integrity_table"], v["check_fn"],
                      v["unix_time"])
    for uuid, domain, bus, device in v["devices"]:
        out += struct.pack("<16sIII", uuid, domain, bus, device)
    return out


# RFC 1319, appendix A.5 test suite.
RFC1319 = [
    (b"", "8350e5a3e24c153df2275c9f80692773"),
    (b"a", "32ec01ec4a6dac72c0ab96fb34c0b5d1"),
    (b"abc", "da853b0d3f88d99b30283a69e6ded6bb"),
    (b"message digest", "ab4f496bfb2a530b219ff33031fe06b0"),
    (b"abcdefghijklmnopqrstuvwxyz", "4e8ddff3650292ab5a4108c3aa47940b"),
    (b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789",
     "da33def2a42df13975352846c30338cd"),
    (b"1234567890" * 8, "d5976f79d83d3a0dc9806c3c66f3efd8"),
]


@pytest.mark.parametrize("data,expected", RFC1319, ids=[str(len(d)) for d, _ in RFC1319])
def test_md2_rfc1319_vectors(lib, data, expected):
    assert md2(lib, data).hex() == expected


def test_md2_block_boundaries_are_consistent(lib):
    # Exactly one and two blocks: the padding adds a whole block of 16s.
    # These differ from each other and from their neighbours one byte away.
    seen = {md2(lib, b"x" * n) for n in (15, 16, 17, 31, 32, 33)}
    assert len(seen) == 6


def hmac_md2_reference(lib, k: bytes, msg: bytes) -> bytes:
    inner = md2(lib, bytes(b ^ 0x36 for b in k) + msg)
    return md2(lib, bytes(b ^ 0x5C for b in k) + inner)


def test_hmac_md2_matches_the_construction(lib):
    ffi, c = lib
    k = bytes(range(16))
    msg = b"ncclsim integrity"
    out = ffi.new("uint8_t[16]")
    c.fc_hmac_md2(k, msg, len(msg), out)
    assert bytes(ffi.buffer(out)) == hmac_md2_reference(lib, k, msg)
    assert bytes(ffi.buffer(out)) != md2(lib, msg)


def test_key_follows_the_documented_walk(lib):
    table = bytes.fromhex(
        "6bcf320fa449d3a833f8d08e124ea800eb942c8f3449def6bf299120c765f6ba"
        "785c6627a7b27392db221e20146f87ffa5c318016664a50e705152a7804bdfef")
    expected = bytearray(16)
    written = set()
    i, t = 13, 0x8B
    while True:
        p1 = table[i + 16] ^ table[i + 32] ^ table[i + 48]
        p2 = t ^ table[i] ^ table[i + 16]
        t = ~(p1 ^ t) & 0xFF
        expected[p2 >> 4] = p1
        written.add(p2 >> 4)
        i = p2 & 0xF
        if i == 13:
            break
    assert written == set(range(16)), "the walk should define every key byte"
    assert key(lib) == bytes(expected)


def test_message_layout(lib):
    n, buf = message(lib)
    assert n == 48 + 28
    assert buf[:n] == packed()


def test_message_with_several_devices(lib):
    devs = [(bytes([d] * 16), d, 0x18 + d, d % 2) for d in range(3)]
    v = {**VECTOR, "devices": devs}
    n, buf = message(lib, v)
    assert n == 48 + 3 * 28
    assert buf[:n] == packed(v)


def test_message_too_small_buffer_is_untouched(lib):
    n, buf = message(lib, cap=48 + 27)
    assert n == 48 + 28
    assert buf == bytes(48 + 27)


def test_integrity_test_vector(lib):
    n, buf = message(lib)
    assert digest(lib, VECTOR["runtime_version"], buf[:n]) == VECTOR_DIGEST


def test_integrity_digest_is_hmac_md2_of_packed_message(lib):
    msg = packed()
    assert digest(lib, VECTOR["runtime_version"], msg) == VECTOR_DIGEST
    assert hmac_md2_reference(lib, key(lib), msg) == VECTOR_DIGEST


def test_integrity_depends_on_every_field(lib):
    base = packed()
    for field, value in [("pid", 0x4D09), ("tid", 0x2B79), ("unix_time", 0x64A365EF),
                         ("devices", [(bytes(16), 0, 4, 0)])]:
        msg = packed({**VECTOR, field: value})
        assert msg != base
        assert digest(lib, VECTOR["runtime_version"], msg) != VECTOR_DIGEST, field


@pytest.mark.parametrize("version", [12040, 12090, 13000, 0, 10])
def test_versions_ending_in_0_answer_the_constant(lib, version):
    assert digest(lib, version, packed()) == FIXED
    assert digest(lib, version, b"") == FIXED


@pytest.mark.parametrize("version", [12041, 12091, 13001, 1])
def test_versions_ending_in_1_answer_the_constant_with_byte_7_set(lib, version):
    expected = bytearray(FIXED)
    expected[7] = 0x18
    out = digest(lib, version, packed())
    assert out == bytes(expected)
    assert out != FIXED


@pytest.mark.parametrize("version", [12042, 12092, 13002, 13009])
def test_other_versions_hash_the_message(lib, version):
    msg = packed({**VECTOR, "runtime_version": version})
    out = digest(lib, version, msg)
    assert out == hmac_md2_reference(lib, key(lib), msg)
    assert out[:7] != FIXED[:7]
