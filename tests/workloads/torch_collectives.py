"""torch.distributed collectives over NCCL, every result checked on the CPU
(the simulated GPU runs NCCL's kernels only: tensors are built on the CPU and
copied over). Run one process per GPU with the env:// variables of `ncclsim
launch`, or under torchrun."""
import os
import sys

import torch
import torch.distributed as dist

def main() -> int:
    local = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local)
    dev = torch.device("cuda", local)
    dist.init_process_group("nccl", device_id=dev)
    rank, world = dist.get_rank(), dist.get_world_size()
    n = 1 << 12

    def on(t):  # built on the CPU: the simulated GPU runs NCCL's kernels only
        return t.to(dev)

    x = on(torch.arange(n, dtype=torch.float32) + rank)
    dist.all_reduce(x)
    want = torch.arange(n, dtype=torch.float32) * world + world * (world - 1) / 2
    assert torch.equal(x.cpu(), want), "all_reduce"
    out = on(torch.zeros(world * n))
    dist.all_gather_into_tensor(out, on(torch.full((n,), float(rank))))
    assert torch.equal(out.cpu(), torch.arange(world).repeat_interleave(n).float()), "all_gather"
    rs = on(torch.zeros(n))
    dist.reduce_scatter_tensor(rs, on(torch.arange(world * n, dtype=torch.float32)))
    assert torch.equal(rs.cpu(), (torch.arange(n) + rank * n).float() * world), "reduce_scatter"
    b = on(torch.full((n,), float(rank)))
    dist.broadcast(b, src=world - 1)
    assert torch.equal(b.cpu(), torch.full((n,), float(world - 1))), "broadcast"
    a2a_out = on(torch.zeros(world * 4))
    dist.all_to_all_single(a2a_out, on(torch.arange(world * 4, dtype=torch.float32) + 100 * rank))
    want = torch.cat([torch.arange(rank * 4, rank * 4 + 4).float() + 100 * s for s in range(world)])
    assert torch.equal(a2a_out.cpu(), want), "all_to_all"
    peer = (rank + world // 2) % world  # on the other host
    if rank < peer:
        dist.send(on(torch.full((n,), 7.0 + rank)), dst=peer)
    else:
        got = on(torch.zeros(n)); dist.recv(got, src=peer)
        assert torch.equal(got.cpu(), torch.full((n,), 7.0 + peer)), "send/recv"
    nxt, prv = (rank + 1) % world, (rank - 1) % world
    recv = on(torch.zeros(n))
    for r in dist.batch_isend_irecv([dist.P2POp(dist.isend, on(torch.full((n,), float(rank))), nxt),
                                     dist.P2POp(dist.irecv, recv, prv)]):
        r.wait()
    assert torch.equal(recv.cpu(), torch.full((n,), float(prv))), "batch_isend_irecv"
    dist.barrier()
    dist.destroy_process_group()
    print(f"rank {rank}/{world}: every collective checked", flush=True)
    return 0

sys.exit(main())
