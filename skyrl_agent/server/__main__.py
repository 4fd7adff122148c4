"""``python -m skyrl_agent.server``: the same as ``skyrl serve``."""

import sys

from skyrl_agent.server.cli import main

sys.exit(main())
