"""A small transformer language model trained for 3 steps with
DistributedDataParallel, or fully sharded (FSDP) with --fsdp. Its own
kernels do not compute on the simulated GPU; NCCL's collectives do."""
import os
import sys

import torch
import torch.distributed as dist
import torch.nn as nn

def main() -> int:
    fsdp = "--fsdp" in sys.argv
    local = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local)
    dev = torch.device("cuda", local)
    dist.init_process_group("nccl", device_id=dev)
    rank = dist.get_rank()
    torch.manual_seed(0)
    vocab, d, seq, batch = 512, 128, 64, 4
    model = nn.Sequential(
        nn.Embedding(vocab, d),
        nn.TransformerEncoder(nn.TransformerEncoderLayer(d, 4, 4 * d, batch_first=True), 2),
        nn.Linear(d, vocab)).to(dev)
    if fsdp:
        from torch.distributed.fsdp import fully_shard
        for layer in model[1].layers:
            fully_shard(layer)
        fully_shard(model)
        wrapped = model
    else:
        wrapped = nn.parallel.DistributedDataParallel(model, device_ids=[local])
    opt = torch.optim.AdamW(wrapped.parameters(), lr=1e-3)
    for step in range(3):
        tokens = torch.randint(0, vocab, (batch, seq)).to(dev)
        logits = wrapped(tokens)
        loss = nn.functional.cross_entropy(logits.reshape(-1, vocab), tokens.reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        torch.cuda.synchronize()
        print(f"rank {rank}: step {step} done", flush=True)
    dist.destroy_process_group()
    return 0

sys.exit(main())
