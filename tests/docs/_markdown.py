"""Reading the docs: pages, their fenced code blocks with run markers, and their links.

The markers are words after the language in a fence's info string (see docs/README.md):

- ```` ```python ````: runs (each page's blocks in order, in one namespace, in a scratch dir).
- ```` ```python slow ```` / ```` ```python docker ````: runs; the page's test is marked
  ``slow`` / ``docker``.
- ```` ```python skip: needs a CUDA GPU ````: never runs; listed as skipped with its reason.
  Its imports are still checked.
- ```` ```bash run ````: runs in ``bash -euo pipefail``; plain ```` ```bash ```` is shown only.
- ``timeout=N``: seconds for that block (default 90, 600 for ``slow`` blocks).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

#: Python and bash blocks take markers; other languages are shown only.
RUNNABLE = ("python", "bash")
_KNOWN_MARKERS = {"run", "slow", "docker"}
_OPEN = re.compile(r"^(?P<indent> {0,3})(?P<fence>`{3,}|~{3,})(?P<info>.*)$")
_LINK = re.compile(r"(?<!!)\[(?:[^\]\[]|\[[^\]]*\])*\]\((?P<target>[^)\s]+)(?:\s+\"[^\"]*\")?\)")
_IMAGE = re.compile(r"!\[[^\]]*\]\((?P<target>[^)\s]+)\)")
_INLINE_CODE = re.compile(r"(`+)(?:(?!\1).)+?\1")


class MarkerError(ValueError):
    """A fence's info string that the docs test cannot read."""


@dataclass(frozen=True)
class Block:
    """One fenced code block of a page."""

    page: str
    """Path of the page, relative to the repository root."""
    line: int
    """Line of the opening fence (1-based)."""
    lang: str
    """The first word of the info string (``python``, ``bash``, ...)."""
    code: str
    """The block's text."""
    markers: frozenset[str] = frozenset()
    """Words after the language: ``run``, ``slow``, ``docker``."""
    skip_reason: str | None = None
    """Why the block never runs (``skip: <reason>``), else None."""
    timeout_s: float | None = None
    """``timeout=N`` when given."""

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"

    @property
    def runs(self) -> bool:
        """True when the docs test executes this block."""
        if self.skip_reason is not None:
            return False
        if self.lang == "python":
            return True
        return self.lang == "bash" and "run" in self.markers

    @property
    def timeout(self) -> float:
        if self.timeout_s is not None:
            return self.timeout_s
        return 600.0 if "slow" in self.markers else 90.0


@dataclass
class Page:
    """A markdown page: its blocks and the links of its prose."""

    path: str
    blocks: list[Block] = field(default_factory=list)
    links: list[tuple[int, str]] = field(default_factory=list)
    """(line, target) of every link and image outside code."""

    @property
    def runnable(self) -> list[Block]:
        return [b for b in self.blocks if b.runs]

    @property
    def markers(self) -> set[str]:
        """The union of the markers of the blocks that run."""
        return set().union(*(b.markers for b in self.runnable)) if self.runnable else set()


def parse_info(info: str, where: str) -> tuple[str, frozenset[str], str | None, float | None]:
    """Split an info string into language, markers, skip reason and timeout."""
    info = info.strip()
    if not info:
        return "", frozenset(), None, None
    lang, _, rest = info.partition(" ")
    lang = lang.lower()
    if lang not in RUNNABLE:
        return lang, frozenset(), None, None
    skip = None
    if "skip:" in rest:
        rest, _, skip = rest.partition("skip:")
        skip = skip.strip()
        if not skip:
            raise MarkerError(f"{where}: 'skip:' needs a reason, e.g. ```python skip: needs a CUDA GPU")
    elif re.search(r"\bskip\b", rest):
        raise MarkerError(f"{where}: write 'skip: <reason>' (with a colon and a reason)")
    markers, timeout = set(), None
    for word in rest.split():
        if word.startswith("timeout="):
            try:
                timeout = float(word.split("=", 1)[1])
            except ValueError:
                raise MarkerError(f"{where}: timeout=N takes seconds, got {word!r}") from None
        elif word in _KNOWN_MARKERS:
            markers.add(word)
        else:
            raise MarkerError(
                f"{where}: unknown marker {word!r} in ```{info}; known: {sorted(_KNOWN_MARKERS)}, "
                "timeout=N, skip: <reason>"
            )
    if lang == "python" and "run" in markers:
        raise MarkerError(f"{where}: python blocks always run; 'run' is for bash blocks")
    return lang, frozenset(markers), skip, timeout


def parse_page(path: Path, root: Path = REPO) -> Page:
    """Read a markdown file (CommonMark fences: ``` or ~~~, closed by the same or a longer run)."""
    rel = path.resolve().relative_to(root.resolve()).as_posix()
    page = Page(rel)
    lines = path.read_text(encoding="utf-8").splitlines()
    i = 0
    while i < len(lines):
        m = _OPEN.match(lines[i])
        if m and not (m["fence"][0] == "`" and "`" in m["info"]):
            fence, indent, start = m["fence"], len(m["indent"]), i
            lang, markers, skip, timeout = parse_info(m["info"], f"{rel}:{i + 1}")
            body = []
            i += 1
            closer = re.compile(rf"^ {{0,3}}{re.escape(fence[0])}{{{len(fence)},}}\s*$")
            while i < len(lines) and not closer.match(lines[i]):
                line = lines[i]
                body.append(line[indent:] if line[:indent].strip() == "" else line.lstrip())
                i += 1
            page.blocks.append(Block(rel, start + 1, lang, "\n".join(body) + "\n", markers, skip, timeout))
            i += 1
            continue
        prose = _INLINE_CODE.sub("", lines[i])
        for rx in (_LINK, _IMAGE):
            page.links.extend((i + 1, mt["target"]) for mt in rx.finditer(prose))
        i += 1
    return page


def doc_pages() -> list[Path]:
    """Every page the docs test reads: README.md, docs/**/*.md, examples/**/README.md and
    results/**/*.md."""
    pages = [REPO / "README.md"]
    pages += sorted((REPO / "docs").rglob("*.md"))
    pages += sorted((REPO / "examples").rglob("README.md"))
    pages += sorted((REPO / "results").rglob("*.md"))
    return [p for p in pages if p.is_file()]


def example_after(page: str, heading: str) -> Block:
    """The first python block of ``page`` (relative to the repository root) after the first line
    that contains ``heading``; a test runs it with ``exec(compile(block.code, block.where,
    "exec"), scope)`` and checks what it printed or left in ``scope``."""
    path = REPO / page
    lines = path.read_text(encoding="utf-8").splitlines()
    at = next((n for n, line in enumerate(lines, 1) if heading in line), None)
    if at is None:
        raise LookupError(f"{page}: no line contains {heading!r}")
    block = next((b for b in parse_page(path).blocks if b.line > at and b.lang == "python"), None)
    if block is None:
        raise LookupError(f"{page}: no python block after {heading!r} (line {at})")
    return block
