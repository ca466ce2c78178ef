"""`ncclsim sweep`: many `launch` runs over cluster shapes, NCCL releases and
settings, with expectations checked on every run's report (for CI)."""
