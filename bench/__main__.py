"""`python -m bench`: every measure, or `--only NAME` (bench.harness.run; `--help` for options)."""

import sys

from bench.harness.run import main

sys.exit(main())
