"""NCCL wheels from PyPI, fetched once into a cache and used by path.

The installed nvidia-nccl-cu12 is the default; any other release
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
from typing import Callable, Mapping, Optional

from ncclsim import NcclsimError
from ncclsim.paths import nccl_lib_dir
from ncclsim.platform.env import default_config_dir

FLAVOURS = ("cu12", "cu13")
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


def installed() -> NcclBuild:
    """The nvidia-nccl-cu12 wheel installed with ncclsim."""
    lib = nccl_lib_dir()
    inc = lib.parent / "include"
    return NcclBuild("cu12", "", lib, inc if (inc / "nccl.h").exists() else None)


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
