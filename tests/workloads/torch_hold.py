"""Hold 256 MiB on this rank's GPU until the file named first exists, so GPU
monitors run beside the launch see the rank."""
import os
import sys
import time

import torch

torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
held = torch.empty(64 << 20, dtype=torch.float32, device="cuda")
print(f"holding {held.numel() * 4} bytes in pid {os.getpid()}", flush=True)
deadline = time.time() + 120
while not os.path.exists(sys.argv[1]) and time.time() < deadline:
    time.sleep(0.1)
sys.exit(0 if os.path.exists(sys.argv[1]) else 1)
