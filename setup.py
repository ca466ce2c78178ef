"""Packaging hook: building ncclsim compiles fake_cuda/ into ncclsim/lib.

Everything else is declared in pyproject.toml. The C build needs only a C
compiler and cuda.h, which the build environment gets from the
nvidia-cuda-runtime-cu12 wheel (build-system requires).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.dist import Distribution

ROOT = Path(__file__).resolve().parent


class BuildPyWithFakeCuda(build_py):
    """Copy the Python package, then build the simulator's libraries beside it."""

    def run(self) -> None:
        super().run()
        # Editable installs import the source tree, so the libraries go there.
        editable = getattr(self, "editable_mode", False)
        out = ROOT / "ncclsim" / "lib" if editable else Path(self.build_lib) / "ncclsim" / "lib"
        cmd = [sys.executable, str(ROOT / "fake_cuda" / "build.py"), "--out", str(out)]
        # NCCLSIM_BUILD_ONLY=nvml,... builds a subset (build.py --only), for packaging work.
        only = os.environ.get("NCCLSIM_BUILD_ONLY")
        if only:
            cmd += ["--only", only]
        self.announce(f"building fake_cuda: {' '.join(cmd)}", level=2)
        subprocess.run(cmd, check=True)
        # Cluster presets live in topologies/ at the top of the source tree;
        # installed, ncclsim.cluster.presets finds them in ncclsim/topologies.
        if not editable:
            presets = Path(self.build_lib) / "ncclsim" / "topologies"
            presets.mkdir(parents=True, exist_ok=True)
            for f in sorted((ROOT / "topologies").glob("*.yaml")):
                shutil.copy2(f, presets / f.name)


class BinaryDistribution(Distribution):
    """The wheel carries native libraries: tag it for the platform, not py3-none-any."""

    def has_ext_modules(self) -> bool:
        return True


setup(cmdclass={"build_py": BuildPyWithFakeCuda}, distclass=BinaryDistribution)
