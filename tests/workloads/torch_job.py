"""A PyTorch job on simulated hosts: torch.distributed's collectives, every
result checked on the CPU (tensors are built on the CPU and copied over: the
simulated GPU runs NCCL's kernels only), then, with `--train ddp,fsdp`, a
small transformer language model trained 3 steps with DistributedDataParallel
and fully sharded (FSDP): its own kernels do not compute, its collectives do.
Runs one process per GPU with the env:// variables of `ncclsim launch`, or
under torchrun. Prints wall-clock marks for benchmarks/torch_ranks.py."""
import argparse
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn


def check_collectives(dev: torch.device) -> None:
    rank, world = dist.get_rank(), dist.get_world_size()
    n = 1 << 12

    def on(t: torch.Tensor) -> torch.Tensor:
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
        got = on(torch.zeros(n))
        dist.recv(got, src=peer)
        assert torch.equal(got.cpu(), torch.full((n,), 7.0 + peer)), "send/recv"
    nxt, prv = (rank + 1) % world, (rank - 1) % world
    recv = on(torch.zeros(n))
    for r in dist.batch_isend_irecv([dist.P2POp(dist.isend, on(torch.full((n,), float(rank))), nxt),
                                     dist.P2POp(dist.irecv, recv, prv)]):
        r.wait()
    assert torch.equal(recv.cpu(), torch.full((n,), float(prv))), "batch_isend_irecv"
    dist.barrier()
    print(f"rank {rank}/{world}: every collective checked", flush=True)


def train(dev: torch.device, kind: str) -> None:
    rank = dist.get_rank()
    torch.manual_seed(0)
    vocab, d, seq, batch = 512, 128, 64, 4
    model = nn.Sequential(
        nn.Embedding(vocab, d),
        nn.TransformerEncoder(nn.TransformerEncoderLayer(d, 4, 4 * d, batch_first=True), 2),
        nn.Linear(d, vocab)).to(dev)
    if kind == "fsdp":
        from torch.distributed.fsdp import fully_shard
        for layer in model[1].layers:
            fully_shard(layer)
        fully_shard(model)
        wrapped = model
    else:
        wrapped = nn.parallel.DistributedDataParallel(model, device_ids=[dev.index])
    opt = torch.optim.AdamW(wrapped.parameters(), lr=1e-3)
    for step in range(3):
        tokens = torch.randint(0, vocab, (batch, seq)).to(dev)
        logits = wrapped(tokens)
        loss = nn.functional.cross_entropy(logits.reshape(-1, vocab), tokens.reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        torch.cuda.synchronize()
        print(f"rank {rank}: {kind} step {step} done at {time.time():.3f}", flush=True)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--train", default="", help="comma-separated: ddp, fsdp")
    ap.add_argument("--no-checks", action="store_true", help="train only")
    args = ap.parse_args()
    local = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local)
    dev = torch.device("cuda", local)
    dist.init_process_group("nccl", device_id=dev)
    print(f"rank {dist.get_rank()}: init at {time.time():.3f}", flush=True)
    if not args.no_checks:
        check_collectives(dev)
    for kind in filter(None, args.train.split(",")):
        train(dev, kind)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
