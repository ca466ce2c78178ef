"""The signals that stop a launch or a sweep (Ctrl-C, a job scheduler's or a
CI runner's SIGTERM, a closed terminal), handled alike by both."""

from __future__ import annotations

import contextlib
import signal
import threading
from typing import Callable, Iterator

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

Handler = Callable[[int, object], None]


@contextlib.contextmanager
def handled_by(handler: Handler) -> Iterator[None]:
    """`handler` receives every stop signal inside the block; the previous
    handlers return after it. Python sets handlers in the main thread only:
    elsewhere nothing changes."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {sig: signal.signal(sig, handler) for sig in STOP_SIGNALS}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


def name(signum: int) -> str:
    """SIGTERM, or "signal 99" for a number Python does not know."""
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"
