import sys

from ncclsim.probe.cli import main

sys.exit(main())
