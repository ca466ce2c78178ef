"""`ncclsim launch`: simulated hosts over MPI, one run directory per run."""
