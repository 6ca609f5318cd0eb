"""`python -m agent.cli`: the `rein` command line."""

import sys

from agent.cli.main import main

sys.exit(main())
