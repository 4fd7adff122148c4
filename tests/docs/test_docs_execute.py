"""Every code block of the docs runs: README.md, docs/**/*.md and each recipe's README.

Each page's runnable blocks (```` ```python ```` and ```` ```bash run ````, see docs/README.md
for the markers) run in order, in one namespace (README.md: each ``## `` section on its own), in a fresh process started in a scratch
directory that links ``examples/``, ``docs/``, ``scripts/`` and ``bench/`` from this checkout
(so commands read as if typed at the repository root, and what they write stays in the scratch
directory). No connection may leave the machine. Blocks marked ``skip: <reason>`` become skipped
tests with their reason, so ``pytest -ra`` lists them.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.docs._markdown import REPO, Block, doc_pages, parse_page

GUARD = Path(__file__).resolve().parent / "_guard"
RUNNER = Path(__file__).resolve().parent / "_runner.py"
LINKED = ("examples", "docs", "scripts", "bench")

#: README.md's fences carry no markers yet: the marks of its sections, by heading. Every key
#: must still name a section with a python block (checked below), so this table cannot rot.
README_MARKS: dict[str, set[str]] = {
    "## Sandboxes": {"docker", "slow"},
    "## The agent runtime (`skyrl_agent`)": {"slow"},
    "## An OpenAI-compatible server that records trainable trajectories (`skyrl serve`)": {"slow"},
    "## Tinker-compatible API": {"slow"},
    "## SWE repair (`swe`)": {"docker", "slow"},
    "## Harbor tasks": {"docker", "slow"},
}

#: README.md sections that do not run, with the reason (listed as skipped tests). Their imports
#: are still checked. Resize the example and drop the entry.
README_SKIPS: dict[str, str] = {
    "## Train with TRL": (
        "README's TRL example (SmolLM2-135M, 2 steps of 8 three-turn SQL episodes) ran past 11 minutes "
        "on 2 CPU cores; the same path runs at tiny size in docs/tutorials/06-trl.md and examples/trl"
    ),
}

PAGES = [parse_page(p) for p in doc_pages()]


def _readme_sections() -> dict[str, list[int]]:
    """Lines of README.md's Python and ``bash run`` blocks by the ``## `` heading they sit under."""
    sections: dict[str, list[int]] = {}
    heading = ""
    lines = (REPO / "README.md").read_text(encoding="utf-8").splitlines()
    readme = next(p for p in PAGES if p.path == "README.md")
    starts = {b.line for b in readme.blocks if b.lang == "python" or b.runs}
    in_fence = False
    for n, line in enumerate(lines, 1):
        if line.startswith("```") and not line.startswith("````"):
            in_fence = not in_fence
        if not in_fence and line.startswith("## "):
            heading = line.strip()
        if n in starts:
            sections.setdefault(heading, []).append(n)
    return sections


def _all_blocks(page) -> list[Block]:
    """The page's blocks, README.md's with the markers of :data:`README_MARKS` and the skip
    reasons of :data:`README_SKIPS`."""
    if page.path != "README.md":
        return page.blocks
    by_line = {n: h for h, lines in _readme_sections().items() for n in lines}
    out = []
    for b in page.blocks:
        heading = by_line.get(b.line, "")
        b = dataclasses.replace(b, markers=b.markers | README_MARKS.get(heading, set()))
        if heading in README_SKIPS and b.skip_reason is None:
            b = dataclasses.replace(b, skip_reason=README_SKIPS[heading])
        out.append(b)
    return out


def _blocks(page) -> list[Block]:
    """The blocks of ``page`` that run."""
    return [b for b in _all_blocks(page) if b.runs]


def _units() -> list[tuple[str, list[Block]]]:
    """What runs in one process: a page, except README.md, whose ``## `` sections are
    independent examples and run one by one (so a quick section is not held up by a slow one)."""
    units = []
    for page in PAGES:
        blocks = _blocks(page)
        if page.path != "README.md":
            units.append((page.path, blocks))
            continue
        by_line = {n: h for h, lines in _readme_sections().items() for n in lines}
        sections: dict[str, list[Block]] = {}
        for b in blocks:
            sections.setdefault(by_line.get(b.line, ""), []).append(b)
        units += [(f"README.md {h.lstrip('# ')}".strip(), bs) for h, bs in sections.items()]
    return [(name, blocks) for name, blocks in units if blocks]


def _params():
    params = []
    for name, blocks in _units():
        kinds = set().union(*(b.markers for b in blocks)) & {"slow", "docker"}
        marks = [getattr(pytest.mark, m) for m in sorted(kinds)]
        marks.append(pytest.mark.timeout(_budget(blocks) + 30))  # the unit's own budget, not the suite's
        params.append(pytest.param(blocks[0].page, blocks, id=name, marks=marks))
    return params


def _scratch(tmp_path: Path) -> Path:
    for name in LINKED:
        (tmp_path / name).symlink_to(REPO / name, target_is_directory=True)
    return tmp_path


def _env() -> dict[str, str]:
    env = dict(os.environ)
    for key in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "GEMINI_API_KEY", "OPENROUTER_API_KEY"):
        env.pop(key, None)
    env["PYTHONPATH"] = os.pathsep.join([str(GUARD), str(REPO), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    env.update(
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        LITELLM_LOCAL_MODEL_COST_MAP="True",
        TRL_EXPERIMENTAL_SILENCE="1",
        TOKENIZERS_PARALLELISM="false",
        PYTHONUNBUFFERED="1",
    )
    return env


def _budget(blocks: list[Block]) -> float:
    """Seconds a page may take: its blocks' timeouts and a minute for the process around them."""
    return sum(b.timeout for b in blocks) + 60


def run_blocks(page_path: str, blocks: list[Block], cwd: Path) -> str:
    """Run ``blocks`` of one page in a fresh process in ``cwd``; returns its output, fails the test
    with the output when a block fails or the page runs past the sum of its blocks' timeouts."""
    spec = cwd / ".docs-spec.json"
    spec.write_text(
        json.dumps(
            {
                "page": page_path,
                "blocks": [
                    {"lang": b.lang, "code": b.code, "line": b.line, "timeout": b.timeout} for b in blocks
                ],
            }
        )
    )
    budget = _budget(blocks)
    proc = subprocess.Popen(
        [sys.executable, str(RUNNER), str(spec)],
        cwd=cwd,
        env=_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        out, _ = proc.communicate(timeout=budget)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        pytest.fail(f"{page_path} ran past {budget:.0f}s\n{out[-6000:]}")
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    if proc.returncode != 0 or "[docs] page done" not in out:
        pytest.fail(f"{page_path}: a block failed (exit {proc.returncode})\n{out[-8000:]}")
    for b in blocks:
        assert f"[docs] ok {b.where} " in out, f"{b.where} did not report success"
    return out


@pytest.mark.parametrize(("page", "blocks"), _params())
def test_page_blocks_run(page, blocks, tmp_path):
    run_blocks(page, blocks, _scratch(tmp_path))


def _skipped():
    return [pytest.param(b, id=b.where) for p in PAGES for b in _all_blocks(p) if b.skip_reason is not None]


@pytest.mark.parametrize("block", _skipped())
def test_skipped_block(block):
    """One skipped test per ``skip:`` block, so the run lists what the docs do not execute."""
    pytest.skip(f"{block.where}: {block.skip_reason}")


def test_readme_marks_name_existing_sections():
    sections = _readme_sections()
    stale = sorted((set(README_MARKS) | set(README_SKIPS)) - set(sections))
    assert not stale, f"README_MARKS/README_SKIPS name sections without a python block: {stale}"
