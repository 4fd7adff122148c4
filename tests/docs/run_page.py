"""Run one page's blocks the way the docs test does and show their output.

    python tests/docs/run_page.py docs/tutorials/02-tools.md [--keep]

Handy while writing a page: the output shows whether the comments next to ``print`` calls
still tell the truth. ``--keep`` leaves the scratch directory in place and prints its path.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.docs._markdown import REPO, parse_page  # noqa: E402
from tests.docs.test_docs_execute import _blocks, _scratch, run_blocks  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("page", help="a markdown file, relative to the repository root")
    ap.add_argument("--keep", action="store_true", help="keep the scratch directory")
    args = ap.parse_args(argv)
    page = parse_page((REPO / args.page).resolve())
    tmp = Path(tempfile.mkdtemp(prefix="docs-page-"))
    try:
        print(run_blocks(page.path, _blocks(page), _scratch(tmp)))
    finally:
        if args.keep:
            print(f"scratch directory: {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
