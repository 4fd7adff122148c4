"""What the docs name must exist: imports, relative links, ``skyrl`` verbs, scripts, markers.

These checks cover every block, the skipped ones too (a GPU page still imports real names).
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import re
import shlex
from pathlib import Path

import pytest

from tests.docs._markdown import REPO, MarkerError, doc_pages, parse_info, parse_page

FIRST_PARTY = {"skyrl_gym", "skyrl_agent", "trainers", "integrations", "harbor_adapter"}
PAGES = [parse_page(p) for p in doc_pages()]
PYTHON_BLOCKS = [pytest.param(b, id=b.where) for p in PAGES for b in p.blocks if b.lang == "python"]
BASH_BLOCKS = [pytest.param(b, id=b.where) for p in PAGES for b in p.blocks if b.lang == "bash"]


def _imports(tree: ast.AST) -> list[tuple[str, str | None, int]]:
    """(module, name or None, line) of each absolute import."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(a.name, None, node.lineno) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found += [(node.module, a.name, node.lineno) for a in node.names if a.name != "*"]
    return found


@pytest.mark.parametrize("block", PYTHON_BLOCKS)
def test_python_block_parses_and_its_imports_resolve(block):
    tree = ast.parse(block.code, filename=block.where)  # a SyntaxError names the page and line
    problems = []
    for module, name, line in _imports(tree):
        where = f"{block.page}:{block.line + line}"
        top = module.split(".")[0]
        if top not in FIRST_PARTY:
            if importlib.util.find_spec(top) is None and block.runs:
                problems.append(f"{where}: {module} is not installed")
            continue
        try:
            mod = importlib.import_module(module)
        except ImportError as exc:
            problems.append(f"{where}: import {module} fails: {exc}")
            continue
        if name is not None and not hasattr(mod, name):
            if importlib.util.find_spec(f"{module}.{name}") is None:
                problems.append(f"{where}: {module} has no {name!r}")
    assert not problems, "\n".join(problems)


def _is_external(target: str) -> bool:
    return bool(re.match(r"^[a-z][a-z0-9+.-]*:", target)) or target.startswith("#")


@pytest.mark.parametrize("page", [pytest.param(p, id=p.path) for p in PAGES])
def test_relative_links_point_to_files(page):
    base = (REPO / page.path).parent
    broken = []
    for line, target in page.links:
        if _is_external(target):
            continue
        path = target.split("#", 1)[0]
        if not path:
            continue
        resolved = (base / path).resolve()
        if not resolved.exists():
            broken.append(f"{page.path}:{line}: {target}")
        elif REPO not in resolved.parents and resolved != REPO:
            broken.append(f"{page.path}:{line}: {target} leaves the repository")
    assert not broken, "broken links:\n" + "\n".join(broken)


def _verbs() -> set[str]:
    from skyrl_gym.cli import build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    return set(sub.choices)


@pytest.mark.parametrize("block", BASH_BLOCKS)
def test_bash_block_commands_exist(block):
    """``skyrl VERB`` verbs are installed and ``python path/x.py`` scripts exist in the repository."""
    verbs, problems = _verbs(), []
    for n, raw in enumerate(block.code.splitlines(), 1):
        line = raw.split(" #", 1)[0].strip()
        if not line or line.startswith("#"):
            continue
        try:
            words = shlex.split(line, comments=True)
        except ValueError:
            continue
        for i, word in enumerate(words):
            if word == "skyrl" and i + 1 < len(words) and not words[i + 1].startswith("-"):
                if words[i + 1] not in verbs:
                    problems.append(f"{block.page}:{block.line + n}: no verb 'skyrl {words[i + 1]}'")
            if word in ("python", "python3") and i + 1 < len(words) and words[i + 1].endswith(".py"):
                if not (REPO / words[i + 1]).is_file():
                    problems.append(f"{block.page}:{block.line + n}: no script {words[i + 1]}")
            if word == "bash" and i + 1 < len(words) and words[i + 1].endswith(".sh"):
                if not (REPO / words[i + 1]).is_file():
                    problems.append(f"{block.page}:{block.line + n}: no script {words[i + 1]}")
    assert not problems, "\n".join(problems)


def test_every_docs_page_is_linked_from_an_index():
    """A page nobody links to is a page nobody finds: each docs page (decision records aside) is
    linked from README.md, docs/README.md or another docs page."""
    linked: set[Path] = set()
    for page in PAGES:
        base = (REPO / page.path).parent
        for _, target in page.links:
            if not _is_external(target) and target.split("#", 1)[0]:
                linked.add((base / target.split("#", 1)[0]).resolve())
    orphans = [
        p.path
        for p in PAGES
        if p.path.startswith(("docs/", "examples/"))
        and not p.path.startswith("docs/decisions/")
        and p.path != "docs/README.md"
        and (REPO / p.path).resolve() not in linked
    ]
    assert not orphans, f"pages linked from nowhere (add a link in docs/README.md): {orphans}"


def test_marker_grammar():
    assert parse_info("python", "p:1") == ("python", frozenset(), None, None)
    assert parse_info("python slow docker timeout=20", "p:1") == (
        "python",
        frozenset({"slow", "docker"}),
        None,
        20.0,
    )
    assert parse_info("python skip: needs a CUDA GPU", "p:1")[2] == "needs a CUDA GPU"
    assert parse_info("bash run", "p:1")[1] == {"run"}
    assert parse_info("text whatever", "p:1") == ("text", frozenset(), None, None)
    for bad in ("python skip", "python skip:", "python fast", "python run", "bash timeout=x"):
        with pytest.raises(MarkerError):
            parse_info(bad, "p:1")


def test_fences_with_backticks_in_the_info_string_are_prose(tmp_path):
    page = tmp_path / "page.md"
    page.write_text(
        "```` ```python ```` is inline\n\n````python\nx = '```'\n````\n\n[a](README.md) `[b](nope)`\n"
    )
    parsed = parse_page(page, root=tmp_path)
    assert [(b.lang, b.code) for b in parsed.blocks] == [("python", "x = '```'\n")]
    assert parsed.links == [(7, "README.md")]


SHELL_LANGS = {"bash", "sh", "shell", "console", "zsh"}


def test_every_shell_block_runs_or_says_why_not():
    """A shell block either runs (``bash run``) or carries ``skip: <reason>``: none is shown
    as if it worked while no test runs it."""
    plain = [
        b.where
        for p in PAGES
        for b in p.blocks
        if b.lang in SHELL_LANGS and not b.runs and b.skip_reason is None
    ]
    assert not plain, f"shell blocks with neither 'run' nor 'skip: <reason>' (docs/README.md): {plain}"


def test_every_skipped_block_says_so_above_it():
    """Each block that does not run has ``*Not run by the docs tests: <reason>.*`` above it, with
    the reason of its fence, so a reader of the rendered page sees it."""
    from tests.docs.test_docs_execute import PAGES as EXEC_PAGES

    missing = []
    for page in EXEC_PAGES:
        lines = (REPO / page.path).read_text(encoding="utf-8").splitlines()
        for b in page.blocks:
            if b.skip_reason is None:
                continue
            above = [line for line in lines[: b.line - 1] if line.strip()][-1:]
            if above != [f"*Not run by the docs tests: {b.skip_reason}.*"]:
                missing.append(
                    f"{b.where}: expected '*Not run by the docs tests: {b.skip_reason}.*' above it"
                )
    assert not missing, "\n".join(missing)


@pytest.mark.parametrize("page", ["README.md", "docs/guides/cli.md"])
def test_readme_command_table_lists_every_verb(page):
    """The "Command line" table of README.md and of the command-line guide has a row for each
    installed ``skyrl`` verb."""
    text = (REPO / page).read_text(encoding="utf-8")
    table = text.split("# Command line", 1)[1].split("\n## ", 1)[0]
    listed = set(re.findall(r"^\| `skyrl (\w[\w-]*)", table, flags=re.M))
    missing = sorted(_verbs() - listed)
    assert not missing, f"{page}'s command table lacks: {missing}"
