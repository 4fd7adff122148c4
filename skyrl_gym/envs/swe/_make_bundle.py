"""Build the bundled task data: one git bundle per bundled repository (``data/<name>.bundle``)
and ``data/tasks.jsonl`` with every task. Reproducible (fixed identities and dates give the same
commit hashes)::

    python -m skyrl_gym.envs.swe._make_bundle [--out DIR]

Three repositories of different shapes, each from a folder ``<name>_src/``:

- ``pocketlib``: one package, pytest tests; graded with pytest on the test files.
- ``ledgerlite``: ``unittest`` test classes run by ``tox`` (``python -m unittest discover``);
  graded with that command and SWE-bench's unittest-format parser (the one it uses for Django).
- ``gridkit``: two packages in one repository (``packages/*/src``, ``packages/*/tests``, one
  depending on the other); graded with pytest over both packages' suites.

``data/swesmith.jsonl`` holds rows in SWE-smith's shape: bugs (a folder's ``swesmith_spec.py``)
put into the last commit of its bundle, judged by the whole suite (``--swesmith-only`` writes
just that file).

Each folder's tree is the fixed project; its ``tasks_spec.py`` lists the bugs and the tests of
each fix. The first commit has every bug and none of the tasks' tests; each task then commits its
fix and its tests. ``FAIL_TO_PASS`` and ``PASS_TO_PASS`` are not written by hand: they come from
running the tests on each base commit with the ``test_patch``, before and after the gold patch
(as SWE-bench validates its instances), and the script fails if a task's named tests do not
fail before and pass after.
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from skyrl_gym.envs.swe._repo import git
from skyrl_gym.envs.swe.log_parsers import get_log_parser, parse_pytest_log
from skyrl_gym.envs.swe.patches import files_under_test

HERE = Path(__file__).parent
DATA = HERE / "data"
SKIP = {"tasks_spec.py", "swesmith_spec.py", "__pycache__", ".pytest_cache"}


@dataclass(frozen=True)
class Project:
    """One bundled repository and how its tests run."""

    name: str
    repo: str
    version: str
    month: int
    """``created_at`` of its tasks: 2026-<month>-<task number>."""
    test_cmd: str = ""
    """The rows' ``test_cmd``; empty: pytest on the test files of each ``test_patch``."""
    log_parser: str = "pytest"
    unittest: bool = False
    """Tests are ``Class.method`` of ``unittest`` classes (ids ``method (module.Class.method)``)."""

    @property
    def src(self) -> Path:
        return HERE / f"{self.name}_src"

    def test_id(self, path: str, name: str) -> str:
        if self.unittest:
            return f"{name.rsplit('.', 1)[1]} ({path[: -len('.py')].replace('/', '.')}.{name})"
        return f"{path}::{name}"


PROJECTS = (
    Project("pocketlib", "pocketlib/pocketlib", "0.1", 1),
    Project(
        "ledgerlite",
        "ledgerlite/ledgerlite",
        "0.3",
        2,
        test_cmd="python3 -m unittest discover -v -s tests -t .",
        log_parser="swebench:parse_log_django",
        unittest=True,
    ),
    Project(
        "gridkit",
        "gridkit/gridkit",
        "1.2",
        3,
        test_cmd=(
            "PYTHONPATH=packages/gridcore/src:packages/gridpath/src:$PYTHONPATH python3 -P -m pytest -rA "
            "--tb=short -p no:cacheprovider packages/gridcore/tests packages/gridpath/tests"
        ),
    ),
)


def _load_spec(project: Project) -> list[dict]:
    where = project.src / "tasks_spec.py"
    spec = importlib.util.spec_from_file_location(f"_{project.name}_tasks_spec", where)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module.TASKS


def _final_tree(project: Project) -> dict[str, str]:
    files = {}
    for path in sorted(project.src.rglob("*")):
        rel = path.relative_to(project.src)
        if path.is_file() and not (set(rel.parts) & SKIP) and path.suffix != ".pyc":
            files[rel.as_posix()] = path.read_text()
    return files


def _without_functions(text: str, names: set[str]) -> str:
    """``text`` without the top-level functions ``names``, or methods ``Class.method`` (and the
    blank lines before each)."""
    if not names:
        return text
    lines = text.splitlines(keepends=True)
    drop: set[int] = set()
    found = set()

    def visit(body: list[ast.stmt], prefix: str) -> None:
        for node in body:
            if isinstance(node, ast.ClassDef) and not prefix:
                visit(node.body, f"{node.name}.")
            elif isinstance(node, ast.FunctionDef) and f"{prefix}{node.name}" in names:
                found.add(f"{prefix}{node.name}")
                first = min([node.lineno] + [d.lineno for d in node.decorator_list]) - 1
                while first > 0 and not lines[first - 1].strip():
                    first -= 1
                drop.update(range(first, node.end_lineno))

    visit(ast.parse(text).body, "")
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


def _run_tests(work: Path, project: Project, files: list[str]) -> dict[str, str]:
    env = {**os.environ, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1", "PYTHONDONTWRITEBYTECODE": "1"}
    env["PYTHONPATH"] = str(work)
    # `python3` of a test command is this interpreter (it has pytest), as the sandboxes' is theirs
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    if project.test_cmd:
        argv = ["bash", "-c", project.test_cmd]
    else:
        argv = [sys.executable, "-P", "-m", "pytest", "-rA", "-p", "no:cacheprovider", *files]
    proc = subprocess.run(argv, cwd=work, capture_output=True, text=True, env=env, timeout=300)
    log = proc.stdout + proc.stderr
    return (
        parse_pytest_log(log) if project.log_parser == "pytest" else get_log_parser(project.log_parser)(log)
    )


def _check(
    work: Path, project: Project, base: str, task: dict, patch: str, test_patch: str
) -> tuple[list[str], list[str]]:
    """FAIL_TO_PASS and PASS_TO_PASS of one task, by running its tests."""
    files = files_under_test(test_patch)
    with tempfile.TemporaryDirectory() as tmp:
        git("worktree", "add", "-q", "--detach", tmp, base, cwd=work)
        try:
            git("apply", "-", cwd=tmp, input=test_patch.encode())
            before = _run_tests(Path(tmp), project, files)
            git("apply", "-", cwd=tmp, input=patch.encode())
            after = _run_tests(Path(tmp), project, files)
        finally:
            git("worktree", "remove", "--force", tmp, cwd=work)
    f2p = sorted(t for t, s in after.items() if s == "PASSED" and before.get(t) != "PASSED")
    p2p = sorted(t for t, s in after.items() if s == "PASSED" and before.get(t) == "PASSED")
    failing = sorted(t for t, s in after.items() if s != "PASSED")
    named = {project.test_id(path, name) for path, names in task["tests"].items() for name in names}
    if failing or not named <= set(f2p):
        raise SystemExit(f"task {task['name']}: after the fix failing={failing}; F2P={f2p}; expected {named}")
    return f2p, p2p


def build_project(project: Project, out: Path) -> list[dict]:
    """Write ``<name>.bundle`` of ``project`` into ``out``; return its task rows."""
    tasks = _load_spec(project)
    final = _final_tree(project)
    rows = []
    with tempfile.TemporaryDirectory(prefix=f"{project.name}-") as tmp:
        work = Path(tmp) / project.name
        work.mkdir()
        git("init", "-q", "-b", "main", cwd=work)
        _write(work, _tree_at(final, tasks, 0, 0))
        git("add", "-A", cwd=work)
        git("commit", "-q", "-m", f"{project.name} {project.version}.0", cwd=work)
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
            f2p, p2p = _check(work, project, base, task, patch, test_patch)
            row = {
                "instance_id": f"{project.repo.replace('/', '__')}-{n + 1}",
                "repo": project.repo,
                "base_commit": base,
                "problem_statement": task["problem_statement"],
                "hints_text": "",
                "created_at": f"2026-{project.month:02d}-{n + 1:02d}T00:00:00Z",
                "patch": patch,
                "test_patch": test_patch,
                "version": project.version,
                "FAIL_TO_PASS": json.dumps(f2p),
                "PASS_TO_PASS": json.dumps(p2p),
                "environment_setup_commit": first,
                "repo_path": f"{project.name}.bundle",
            }
            if project.test_cmd:
                row["test_cmd"] = project.test_cmd
            if project.log_parser != "pytest":
                row["log_parser"] = project.log_parser
            rows.append(row)
            print(f"{row['instance_id']} {task['name']}: base {base[:10]}, {len(f2p)} F2P, {len(p2p)} P2P")
        bundle = out / f"{project.name}.bundle"
        if bundle.exists():
            bundle.unlink()
        git("-c", "pack.threads=1", "bundle", "create", "-q", str(bundle), "HEAD", "main", cwd=work)
    return rows


def build_swesmith(project: Project, data: Path) -> list[dict]:
    """SWE-smith rows for ``project`` (from its ``swesmith_spec.py``): each bug is applied to the
    last commit of ``data/<name>.bundle``; its tests are the whole suite, run with and without it."""
    where = project.src / "swesmith_spec.py"
    spec = importlib.util.spec_from_file_location(f"_{project.name}_swesmith_spec", where)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    owner, name = project.repo.split("/")
    rows = []
    with tempfile.TemporaryDirectory(prefix=f"{project.name}-smith-") as tmp:
        work = Path(tmp) / project.name
        git("clone", "-q", str(data / f"{project.name}.bundle"), str(work))
        head = git("rev-parse", "HEAD", cwd=work).decode().strip()
        clean = _run_tests(work, project, [])
        if not clean or any(s != "PASSED" for s in clean.values()):
            raise SystemExit(
                f"{project.name} at {head[:10]}: the suite must pass before a bug goes in: {clean}"
            )
        for bug in module.BUGS:
            for path, good, bad in bug["bug"]:
                text = (work / path).read_text()
                if text.count(good) != 1:
                    raise SystemExit(f"swesmith_spec: the good text must occur once in {path}: {good!r}")
                (work / path).write_text(text.replace(good, bad))
            patch = git("diff", cwd=work).decode()
            broken = _run_tests(work, project, [])
            git("checkout", "--", ".", cwd=work)
            f2p = sorted(t for t in clean if broken.get(t) != "PASSED")
            p2p = sorted(t for t in clean if broken.get(t) == "PASSED")
            if not f2p:
                raise SystemExit(f"swesmith_spec: a bug in {[b[0] for b in bug['bug']]} breaks no test")
            mirror = f"{owner}__{name}.{head[:8]}"
            digest = hashlib.sha256(patch.encode()).hexdigest()[:8]
            rows.append(
                {
                    "instance_id": f"{mirror}.{bug['kind']}__{digest}",
                    "repo": f"swesmith/{mirror}",
                    "patch": patch,
                    "FAIL_TO_PASS": f2p,
                    "PASS_TO_PASS": p2p,
                    "image_name": f"swesmith.x86_64.{owner}_1776_{name}.{head[:8]}",
                    "problem_statement": bug["problem_statement"],
                }
            )
            print(f"{rows[-1]['instance_id']}: {len(f2p)} F2P, {len(p2p)} P2P")
    return rows


def write_swesmith(out: Path) -> list[dict]:
    """Write ``swesmith.jsonl`` (the rows of every project with a ``swesmith_spec.py``)."""
    rows = [row for p in PROJECTS if (p.src / "swesmith_spec.py").exists() for row in build_swesmith(p, out)]
    with open(out / "swesmith.jsonl", "w") as f:
        for row in rows:
            f.write(json.dumps(row) + "\n")
    return rows


def build(out: Path) -> list[dict]:
    """Write every project's bundle and ``tasks.jsonl`` (all tasks) into ``out``; return the rows."""
    out.mkdir(parents=True, exist_ok=True)
    rows = [row for project in PROJECTS for row in build_project(project, out)]
    with open(out / "tasks.jsonl", "w") as f:
        for row in rows:
            f.write(json.dumps(row) + "\n")
    write_swesmith(out)
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=DATA, help="output folder (default: the package data)")
    parser.add_argument(
        "--swesmith-only", action="store_true", help="only write swesmith.jsonl from the bundles there"
    )
    args = parser.parse_args(argv)
    if args.swesmith_only:
        write_swesmith(args.out)
    else:
        build(args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
