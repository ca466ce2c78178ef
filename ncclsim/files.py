"""Small file helpers: atomic writes of per-host artefacts, cheap reads of
the small files a launch watches."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Optional, Union


def write_atomically(path: Path, text: str) -> None:
    """Write so that a reader sees the old file or the new one, never half of
    one (ranks may be reading it while another process writes it)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def read_small(path: Union[Path, str]) -> Optional[str]:
    """A small file's text (its first 4 KiB), None when it cannot be read.
    The launcher reads a few such files of every rank each time it looks:
    os.read costs a quarter of Path.read_text."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        return os.read(fd, 4096).decode(errors="replace")
    except OSError:
        return None
    finally:
        os.close(fd)
