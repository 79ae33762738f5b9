"""`python -m jobsched.cli`: the `jobsched` command."""

from __future__ import annotations

import sys

from jobsched.cli.app import main

sys.exit(main())
