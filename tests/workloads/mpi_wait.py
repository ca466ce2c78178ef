"""Rank 0 works for 1.5 s of wall time while the other ranks wait for it at an
MPI barrier; every rank prints its rank, the CPU seconds it used meanwhile
and the wall seconds the wait took."""

from __future__ import annotations

import time

from mpi4py import MPI

world = MPI.COMM_WORLD
world.Barrier()
cpu, wall = time.process_time(), time.monotonic()
if world.Get_rank() == 0:
    while time.monotonic() - wall < 1.5:
        pass
world.Barrier()
print(world.Get_rank(), time.process_time() - cpu, time.monotonic() - wall)
