"""Every code block of the docs runs: README.md, docs/**/*.md and each recipe's README.

Each page's runnable blocks (```` ```python ```` and ```` ```bash run ````, see docs/README.md
for the markers) run in order, in one namespace, in a fresh process started in a scratch
directory that links ``examples/``, ``docs/``, ``scripts/`` and ``bench/`` from this checkout (so
commands read as if typed at the repository root, and what they write stays in the scratch
directory). No connection may leave the machine. Blocks marked ``skip: <reason>`` become skipped
tests with their reason, so ``pytest -ra`` lists them.
"""

from __future__ import annotations

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

PAGES = [parse_page(p) for p in doc_pages()]


def _blocks(page) -> list[Block]:
    """The blocks of ``page`` that run."""
    return [b for b in page.blocks if b.runs]


def _units() -> list[tuple[str, list[Block]]]:
    """What runs in one process: a page's blocks that run."""
    return [(page.path, blocks) for page in PAGES if (blocks := _blocks(page))]


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
    return [pytest.param(b, id=b.where) for p in PAGES for b in p.blocks if b.skip_reason is not None]


@pytest.mark.parametrize("block", _skipped())
def test_skipped_block(block):
    """One skipped test per ``skip:`` block, so the run lists what the docs do not execute."""
    pytest.skip(f"{block.where}: {block.skip_reason}")
