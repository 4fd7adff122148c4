"""``python -m integrations.tinker``: the same as ``skyrl tinker serve``."""

import sys

from integrations.tinker.cli import main

sys.exit(main())
