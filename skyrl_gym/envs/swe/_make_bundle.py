"""Build the bundled task data from ``pocketlib_src/``: ``data/pocketlib.bundle`` and
``data/tasks.jsonl``. Reproducible (fixed identities and dates give the same commit hashes)::

    python -m skyrl_gym.envs.swe._make_bundle [--out DIR]

The tree in ``pocketlib_src/`` is the fixed library; ``pocketlib_src/tasks_spec.py`` lists the
bugs and the tests of each fix. The first commit has every bug and none of the tasks' tests;
each task then commits its fix and its tests. ``FAIL_TO_PASS`` and ``PASS_TO_PASS`` are not
written by hand: they come from running pytest on each base commit with the ``test_patch``,
before and after the gold patch (as SWE-bench validates its instances), and the script fails
if a task's named tests do not fail before and pass after.
"""

from __future__ import annotations

import argparse
import ast
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from skyrl_gym.envs.swe._repo import git
from skyrl_gym.envs.swe.log_parsers import parse_pytest_log
from skyrl_gym.envs.swe.patches import files_under_test

SRC = Path(__file__).parent / "pocketlib_src"
DATA = Path(__file__).parent / "data"
REPO = "pocketlib/pocketlib"
SKIP = {"tasks_spec.py", "__pycache__", ".pytest_cache"}


def _load_spec() -> list[dict]:
    spec = importlib.util.spec_from_file_location("_pocketlib_tasks_spec", SRC / "tasks_spec.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module.TASKS


def _final_tree() -> dict[str, str]:
    files = {}
    for path in sorted(SRC.rglob("*")):
        rel = path.relative_to(SRC)
        if path.is_file() and not (set(rel.parts) & SKIP) and path.suffix != ".pyc":
            files[rel.as_posix()] = path.read_text()
    return files


def _without_functions(text: str, names: set[str]) -> str:
    """``text`` without the top-level functions ``names`` (and the blank lines before each)."""
    if not names:
        return text
    lines = text.splitlines(keepends=True)
    drop: set[int] = set()
    found = set()
    for node in ast.parse(text).body:
        if isinstance(node, ast.FunctionDef) and node.name in names:
            found.add(node.name)
            first = min([node.lineno] + [d.lineno for d in node.decorator_list]) - 1
            while first > 0 and not lines[first - 1].strip():
                first -= 1
            drop.update(range(first, node.end_lineno))
    missing = names - found
    if missing:
        raise SystemExit(f"tasks_spec names tests that do not exist: {sorted(missing)}")
    return "".join(line for i, line in enumerate(lines) if i not in drop)


def _tree_at(final: dict[str, str], tasks: list[dict], fixed: int, tested: int) -> dict[str, str]:
    """The tree with the first ``fixed`` fixes and the first ``tested`` tasks' tests."""
    tree = dict(final)
    for n, task in enumerate(tasks):
        if n >= fixed:
            for path, good, bad in task["fix"]:
                if tree[path].count(good) != 1:
                    raise SystemExit(f"task {task['name']}: fixed text must occur once in {path}")
                tree[path] = tree[path].replace(good, bad)
    hidden: dict[str, set[str]] = {}
    for task in tasks[tested:]:
        for path, names in task["tests"].items():
            hidden.setdefault(path, set()).update(names)
    for path, names in hidden.items():
        tree[path] = _without_functions(tree[path], names)
    return tree


def _write(work: Path, tree: dict[str, str]) -> None:
    for path, text in tree.items():
        target = work / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)


def _run_tests(work: Path, files: list[str]) -> dict[str, str]:
    env = {**os.environ, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1", "PYTHONDONTWRITEBYTECODE": "1"}
    env["PYTHONPATH"] = str(work)
    proc = subprocess.run(
        [sys.executable, "-P", "-m", "pytest", "-rA", "-p", "no:cacheprovider", *files],
        cwd=work,
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    return parse_pytest_log(proc.stdout)


def _check(work: Path, base: str, task: dict, patch: str, test_patch: str) -> tuple[list[str], list[str]]:
    """FAIL_TO_PASS and PASS_TO_PASS of one task, by running its tests."""
    files = files_under_test(test_patch)
    with tempfile.TemporaryDirectory() as tmp:
        git("worktree", "add", "-q", "--detach", tmp, base, cwd=work)
        try:
            git("apply", "-", cwd=tmp, input=test_patch.encode())
            before = _run_tests(Path(tmp), files)
            git("apply", "-", cwd=tmp, input=patch.encode())
            after = _run_tests(Path(tmp), files)
        finally:
            git("worktree", "remove", "--force", tmp, cwd=work)
    f2p = sorted(t for t, s in after.items() if s == "PASSED" and before.get(t) != "PASSED")
    p2p = sorted(t for t, s in after.items() if s == "PASSED" and before.get(t) == "PASSED")
    failing = sorted(t for t, s in after.items() if s != "PASSED")
    named = {f"{path}::{name}" for path, names in task["tests"].items() for name in names}
    if failing or not named <= set(f2p):
        raise SystemExit(f"task {task['name']}: after the fix failing={failing}; F2P={f2p}; expected {named}")
    return f2p, p2p


def build(out: Path) -> list[dict]:
    """Write ``pocketlib.bundle`` and ``tasks.jsonl`` into ``out``; return the rows."""
    tasks = _load_spec()
    final = _final_tree()
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    with tempfile.TemporaryDirectory(prefix="pocketlib-") as tmp:
        work = Path(tmp) / "pocketlib"
        work.mkdir()
        git("init", "-q", "-b", "main", cwd=work)
        _write(work, _tree_at(final, tasks, 0, 0))
        git("add", "-A", cwd=work)
        git("commit", "-q", "-m", "pocketlib 0.1.0", cwd=work)
        first = git("rev-parse", "HEAD", cwd=work).decode().strip()
        for n, task in enumerate(tasks):
            base = git("rev-parse", "HEAD", cwd=work).decode().strip()
            _write(work, _tree_at(final, tasks, n + 1, n))
            patch = git("diff", cwd=work).decode()
            git("add", "-A", cwd=work)
            _write(work, _tree_at(final, tasks, n + 1, n + 1))
            test_patch = git("diff", cwd=work).decode()
            git("add", "-A", cwd=work)
            title = task["problem_statement"].splitlines()[0]
            git("commit", "-q", "-m", f"Fix: {title}", cwd=work)
            f2p, p2p = _check(work, base, task, patch, test_patch)
            rows.append(
                {
                    "instance_id": f"pocketlib__pocketlib-{n + 1}",
                    "repo": REPO,
                    "base_commit": base,
                    "problem_statement": task["problem_statement"],
                    "hints_text": "",
                    "created_at": f"2026-01-{n + 1:02d}T00:00:00Z",
                    "patch": patch,
                    "test_patch": test_patch,
                    "version": "0.1",
                    "FAIL_TO_PASS": json.dumps(f2p),
                    "PASS_TO_PASS": json.dumps(p2p),
                    "environment_setup_commit": first,
                    "repo_path": "pocketlib.bundle",
                }
            )
            print(
                f"{rows[-1]['instance_id']} {task['name']}: base {base[:10]}, {len(f2p)} F2P, {len(p2p)} P2P"
            )
        bundle = out / "pocketlib.bundle"
        if bundle.exists():
            bundle.unlink()
        git("-c", "pack.threads=1", "bundle", "create", "-q", str(bundle), "HEAD", "main", cwd=work)
    with open(out / "tasks.jsonl", "w") as f:
        for row in rows:
            f.write(json.dumps(row) + "\n")
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=DATA, help="output folder (default: the package data)")
    args = parser.parse_args(argv)
    build(args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
