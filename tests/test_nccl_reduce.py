"""Unit tests of fake_cuda/device/reduce.c (NCCL's reduction operators on the CPU).

reduce.c is compiled alone into a shared object and called through cffi.
The expected values are computed here independently, from what NCCL 2.30's
device code does (src/device/reduce_kernel.h) with the arguments that
src/enqueue.cc hostToDevRedOp builds:
  - integers wrap around; min/max/avg have their mathematical meaning
    (avg: the wrapped sum divided by nranks, rounded toward zero);
  - f32, f16, bf16: the exact result (Fraction) rounded once to nearest even;
    a NaN result is the GPU's canonical NaN;
  - fp8: the exact result rounded to half (the half instruction), then to fp8
    saturating to the largest finite value (__NV_SATFINITE), infinities too;
  - min/max on floats: a NaN loses to a number, two NaNs give the canonical
    NaN, -0 < +0 (CUDA's __hmin/__hmax, fminf/fmaxf).
"""

from __future__ import annotations

import functools
import math
import os
import random
import shutil
import struct
import subprocess
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Callable, Optional, Union

import cffi  # a dependency of ncclsim
import pytest

DEVICE = Path(__file__).resolve().parents[1] / "fake_cuda" / "device"

CDEF = """
typedef struct { int type; int redop; uint64_t arg; } fc_redop;
size_t fc_nccl_type_size(int type);
bool fc_redop_valid(const fc_redop *op);
void fc_reduce(const fc_redop *op, void *dst, const void *const *srcs, int nsrcs, size_t n,
               bool pre_first, bool post);
void fc_reduce_multimem(const fc_redop *op, void *dst, const void *const *srcs, int nsrcs, size_t n);
bool fc_redop_of_host(int type, int hostOp, fc_redop *out);
"""

# fake_cuda/device/layout.h numbering (ncclDataType_t, ncclDevRedOp_t)
TYPES = ["i8", "u8", "i32", "u32", "i64", "u64", "f16", "f32", "f64", "bf16", "f8e4m3", "f8e5m2"]
SUM, PROD, MINMAX, PREMULSUM, SUMPOSTDIV = range(5)
# how elements are packed here: integers by value, floats by their bits
STRUCT = dict(i8="b", u8="B", i32="i", u32="I", i64="q", u64="Q", f16="H", f32="I", f64="Q",
              bf16="H", f8e4m3="B", f8e5m2="B")
INT_TYPES = TYPES[:6]
HOST_OPS = ["sum", "prod", "min", "max", "avg", "premul"]  # premul: ncclRedOpCreatePreMulSum

Number = Union[Fraction, float]


# ---------------------------------------------------------------- the library


@dataclass
class Lib:
    ffi: cffi.FFI
    c: object

    def multimem(self, type_name: str, redop: int, arg: int, srcs: list[list[int]]) -> list[int]:
        """fc_reduce_multimem: what an NVLS multimem load-reduce returns."""
        ffi, ch = self.ffi, STRUCT[type_name]
        n = len(srcs[0])
        bufs = [ffi.from_buffer("char[]", struct.pack(f"<{n}{ch}", *s)) for s in srcs]
        dst = ffi.new("char[]", n * struct.calcsize(ch))
        op = ffi.new("fc_redop *", {"type": TYPES.index(type_name), "redop": redop, "arg": arg})
        self.c.fc_reduce_multimem(op, dst, ffi.new("void *[]", bufs), len(srcs), n)
        return list(struct.unpack(f"<{n}{ch}", ffi.buffer(dst)))

    def reduce(self, type_name: str, redop: int, arg: int, srcs: list[list[int]],
               pre: bool = False, post: bool = False, inplace: Optional[int] = None) -> list[int]:
        """fc_reduce over sources at odd addresses; dst another odd buffer or srcs[inplace]."""
        ffi, ch = self.ffi, STRUCT[type_name]
        n = len(srcs[0])
        nbytes = n * struct.calcsize(ch)
        keep, ptrs = [], []  # keep: the buffers live until the call returns
        for i, s in enumerate(srcs):
            buf = ffi.new("char[]", nbytes + 16)
            ffi.memmove(buf + 1 + i, struct.pack(f"<{n}{ch}", *s), nbytes)
            keep.append(buf)
            ptrs.append(buf + 1 + i)
        dbuf = ffi.new("char[]", nbytes + 16)
        ffi.memmove(dbuf, b"\xa5" * (nbytes + 16), nbytes + 16)
        dst = ptrs[inplace] if inplace is not None else dbuf + 3
        op = ffi.new("fc_redop *", {"type": TYPES.index(type_name), "redop": redop, "arg": arg})
        self.c.fc_reduce(op, dst, ffi.new("void *[]", ptrs), len(srcs), n, pre, post)
        if inplace is None:  # nothing written outside dst
            guard = bytes(ffi.buffer(dbuf, nbytes + 16))
            assert guard[:3] + guard[3 + nbytes:] == b"\xa5" * 16
        return list(struct.unpack(f"<{n}{ch}", ffi.buffer(dst, nbytes)))


@pytest.fixture(scope="module")
def lib(tmp_path_factory: pytest.TempPathFactory) -> Lib:
    cc = os.environ.get("CC") or shutil.which("gcc") or shutil.which("cc")
    assert cc, "a C compiler (gcc) is needed to build fake_cuda and this test"
    out = tmp_path_factory.mktemp("nccl_reduce") / "libnccl_reduce.so"
    cmd = [cc, "-std=gnu11", "-O2", "-fPIC", "-shared", "-Wall", "-Wextra", "-Werror",
           f"-I{DEVICE}", f"-I{DEVICE.parent / 'common'}", str(DEVICE / "reduce.c"), "-o", str(out), "-pthread"]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    assert proc.returncode == 0, f"{' '.join(cmd)} failed:\n{proc.stderr}"
    ffi = cffi.FFI()
    ffi.cdef(CDEF)
    return Lib(ffi, ffi.dlopen(str(out)))


# ---------------------------------------------------------------- float formats


def rne(num: int, den: int) -> int:
    """num/den (>= 0) rounded to the nearest integer, ties to even."""
    q, r = divmod(num, den)
    return q + (2 * r > den or (2 * r == den and q & 1))


@dataclass(frozen=True)
class Fmt:
    ebits: int
    mbits: int
    ieee: bool  # the top exponent holds inf and NaN; e4m3 has only NaN (all ones)
    canon: int  # the NaN an operation returns

    @functools.cached_property
    def bias(self) -> int:
        return (1 << (self.ebits - 1)) - 1

    @functools.cached_property
    def sign(self) -> int:
        return 1 << (self.ebits + self.mbits)

    @functools.cached_property
    def max_bits(self) -> int:
        top = (1 << self.ebits) - 1
        mant = (1 << self.mbits) - 1
        return ((top - 1) << self.mbits | mant) if self.ieee else (top << self.mbits | (mant - 1))

    @property
    def inf_bits(self) -> int:
        assert self.ieee
        return ((1 << self.ebits) - 1) << self.mbits

    @functools.lru_cache(maxsize=None)  # every-pair tests decode each fp8 value 512 times
    def decode(self, bits: int) -> float:
        """The value (exact: every format here fits in a double)."""
        s = -1.0 if bits & self.sign else 1.0
        e, m = (bits >> self.mbits) & ((1 << self.ebits) - 1), bits & ((1 << self.mbits) - 1)
        if e == (1 << self.ebits) - 1:
            if self.ieee:
                return s * math.inf if m == 0 else math.nan
            if m == (1 << self.mbits) - 1:
                return math.nan
        if e == 0:
            return s * math.ldexp(m, 1 - self.bias - self.mbits)
        return s * math.ldexp(m | 1 << self.mbits, e - self.bias - self.mbits)

    def encode(self, v: Number, satfinite: bool = False, zero_sign: Optional[float] = None) -> int:
        """v rounded to nearest even; overflow to inf, or to the largest finite
        value when satfinite; NaN -> canonical. zero_sign: the sign of an exact 0."""
        if isinstance(v, float) and math.isnan(v):
            return self.canon
        if isinstance(v, float) and math.isinf(v):
            return (self.sign if v < 0 else 0) | (self.max_bits if satfinite else self.inf_bits)
        if zero_sign is None:
            zero_sign = v if isinstance(v, float) else 1.0
        num, den = v.as_integer_ratio()
        neg = num < 0 or (num == 0 and math.copysign(1.0, zero_sign) < 0)
        sign, num = (self.sign if neg else 0), abs(num)
        if num == 0:
            return sign
        e = num.bit_length() - den.bit_length()  # floor(log2(v)) is e or e - 1
        if num << max(0, -e) < den << max(0, e):
            e -= 1
        q = max(e, 1 - self.bias) - self.mbits  # exponent of the unit in the last place
        n = rne(num << -q, den) if q <= 0 else rne(num, den << q)
        if n < 1 << self.mbits:  # subnormal (or zero)
            return sign | n
        if n == 1 << (self.mbits + 1):
            n, q = n >> 1, q + 1
        mag = (q + self.mbits + self.bias) << self.mbits | (n - (1 << self.mbits))
        if mag > self.max_bits:
            mag = self.max_bits if satfinite or not self.ieee else self.inf_bits
        return sign | mag


F16 = Fmt(5, 10, True, 0x7FFF)
BF16 = Fmt(8, 7, True, 0x7FFF)
F32 = Fmt(8, 23, True, 0x7FFFFFFF)
F64 = Fmt(11, 52, True, 0x7FFFFFFFFFFFFFFF)
E4M3 = Fmt(4, 3, False, 0x7F)
E5M2 = Fmt(5, 2, True, 0x7F)
FMT = dict(f16=F16, bf16=BF16, f32=F32, f64=F64, f8e4m3=E4M3, f8e5m2=E5M2)


def exact(op: str, a: float, b: float) -> Number:
    """a op b without rounding; IEEE's answer when an operand is inf or NaN."""
    r = a + b if op == "sum" else a * b
    if not (math.isfinite(a) and math.isfinite(b)) or r == 0:
        return r
    if op == "sum" and (r - a) == b and (r - (r - a)) == a:  # the double sum is exact
        return r
    if op == "prod" and sum(x.as_integer_ratio()[0].bit_length() for x in (a, b)) <= 53:
        return r  # significands short enough: exact (no format here under- or overflows a double)
    return Fraction(a) + Fraction(b) if op == "sum" else Fraction(a) * Fraction(b)


def arith(fmt: Fmt, op: str, x: int, y: int) -> int:
    """One IEEE operation in fmt (f16, bf16, f32): exact, rounded once."""
    a, b = fmt.decode(x), fmt.decode(y)
    # a 0 result carries the sign IEEE gives it, which the double operation has too
    return fmt.encode(exact(op, a, b), zero_sign=(a + b if op == "sum" else a * b))


def fp8_arith(fmt: Fmt, op: str, x: int, y: int) -> int:
    """__nv_fp8(__hadd/__hmul(__half(x), __half(y))): half operation, satfinite conversion."""
    a, b = fmt.decode(x), fmt.decode(y)
    h = F16.encode(exact(op, a, b), zero_sign=(a + b if op == "sum" else a * b))
    return _fp8_of_half(fmt, h)


@functools.lru_cache(maxsize=None)  # many pairs give the same half
def _fp8_of_half(fmt: Fmt, h: int) -> int:
    return fmt.encode(F16.decode(h), satfinite=True)


def fminmax(fmt: Fmt, is_min: bool, x: int, y: int) -> int:
    a, b = fmt.decode(x), fmt.decode(y)
    if math.isnan(a) and math.isnan(b):
        return fmt.canon
    if math.isnan(a) or math.isnan(b):
        return y if math.isnan(a) else x
    if a == b:  # only +0 and -0 differ: -0 < +0
        x_neg = bool(x & fmt.sign)
        return (x if x_neg else y) if is_min else (y if x_neg else x)
    return x if (a < b) == is_min else y


def f64_bits(v: float) -> int:
    return struct.unpack("<Q", struct.pack("<d", v))[0]


def f64_arith(op: str, x: int, y: int) -> int:
    a, b = F64.decode(x), F64.decode(y)
    return f64_bits(a + b if op == "sum" else a * b)


# ---------------------------------------------------------------- NCCL's operators


def int_info(t: str) -> tuple[int, bool]:
    """(bits, signed)"""
    return int(t[1:]), t[0] == "i"


def wrap(t: str, v: int) -> int:
    bits, signed = int_info(t)
    v &= (1 << bits) - 1
    return v - (1 << bits) if signed and v >> (bits - 1) else v


def scalar_bits(t: str, value: float) -> int:
    """A float scalar as NCCL stores it in redOpArg: float(value) rounded to the
    type (hostToDevRedOp: __float2half(float(1.0/n)), __nv_cvt_float_to_fp8(..., SATFINITE))."""
    if t == "f64":
        return f64_bits(value)
    f32 = F32.encode(value)
    return f32 if t == "f32" else FMT[t].encode(F32.decode(f32), satfinite=t.startswith("f8"))


def host_op(t: str, op: str, nranks: int = 3, scalar: Union[int, float] = 0) -> tuple[int, int]:
    """(ncclDevRedOp_t, redOpArg) as hostToDevRedOp builds them; premul: a
    ncclRedOpCreatePreMulSum operator with that scalar."""
    size = struct.calcsize(STRUCT[t])
    all_bits = (1 << 8 * size) - 1
    sign_bit = all_bits ^ (all_bits >> 1)
    if op in ("sum", "prod"):
        return (SUM if op == "sum" else PROD), 0
    if op in ("min", "max"):
        arg = sign_bit if t in ("i8", "i32", "i64") else 0
        return MINMAX, arg ^ (all_bits if op == "max" else 0)
    if op == "avg" and t in INT_TYPES:
        return SUMPOSTDIV, nranks << 1 | (t[0] == "i")
    if op == "avg":
        return PREMULSUM, scalar_bits(t, 1.0 / nranks)
    assert op == "premul"
    return PREMULSUM, (int(scalar) & all_bits) if t in INT_TYPES else scalar_bits(t, float(scalar))


Fn1 = Callable[[int], int]
Fn2 = Callable[[int, int], int]


def reference_ops(t: str, op: str, arg: int, nranks: int = 3) -> tuple[Fn1, Fn2, Fn1]:
    """(preOp, reduce, postOp) on packed elements; pre/post are the identity
    except PreMulSum's multiply and SumPostDiv's divide."""
    ident: Fn1 = lambda x: x  # noqa: E731
    if t in INT_TYPES:
        red: dict[str, Fn2] = {
            "sum": lambda x, y: wrap(t, x + y), "prod": lambda x, y: wrap(t, x * y),
            "min": min, "max": max, "avg": lambda x, y: wrap(t, x + y),
            "premul": lambda x, y: wrap(t, x + y)}
        pre = (lambda x: wrap(t, x * wrap(t, arg))) if op == "premul" else ident
        post = (lambda x: (-1 if x < 0 else 1) * (abs(x) // nranks)) if op == "avg" else ident
        return pre, red[op], post
    fmt = FMT[t]
    if t == "f64":
        two = f64_arith
    elif t.startswith("f8"):
        two = lambda o, x, y: fp8_arith(fmt, o, x, y)  # noqa: E731
    else:
        two = lambda o, x, y: arith(fmt, o, x, y)  # noqa: E731
    if op in ("min", "max"):
        fix = (lambda r: fmt.encode(fmt.decode(r), satfinite=True)) if t.startswith("f8") else ident
        return ident, (lambda x, y: fix(fminmax(fmt, op == "min", x, y))), ident
    if op == "prod":
        return ident, (lambda x, y: two("prod", x, y)), ident
    pre = (lambda x: two("prod", x, arg)) if op in ("avg", "premul") else ident
    return pre, (lambda x, y: two("sum", x, y)), ident


def reference(t: str, op: str, arg: int, srcs: list[list[int]], pre: bool, post: bool,
              nranks: int = 3) -> list[int]:
    pre_fn, red, post_fn = reference_ops(t, op, arg, nranks)
    out = []
    for i in range(len(srcs[0])):
        acc = pre_fn(srcs[0][i]) if pre else srcs[0][i]
        for s in srcs[1:]:
            acc = red(acc, s[i])
        out.append(post_fn(acc) if post else acc)
    return out


def same(t: str, got: list[int], want: list[int]) -> list[tuple[int, int, int]]:
    """Mismatches (index, got, want); f64 NaNs compare as NaN (payload: the host's)."""
    bad = []
    for i, (g, w) in enumerate(zip(got, want)):
        if t == "f64" and math.isnan(F64.decode(g)) and math.isnan(F64.decode(w)):
            continue
        if g != w:
            bad.append((i, g, w))
    return bad


# ---------------------------------------------------------------- inputs


def float_values(t: str, rng: random.Random, count: int) -> list[int]:
    """Bit patterns: specials, random bits, and values near 1 (sums of them round)."""
    fmt = FMT[t]
    width = fmt.ebits + fmt.mbits + 1
    one = fmt.bias << fmt.mbits
    specials = [0, fmt.sign, one, one | fmt.sign, fmt.max_bits, fmt.max_bits | fmt.sign, 1,
                1 | fmt.sign, 1 << fmt.mbits, fmt.canon, fmt.canon | fmt.sign]
    if fmt.ieee:
        specials += [fmt.inf_bits, fmt.inf_bits | fmt.sign, fmt.inf_bits | 1]
    out = list(specials)
    while len(out) < count:
        kind = rng.randrange(3)
        if kind == 0:
            out.append(rng.getrandbits(width))
        else:
            e = rng.randrange(max(1, fmt.bias - 4), fmt.bias + 4)
            sign = rng.getrandbits(1) * fmt.sign
            out.append(sign | e << fmt.mbits | rng.getrandbits(fmt.mbits))
    return out[:count]


def tie_pairs(t: str, rng: random.Random, count: int) -> tuple[list[int], list[int]]:
    """a and b = +-(1 or 3) * ulp(a)/2: the exact sum is halfway between two values."""
    fmt = FMT[t]
    xs, ys = [], []
    while len(xs) < count:
        e = rng.randrange(fmt.mbits + 2, (1 << fmt.ebits) - 2)  # ulp(a)/2 stays representable
        a = (rng.getrandbits(1) * fmt.sign) | e << fmt.mbits | rng.getrandbits(fmt.mbits)
        half_ulp = math.ldexp(1.0, e - fmt.bias - fmt.mbits - 1)
        xs.append(a)
        ys.append(fmt.encode(rng.choice((1, 3, -1, -3)) * half_ulp))
    return xs, ys


def int_values(t: str, rng: random.Random, count: int) -> list[int]:
    bits, _ = int_info(t)
    edges = [0, 1, -1, (1 << (bits - 1)) - 1, -(1 << (bits - 1)), (1 << bits) - 1, 2, 3]
    out = [wrap(t, v) for v in edges]
    while len(out) < count:
        out.append(wrap(t, rng.getrandbits(bits) >> rng.randrange(bits)))  # all magnitudes
    return out[:count]


def values(t: str, rng: random.Random, count: int) -> list[int]:
    return int_values(t, rng, count) if t in INT_TYPES else float_values(t, rng, count)


# ---------------------------------------------------------------- tests


def test_reference_formats_match_struct() -> None:
    """The reference's own codecs against Python's (half: struct 'e', single: 'f')."""
    for h in range(1 << 16):
        v = struct.unpack("<e", struct.pack("<H", h))[0]
        assert (math.isnan(v) and math.isnan(F16.decode(h))) or F16.decode(h) == v
        if not math.isnan(v):
            assert F16.encode(v) == h
    rng = random.Random(5)
    for _ in range(20000):
        d = math.ldexp(rng.random() * rng.choice((1, -1)), rng.randrange(-152, 128))
        assert F32.encode(d) == struct.unpack("<I", struct.pack("<f", d))[0], d
        if abs(d) < 65520:
            assert F16.encode(d) == struct.unpack("<H", struct.pack("<e", d))[0], d


def test_sizes_and_validity(lib: Lib) -> None:
    c, ffi = lib.c, lib.ffi
    assert [c.fc_nccl_type_size(i) for i in range(12)] == [1, 1, 4, 4, 8, 8, 2, 4, 8, 2, 1, 1]
    assert c.fc_nccl_type_size(12) == 0 and c.fc_nccl_type_size(-1) == 0

    def valid(t: int, op: int, arg: int = 0) -> bool:
        return bool(c.fc_redop_valid(ffi.new("fc_redop *", {"type": t, "redop": op, "arg": arg})))

    for t in range(12):
        assert all(valid(t, op) for op in (SUM, PROD, MINMAX, PREMULSUM))
        # NCCL has SumPostDiv kernels for integers only; divisor 0 makes no sense
        assert valid(t, SUMPOSTDIV, 3 << 1 | 1) == (TYPES[t] in INT_TYPES)
        assert not valid(t, SUMPOSTDIV, 1) and not valid(t, SUMPOSTDIV, 1 << 32)
        assert not valid(t, 5) and not valid(t, -1)
    assert not valid(12, SUM) and not valid(-1, SUM)
    assert not c.fc_redop_valid(ffi.NULL)


def test_invalid_op_writes_nothing(lib: Lib) -> None:
    assert lib.reduce("f32", SUMPOSTDIV, 3 << 1, [[1, 2], [3, 4]], post=True) == [0xA5A5A5A5] * 2
    assert lib.reduce("f32", SUMPOSTDIV, 3 << 1, [[1, 2], [3, 4]], post=True, inplace=1) == [3, 4]
    assert lib.reduce("u8", 7, 0, [[1, 2], [3, 4]]) == [0xA5] * 2


def test_device_op_of_the_users_op(lib: Lib) -> None:
    """fc_redop_of_host (what a net plugin reduces with, handed ncclRedOp_t
    0..3) builds hostToDevRedOp's operator and argument; other operators and
    unknown types are refused."""
    out = lib.ffi.new("fc_redop *")
    for t in TYPES:
        for nccl_op, op in enumerate(["sum", "prod", "max", "min"]):
            assert lib.c.fc_redop_of_host(TYPES.index(t), nccl_op, out), (t, op)
            assert (out.type, out.redop, out.arg) == (TYPES.index(t), *host_op(t, op, nranks=1, scalar=1)), (t, op)
    assert not lib.c.fc_redop_of_host(TYPES.index("f32"), 4, out)  # ncclAvg
    assert not lib.c.fc_redop_of_host(len(TYPES), 0, out)


@pytest.mark.parametrize("t,op", [(t, op) for t in TYPES for op in HOST_OPS])
def test_every_type_and_op(lib: Lib, t: str, op: str) -> None:
    """Three sources of 1100 elements (three blocks of the C side, the last one
    partial), 1035 (the last block one of the small ones) and 7 (one small
    block), odd addresses, with pre and post; into a separate dst and in place."""
    rng = random.Random(f"{t}/{op}")
    scalar = rng.choice([3, -5, 200]) if t in INT_TYPES else rng.choice([0.3, -1.75, 2.5])
    redop, arg = host_op(t, op, nranks=3, scalar=scalar)
    for count in (1100, 1035, 7):
        srcs = [values(t, rng, count) for _ in range(3)]
        for s in srcs:
            rng.shuffle(s)
        want = reference(t, op, arg, srcs, pre=True, post=True)
        assert same(t, lib.reduce(t, redop, arg, srcs, pre=True, post=True), want)[:5] == []
        for inplace in (0, 2):
            got = lib.reduce(t, redop, arg, srcs, pre=True, post=True, inplace=inplace)
            assert len(got) == count and same(t, got, want)[:5] == []


@pytest.mark.parametrize("t", ["f8e4m3", "f8e5m2"])
@pytest.mark.parametrize("op", ["sum", "prod", "min", "max"])
def test_fp8_every_pair(lib: Lib, t: str, op: str) -> None:
    xs = [a for a in range(256) for _ in range(256)]
    ys = list(range(256)) * 256
    redop, arg = host_op(t, op)
    want = reference(t, op, arg, [xs, ys], False, False)
    assert same(t, lib.reduce(t, redop, arg, [xs, ys]), want)[:5] == []


@pytest.mark.parametrize("t", ["f8e4m3", "f8e5m2"])
def test_fp8_premul_every_scalar(lib: Lib, t: str) -> None:
    xs = list(range(256))
    for s in range(256):
        want = [fp8_arith(FMT[t], "prod", x, s) for x in xs]
        assert lib.reduce(t, PREMULSUM, s, [xs], pre=True) == want, hex(s)


@pytest.mark.parametrize("t", ["f16", "bf16", "f32", "f64"])
@pytest.mark.parametrize("op", ["sum", "prod", "min", "max"])
def test_float_pairs(lib: Lib, t: str, op: str) -> None:
    rng = random.Random(f"pairs/{t}/{op}")
    xs, ys = float_values(t, rng, 3000), float_values(t, rng, 3000)
    rng.shuffle(ys)
    tx, ty = tie_pairs(t, rng, 1000)
    xs, ys = xs + tx, ys + ty
    redop, arg = host_op(t, op)
    want = reference(t, op, arg, [xs, ys], False, False)
    assert same(t, lib.reduce(t, redop, arg, [xs, ys]), want)[:5] == []


@pytest.mark.parametrize("t", INT_TYPES)
def test_integers(lib: Lib, t: str) -> None:
    """min/max/avg with hostToDevRedOp's arguments mean what they say."""
    bits, signed = int_info(t)
    lo, hi = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if signed else (0, (1 << bits) - 1)
    srcs = [[lo, hi, 0, 5, hi, lo], [hi, lo, 1, 5, 7 if signed else 3, lo],
            [0, 0, -1 if signed else 9, 5, 1, 2]]
    for op, want in [("min", [lo, lo, min(0, 1, -1 if signed else 9), 5, 1, lo]),
                     ("max", [hi, hi, max(0, 1, -1 if signed else 9), 5, hi, 2]),
                     ("sum", [wrap(t, sum(c)) for c in zip(*srcs)]),
                     ("prod", [wrap(t, c[0] * c[1] * c[2]) for c in zip(*srcs)])]:
        redop, arg = host_op(t, op)
        assert lib.reduce(t, redop, arg, srcs) == want, op
    # avg: the sum (wrapped) divided by nranks, rounded toward zero, sign kept
    srcs = [[7, 1, -7 if signed else 250, hi, 3], [0, 1, 0, hi, 3], [0, 0, 0, hi, 3]]
    for nranks in (1, 2, 3, 8):
        redop, arg = host_op(t, "avg", nranks)
        want = []
        for c in zip(*srcs):
            s = wrap(t, sum(c))
            want.append((-1 if s < 0 else 1) * (abs(s) // nranks))
        assert lib.reduce(t, redop, arg, srcs, post=True) == want, nranks
        assert lib.reduce(t, redop, arg, srcs, post=False) == [wrap(t, sum(c)) for c in zip(*srcs)]


NAN32 = 0x7FC00001  # a NaN with a payload (the host would keep it)


@pytest.mark.parametrize("case", [
    # f32: NaN results are 0x7fffffff, min/max skip NaNs, -0 < +0
    ("f32", "sum", [NAN32, 0x7F800000, 0x3F800000], [0x3F800000, 0xFF800000, 0x7F7FFFFF],
     [0x7FFFFFFF, 0x7FFFFFFF, 0x7F7FFFFF]),
    ("f32", "min", [NAN32, NAN32, 0x80000000, 0], [0x40000000, 0xFFC00000, 0, 0x80000000],
     [0x40000000, 0x7FFFFFFF, 0x80000000, 0x80000000]),
    ("f32", "max", [NAN32, 0x80000000, 0], [0xC0000000, 0, 0x80000000], [0xC0000000, 0, 0]),
    # inf * 0; 2^-149 * 0.5 is halfway between 0 and 2^-149: to even, 0
    ("f32", "prod", [0x7F800000, 0x00000001], [0, 0x3F000000], [0x7FFFFFFF, 0]),
    # f16: 65504 + 16 is halfway to 65536: rounds to even, i.e. inf; subnormals; ties
    ("f16", "sum", [0x7BFF, 0x7BFF, 0x0001, 0x3C00, 0x3C01, 0x7C01, 0x7C00],
     [0x4C00, 0x4800, 0x0001, 0x1000, 0x1000, 0x3C00, 0xFC00],
     [0x7C00, 0x7BFF, 0x0002, 0x3C00, 0x3C02, 0x7FFF, 0x7FFF]),
    ("f16", "prod", [0x0001, 0x0001, 0x7BFF], [0x3800, 0x3A00, 0x4000], [0x0000, 0x0001, 0x7C00]),
    ("f16", "min", [0x7E00, 0x8000, 0xFC00], [0x3C00, 0x0000, 0x7E00], [0x3C00, 0x8000, 0xFC00]),
    # bf16: overflow to inf, NaN canonical, ties to even (1 + 2^-8 -> 1)
    ("bf16", "sum", [0x7F7F, 0x7FC1, 0x3F80, 0x3F81], [0x7F7F, 0x3F80, 0x3B80, 0x3B80],
     [0x7F80, 0x7FFF, 0x3F80, 0x3F82]),
    ("bf16", "max", [0xFFC0, 0x8000], [0xBF80, 0x0000], [0xBF80, 0x0000]),
    # e4m3: saturates at 448 (0x7e), NaN 0x7f, subnormal ties to even
    ("f8e4m3", "sum", [0x7E, 0x7F, 0xFE, 0x01], [0x7E, 0x38, 0xFE, 0x01], [0x7E, 0x7F, 0xFE, 0x02]),
    ("f8e4m3", "prod", [0x01, 0x01, 0x7E], [0x30, 0x3C, 0x7E], [0x00, 0x02, 0x7E]),
    ("f8e4m3", "max", [0x7F, 0x7F, 0x00], [0xB8, 0xFF, 0x80], [0xB8, 0x7F, 0x00]),
    ("f8e4m3", "min", [0x00], [0x80], [0x80]),
    # e5m2: saturates at 57344 (0x7b) and turns infinities into it; NaN 0x7f
    ("f8e5m2", "sum", [0x7B, 0x7C, 0xFC, 0x7D, 0x7C], [0x7B, 0x3C, 0x3C, 0x3C, 0xFC],
     [0x7B, 0x7B, 0xFB, 0x7F, 0x7F]),
    ("f8e5m2", "max", [0x7C, 0x7E, 0x7E], [0x3C, 0xFC, 0x7D], [0x7B, 0xFB, 0x7F]),
    ("f8e5m2", "min", [0xFC, 0x3C], [0x00, 0x3C], [0xFB, 0x3C]),
    # integers
    ("i8", "sum", [127, -128], [1, -1], [-128, 127]),
    ("u64", "prod", [1 << 63, 3], [2, (1 << 64) - 1], [0, (1 << 64) - 3]),
    ("i32", "min", [-(1 << 31), -1], [(1 << 31) - 1, 0], [-(1 << 31), -1]),
    ("u32", "max", [0, 0xFFFFFFFF], [0x80000000, 1], [0x80000000, 0xFFFFFFFF]),
], ids=lambda c: f"{c[0]}-{c[1]}")
def test_known_values(lib: Lib, case: tuple[str, str, list[int], list[int], list[int]]) -> None:
    t, op, xs, ys, want = case
    redop, arg = host_op(t, op)
    assert [hex(v) for v in lib.reduce(t, redop, arg, [xs, ys])] == [hex(v) for v in want]


def test_avg_over_a_ring(lib: Lib) -> None:
    """ncclAvg on floats the way a ring reduces: each rank multiplies its own
    input by 1/n (pre) and adds what it received."""
    rng = random.Random(7)
    for t in ("f16", "f8e4m3", "f32"):
        nranks = 5
        redop, arg = host_op(t, "avg", nranks)
        assert redop == PREMULSUM
        inputs = [float_values(t, rng, 600) for _ in range(nranks)]
        acc = lib.reduce(t, redop, arg, [inputs[0]], pre=True)
        pre, red, _ = reference_ops(t, "avg", arg)
        want = [pre(x) for x in inputs[0]]
        assert acc == want
        for r in range(1, nranks):
            acc = lib.reduce(t, redop, arg, [inputs[r], acc], pre=True)
            want = [red(pre(x), w) for x, w in zip(inputs[r], want)]
        assert acc == want
    # the scalars NCCL stores: __float2half(float(1/5)) and the fp8 of float(1/5)
    assert host_op("f16", "avg", 5)[1] == 0x3266 and host_op("f8e4m3", "avg", 5)[1] == 0x25


def test_one_source(lib: Lib) -> None:
    """One source: a byte copy (NaN payloads kept) unless PreMulSum's pre or
    SumPostDiv's post applies."""
    f32 = [NAN32, 0xFFC12345, 0x7F800001, 0x3F800000, 0x80000000]
    for op in (SUM, PROD, MINMAX):
        assert lib.reduce("f32", op, 1, [f32], pre=True, post=True) == f32
        assert lib.reduce("f32", op, 1, [f32], pre=True, post=True, inplace=0) == f32
    f16 = [0x7C01, 0xFE01, 0x3C00]
    assert lib.reduce("f16", PREMULSUM, 0x4000, [f16]) == f16  # pre not asked
    assert lib.reduce("f16", PREMULSUM, 0x4000, [f16], pre=True) == [0x7FFF, 0x7FFF, 0x4000]
    assert lib.reduce("f8e5m2", SUM, 0, [[0x7C, 0x7D]], pre=True) == [0x7C, 0x7D]
    assert lib.reduce("i32", SUMPOSTDIV, 4 << 1 | 1, [[-9, 9]]) == [-9, 9]
    assert lib.reduce("i32", SUMPOSTDIV, 4 << 1 | 1, [[-9, 9]], post=True) == [-2, 2]
    assert lib.reduce("u8", PREMULSUM, 3, [[100, 7]], pre=True) == [44, 21]  # 300 wraps to 44
    assert lib.reduce("f32", SUM, 0, [[]]) == []


def test_multimem_sums_half_precision_in_fp32(lib: Lib) -> None:
    """NVLS reads the team's sum with multimem.ld_reduce ... .acc::f32: f16 and
    bf16 add up in fp32 and round once, where NCCL's other algorithms round
    after every addition. 2048 + 1 + 1 in f16: 2050, not 2048; 256 + 1 + 1 in
    bf16: 258, not 256. Other types reduce as fc_reduce does."""
    h = {2048.0: 0x6800, 1.0: 0x3C00, 2050.0: 0x6801}
    assert lib.multimem("f16", SUM, 0, [[h[2048.0]], [h[1.0]], [h[1.0]]]) == [h[2050.0]]
    assert lib.reduce("f16", SUM, 0, [[h[2048.0]], [h[1.0]], [h[1.0]]]) == [h[2048.0]]
    b = {256.0: 0x4380, 1.0: 0x3F80, 258.0: 0x4381}
    assert lib.multimem("bf16", SUM, 0, [[b[256.0]], [b[1.0]], [b[1.0]]]) == [b[258.0]]
    assert lib.reduce("bf16", SUM, 0, [[b[256.0]], [b[1.0]], [b[1.0]]]) == [b[256.0]]
    ints = [[5, -7, 1 << 30], [9, 3, 1 << 30], [-1, 2, 1 << 30]]
    assert lib.multimem("i32", SUM, 0, ints) == lib.reduce("i32", SUM, 0, ints)
