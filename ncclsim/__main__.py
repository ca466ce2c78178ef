"""`python -m ncclsim` is the `ncclsim` command."""

from ncclsim.cli import main

raise SystemExit(main())
