"""The built-in workload: initialise NCCL, run collectives, destroy."""
