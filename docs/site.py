"""Build the docs site (MkDocs, Material theme) from the repository's Markdown pages.

    python docs/site.py              # stage the pages, then `mkdocs build --strict` into build/site
    python docs/site.py --serve      # stage, then `mkdocs serve` on 127.0.0.1:8000
    python docs/site.py --stage-only # only write build/site-src (what mkdocs.yml reads)

The pages stay where a reader of the repository finds them (``README.md``, ``docs/``,
``examples/*/README.md``, ``results/``); this script copies them into ``build/site-src`` with
the same relative paths, so every relative link that works on the repository works on the site.
The repository's ``README.md`` is the home page. A file a page links to that is not a page (a flags file, a
measurement, a script) is copied too and served as it is. The API reference is one page per
package (``docs/api/<package>.md``), whose ``::: package`` line mkdocstrings renders from the
docstrings of the package and its public submodules.

``--strict`` turns every MkDocs warning into an error: a link to a file that does not exist, an
anchor that no heading makes, a name mkdocstrings cannot find. ``tests/docs/test_site.py``
builds the site this way and checks it in headless Chromium.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
STAGE = REPO / "build" / "site-src"
SITE = REPO / "build" / "site"

_LINK = re.compile(r"\]\(([^)\s]+)\)")
#: A fence's info string with the docs tests' markers after the language (see docs/README.md).
_FENCE = re.compile(r"^(\s*```+)([\w+-]+)[ \t]+[^\n`]*$", re.MULTILINE)


def site_text(text: str) -> str:
    """A page as the site renders it: fences keep their language and lose the docs tests'
    markers (```` ```bash run slow ```` becomes ```` ```bash ````), which Markdown would
    otherwise not read as a fence."""
    return _FENCE.sub(r"\1\2", text)


def pages() -> list[Path]:
    """The Markdown pages of the site, as paths relative to the repository."""
    found = [Path("README.md"), Path("CHANGELOG.md")]
    found += sorted(p.relative_to(REPO) for p in (REPO / "docs").rglob("*.md"))
    found += sorted(p.relative_to(REPO) for p in (REPO / "examples").glob("*/README.md"))
    found += sorted(p.relative_to(REPO) for p in (REPO / "results").rglob("*.md"))
    return found


def linked_files(page: Path) -> set[Path]:
    """Files (not pages, not folders) that ``page`` links to, relative to the repository."""
    out = set()
    text = (REPO / page).read_text()
    for target in _LINK.findall(text):
        if "://" in target or target.startswith(("#", "mailto:")):
            continue
        path = (REPO / page.parent / target.split("#")[0]).resolve()
        if path.is_file() and path.suffix != ".md" and path.is_relative_to(REPO):
            out.add(path.relative_to(REPO))
    return out


def stage(dest: Path = STAGE) -> list[Path]:
    """Write the site's sources into ``dest`` (emptied first); returns the pages staged."""
    if dest.exists():
        shutil.rmtree(dest)
    staged = pages()
    assets: set[Path] = set()
    for page in staged:
        (dest / page).parent.mkdir(parents=True, exist_ok=True)
        (dest / page).write_text(site_text((REPO / page).read_text()))
        assets |= linked_files(page)
    for image in (REPO / "docs").rglob("*.png"):
        assets.add(image.relative_to(REPO))
    for asset in assets:
        (dest / asset).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / asset, dest / asset)
    return staged


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--serve", action="store_true", help="serve on 127.0.0.1:8000 instead of building")
    mode.add_argument("--stage-only", action="store_true", help=f"only write {STAGE.relative_to(REPO)}")
    args = parser.parse_args(argv)
    stage()
    if args.stage_only:
        return 0
    mkdocs = [sys.executable, "-m", "mkdocs"]
    if args.serve:
        cmd = [*mkdocs, "serve", "--dev-addr", "127.0.0.1:8000"]
    else:
        cmd = [*mkdocs, "build", "--strict", "--site-dir", str(SITE)]
    return subprocess.call(cmd, cwd=REPO)


if __name__ == "__main__":
    sys.exit(main())
