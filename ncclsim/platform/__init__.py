"""Platform configuration from Python: GPU models, the per-host platform file, `ncclsim env`."""
