"""NCCL wheels from PyPI, fetched once into a cache and used by path.

The default is the NCCL a program of this environment loads on a real
machine: its NCCL wheel (nvidia-nccl-cu12 or -cu13, e.g. the one PyTorch
installed; ncclsim itself does not depend on one, so it never replaces it),
else DEFAULT_RELEASE from the cache. Any other release
(`nvidia-nccl-cu12==2.21.5`, `nvidia-nccl-cu13==2.32.3`, ...) is downloaded
with pip, and only its library and headers are kept.
"""

from __future__ import annotations

import fcntl
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping, Optional, TextIO

from ncclsim import NcclsimError
from ncclsim.paths import default_config_dir, nccl_lib_dir

FLAVOURS = ("cu12", "cu13")
# Where the environment has no NCCL wheel: the newest release with public sources
# (the device emulation covers 2.23.4-2.32.3).
DEFAULT_RELEASE = "2.30.7"
_VERSION = re.compile(r"^\d+\.\d+\.\d+(\.post\d+)?$")


@dataclass(frozen=True)
class NcclBuild:
    """One NCCL release on disk."""

    flavour: str  # "cu12" / "cu13"
    version: str  # "2.21.5"; "" for the installed wheel
    lib_dir: Path  # holds libnccl.so.2
    include_dir: Optional[Path]  # holds nccl.h, when the wheel ships it

    @property
    def library(self) -> Path:
        return self.lib_dir / "libnccl.so.2"


class NcclFetchError(NcclsimError):
    pass


def installed() -> Optional[NcclBuild]:
    """The NCCL wheel of this environment; None when it has none."""
    import importlib.metadata  # here: its import is most of a rank's `ncclsim probe` start, which never asks

    for flavour in FLAVOURS:
        try:
            version = importlib.metadata.version(f"nvidia-nccl-{flavour}")
        except importlib.metadata.PackageNotFoundError:
            continue
        lib = nccl_lib_dir()
        inc = lib.parent / "include"
        return NcclBuild(flavour, version, lib, inc if (inc / "nccl.h").exists() else None)
    return None


def default(environ: Mapping[str, str] = os.environ,
            notify: Optional[Callable[[str], None]] = None) -> NcclBuild:
    """What a program of this environment loads: its NCCL wheel, else
    DEFAULT_RELEASE (fetched once; `notify` as for fetch)."""
    return installed() or fetch(DEFAULT_RELEASE, environ, notify)


def announce(err: TextIO, who: str = "ncclsim") -> Callable[[str], None]:
    """A `notify` that says on `err` which package is being fetched, and where to."""
    def say(package: str) -> None:
        err.write(f"{who}: fetching {package} from PyPI (once, into {cache_root()})\n")
        err.flush()
    return say


def build(spec: str, environ: Mapping[str, str] = os.environ,
          notify: Optional[Callable[[str], None]] = None) -> NcclBuild:
    """`--nccl SPEC`: "installed" (the default above) or a release."""
    return default(environ, notify) if spec == "installed" else fetch(spec, environ, notify)


def cache_root(environ: Mapping[str, str] = os.environ) -> Path:
    return default_config_dir(environ) / "nccl"


def parse_spec(spec: str) -> tuple[str, str]:
    """"2.21.5" -> ("cu12", "2.21.5"); "cu13:2.32.3" -> ("cu13", "2.32.3")."""
    flavour, _, version = spec.rpartition(":")
    flavour = flavour or "cu12"
    if flavour not in FLAVOURS:
        raise NcclFetchError(f"unknown NCCL flavour {flavour!r} in {spec!r}: use one of {', '.join(FLAVOURS)}")
    if not _VERSION.match(version):
        raise NcclFetchError(f"not an NCCL version: {version!r} (expected e.g. 2.21.5 or cu13:2.32.3)")
    return flavour, version


def fetch(spec: str, environ: Mapping[str, str] = os.environ,
          notify: Optional[Callable[[str], None]] = None) -> NcclBuild:
    """The NCCL release `spec` ("2.21.5", "cu13:2.32.3"), downloading it once;
    `notify` hears the package's name just before a download starts."""
    flavour, version = parse_spec(spec)
    dest = cache_root(environ) / f"{flavour}-{version}"
    build = NcclBuild(flavour, version, dest / "lib", dest / "include")
    if build.library.exists():
        return build
    dest.parent.mkdir(parents=True, exist_ok=True)
    with open(dest.parent / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one download per release, even from parallel runs
        if build.library.exists():
            return build
        if notify:
            notify(f"nvidia-nccl-{flavour}=={version}")
        _download(flavour, version, dest)
    return build


def _download(flavour: str, version: str, dest: Path) -> None:
    package = f"nvidia-nccl-{flavour}=={version}"
    with tempfile.TemporaryDirectory(prefix="ncclsim-wheel-") as tmp:
        proc = subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
             "--disable-pip-version-check", "-q", "-d", tmp, package],
            capture_output=True, text=True)
        wheels = list(Path(tmp).glob("*.whl"))
        if proc.returncode != 0 or not wheels:
            reason = (proc.stderr.strip().splitlines() or ["pip found nothing"])[-1]
            raise NcclFetchError(f"cannot fetch {package} from PyPI: {reason}")
        staging = Path(tempfile.mkdtemp(prefix=".staging-", dir=dest.parent))
        try:
            with zipfile.ZipFile(wheels[0]) as z:
                for member in z.namelist():
                    for sub in ("lib", "include"):
                        prefix = f"nvidia/nccl/{sub}/"
                        if member.startswith(prefix) and not member.endswith("/"):
                            out = staging / sub / member[len(prefix):]
                            out.parent.mkdir(parents=True, exist_ok=True)
                            with z.open(member) as src, open(out, "wb") as dst:
                                shutil.copyfileobj(src, dst)
            if not (staging / "lib" / "libnccl.so.2").exists():
                raise NcclFetchError(f"{wheels[0].name} has no nvidia/nccl/lib/libnccl.so.2")
            os.replace(staging, dest)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
