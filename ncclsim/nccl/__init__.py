"""NCCL releases: which library a simulation loads, fetched from PyPI on demand."""
