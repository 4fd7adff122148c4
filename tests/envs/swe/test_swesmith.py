"""SWE-smith rows (their published columns, a bug put into a passing repository) load unchanged,
start the agent from the broken tree without the tests that judge it, and grade as SWE-bench
rows do; the gold fix is the reverse of the row's patch."""

from __future__ import annotations

import json
import subprocess

import pytest

import skyrl_gym
from skyrl_gym.envs.swe import SWEEnvConfig, grade_patch
from skyrl_gym.envs.swe.cli import main
from skyrl_gym.envs.swe.instances import (
    BUNDLED_DIR,
    BUNDLED_SWESMITH,
    bundled_swesmith_instances,
    instance_from_row,
    load_instances,
)
from skyrl_gym.envs.swe.patches import reverse_patch
from skyrl_gym.errors import ConfigError

#: SWE-smith's published columns (the HF dataset's features), nothing else.
SMITH_COLUMNS = {
    "instance_id",
    "repo",
    "patch",
    "FAIL_TO_PASS",
    "PASS_TO_PASS",
    "image_name",
    "problem_statement",
}


def rows() -> list[dict]:
    return [json.loads(line) for line in BUNDLED_SWESMITH.read_text().splitlines()]


def call(name: str, **arguments) -> str:
    return f"<tool_call>{json.dumps({'name': name, 'arguments': arguments})}</tool_call>"


def test_rows_have_only_swesmiths_columns_and_load_unchanged():
    for row in rows():
        assert set(row) == SMITH_COLUMNS
        assert isinstance(row["FAIL_TO_PASS"], list) and row["FAIL_TO_PASS"]
    for inst, row in zip(load_instances(BUNDLED_SWESMITH), rows(), strict=True):
        assert inst.bug_patch == row["patch"] and inst.test_patch == ""
        assert inst.base_commit == row["repo"].rsplit(".", 1)[1]  # the mirror's commit
        assert inst.patch == reverse_patch(row["patch"]) and inst.patch != row["patch"]
        assert inst.extra == {"image_name": row["image_name"]}
        back = inst.to_row()
        assert back == {**row, "base_commit": inst.base_commit}  # SWE-smith's shape again
        assert instance_from_row(back) == inst


def test_json_encoded_lists_and_an_explicit_base_commit():
    row = dict(rows()[0], FAIL_TO_PASS=json.dumps(rows()[0]["FAIL_TO_PASS"]), base_commit="HEAD")
    inst = instance_from_row(row)
    assert inst.FAIL_TO_PASS == tuple(rows()[0]["FAIL_TO_PASS"]) and inst.base_commit == "HEAD"


@pytest.mark.parametrize(
    ("change", "words"),
    [
        (
            {"repo": "pocketlib/pocketlib", "image_name": "x"},
            ["base_commit", "swesmith/<owner>__<name>.<commit>"],
        ),
        ({"FAIL_TO_PASS": []}, ["FAIL_TO_PASS is empty"]),
        ({"patch": ""}, ["patch", "SWE-smith row"]),
        (
            {"patch": "diff --git a/x.bin b/x.bin\nGIT binary patch\nliteral 1\n"},
            ["cannot be reversed", "binary"],
        ),
    ],
)
def test_bad_swesmith_rows_say_what_to_fix(change, words):
    with pytest.raises(ConfigError) as err:
        instance_from_row(dict(rows()[0], **change), where="smith.jsonl row 1")
    assert "smith.jsonl row 1" in str(err.value)
    for word in words:
        assert word in str(err.value)


def test_a_swebench_row_with_an_empty_test_patch_is_still_an_error():
    row = dict(rows()[0], repo="pocketlib/pocketlib", base_commit="HEAD", test_patch="")
    row.pop("image_name")
    with pytest.raises(ConfigError, match="test_patch"):
        instance_from_row(row)


def test_the_repository_is_found_under_the_names_of_a_mirror(tmp_path):
    from skyrl_gym.envs.swe._repo import resolve_repo

    inst = load_instances(BUNDLED_SWESMITH)[0]
    assert resolve_repo(inst, BUNDLED_DIR) == BUNDLED_DIR / "pocketlib.bundle"  # ``name``
    (tmp_path / "pocketlib__pocketlib.bundle").symlink_to(BUNDLED_DIR / "pocketlib.bundle")
    assert resolve_repo(inst, tmp_path) == tmp_path / "pocketlib__pocketlib.bundle"
    with pytest.raises(ConfigError, match="swesmith__pocketlib__pocketlib"):
        resolve_repo(inst, tmp_path / "nowhere")


def test_reverse_patch_undoes_new_deleted_renamed_mode_and_no_newline_changes(tmp_path):
    def git(*args: str, **kw) -> str:
        return subprocess.run(
            ["git", *args], cwd=tmp_path, check=True, capture_output=True, text=True, **kw
        ).stdout

    git("init", "-q")
    (tmp_path / "f.txt").write_text("a\nb\nc\nd\n")
    (tmp_path / "g.txt").write_text("x\ny")
    (tmp_path / "gone.txt").write_text("old\n")
    (tmp_path / "move.txt").write_text("one\ntwo\nthree\nfour\n")
    git("add", "-A")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "1")
    (tmp_path / "f.txt").write_text("a\nB\nB2\nc\n")
    (tmp_path / "f.txt").chmod(0o755)
    (tmp_path / "g.txt").write_text("x\nz")
    (tmp_path / "gone.txt").unlink()
    (tmp_path / "new.txt").write_text("new\n")
    (tmp_path / "move.txt").rename(tmp_path / "moved.txt")
    git("add", "-A")
    bug = git("diff", "--cached", "-M")
    assert "rename from move.txt" in bug and "No newline" in bug and "new mode" in bug
    fix = reverse_patch(bug)
    assert reverse_patch(fix) == bug
    git("apply", "--index", "-", input=fix)
    assert git("status", "--porcelain") == ""  # back at the first commit, index and tree


def test_grading_a_swesmith_row_locally(make_patch):
    config = SWEEnvConfig(sandbox="local")
    inst = bundled_swesmith_instances()[0]  # roman numerals: from_roman("III") == 1
    gold = grade_patch(inst, inst.patch, config=config)
    assert gold.resolved and gold.error is None and gold.counts()["p2p_total"] > 30
    empty = grade_patch(inst, "", config=config)
    assert not empty.resolved and empty.counts()["f2p_passed"] == 0 and empty.error is None
    # the cheat: no fix, and the hidden test file written again with tests that cannot fail
    cheat = "\n".join(
        [
            "diff --git a/tests/test_roman.py b/tests/test_roman.py",
            "new file mode 100644",
            "--- /dev/null",
            "+++ b/tests/test_roman.py",
            "@@ -0,0 +1,4 @@",
            "+def test_from_roman_additive():",
            "+    pass",
            "+def test_round_trip():",
            "+    pass",
            "",
        ]
    )
    forged = grade_patch(inst, cheat, config=config)
    assert not forged.resolved and "tests/test_roman.py" in forged.discarded_files


def test_the_agent_starts_from_the_bug_without_the_judging_tests():
    inst = bundled_swesmith_instances()[0]
    env = skyrl_gym.make("swe", env_config={"sandbox": "local", "max_turns": 4}, extras=inst.to_row())
    with env:
        env.init([])
        seen = env.step(
            call("bash", command="ls tests; grep -c '>= value' pocketlib/roman.py; git status --short")
        )
        text = seen.observations[0]["content"]
        assert "test_versions.py" in text and "test_roman.py" not in text  # F2P's file is hidden
        assert "\n1\n" in text  # the bug is in the tree the agent starts from
        old = "_DIGITS[text[i + 1]] >= value"
        env.step(
            call(
                "str_replace", path="pocketlib/roman.py", old_str=old, new_str="_DIGITS[text[i + 1]] > value"
            )
        )
        out = env.step(call("submit"))
    assert out.done and out.reward == 1.0 and env.report is not None and env.report.resolved


def test_skyrl_swe_check_finds_the_mirror_in_the_data_folder(capsys):
    code = main(["check", str(BUNDLED_SWESMITH), "--repos", str(BUNDLED_DIR), "--sandbox", "local", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0 and len(out) == 2
    assert all(r["ok"] and r["gold_resolved"] and not r["empty_resolved"] for r in out), out


def test_rows_without_a_problem_statement_are_skipped_and_counted_or_refused(tmp_path, capsys):
    """About 40k of SWE-smith's 52k published rows have no problem statement: they must not stop
    a whole file, and they must not pass unnoticed either."""
    published = rows()
    blank = [
        dict(published[0], instance_id="no-statement-1", problem_statement=""),
        dict(published[1], instance_id="no-statement-2", problem_statement=None),
    ]
    missing = {k: v for k, v in published[0].items() if k != "problem_statement"} | {
        "instance_id": "no-statement-3"
    }
    mixed = tmp_path / "mixed.jsonl"
    mixed.write_text("".join(json.dumps(r) + "\n" for r in [*blank, missing, *published]))

    loaded = load_instances(mixed)
    assert [i.instance_id for i in loaded] == [r["instance_id"] for r in published]
    assert loaded.skipped == {
        "rows without a problem statement": ["no-statement-1", "no-statement-2", "no-statement-3"]
    }
    assert loaded.summary().startswith(
        "skipped 3 rows without a problem statement (--require-problem-statement"
    )
    assert load_instances(BUNDLED_SWESMITH).summary() == ""  # nothing left out, nothing said

    with pytest.raises(
        ConfigError, match=r"mixed.jsonl row 1: missing or empty field\(s\) \['problem_statement'\]"
    ):
        load_instances(mixed, without_statement="error")
    only_blank = tmp_path / "blank.jsonl"
    only_blank.write_text("".join(json.dumps(r) + "\n" for r in blank))
    with pytest.raises(ConfigError, match="none of its 2 rows has a problem statement"):
        load_instances(only_blank)

    # the command line says what it skipped, and stops instead when asked to
    predictions = tmp_path / "preds.jsonl"
    predictions.write_text("")
    assert main(["grade", str(mixed), str(predictions), "--sandbox", "local"]) == 0
    assert "skipped 3 rows without a problem statement" in capsys.readouterr().err
    assert main(["grade", str(mixed), str(predictions), "--require-problem-statement"]) != 0
    assert "missing or empty field(s) ['problem_statement']" in capsys.readouterr().err


def test_a_row_whose_base_commit_already_has_the_bug_is_refused_saying_why(tmp_path, monkeypatch):
    """SWE-smith rows written before July 2025 carry base_commit = the mirror's 'Bug Patch'
    commit: applying the row's patch there again is wrong, and must not fail obscurely."""
    from skyrl_gym.envs.swe._repo import RepoSource
    from skyrl_gym.envs.swe.swesmith import start_snapshot

    monkeypatch.setenv("SKYRL_SWE_CACHE", str(tmp_path / "cache"))
    clone = tmp_path / "pocketlib"
    subprocess.run(["git", "clone", "-q", str(BUNDLED_DIR / "pocketlib.bundle"), str(clone)], check=True)

    def git(*args: str, **kw) -> str:
        return subprocess.run(
            ["git", *args], cwd=clone, check=True, capture_output=True, text=True, **kw
        ).stdout

    row = rows()[0]
    git("checkout", "-q", row["repo"].rsplit(".", 1)[1])
    git("apply", "-", input=row["patch"])
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qam", "Bug Patch")
    buggy = git("rev-parse", "HEAD").strip()

    old_style = instance_from_row(dict(row, base_commit=buggy, repo_path=str(clone)))
    with pytest.raises(ConfigError, match=r"already has the row's bug .*before July 2025.*Drop base_commit"):
        start_snapshot(old_style, RepoSource(clone))
    # the same row without base_commit starts from the repo name's clean commit, bug applied
    current = instance_from_row(dict(row, repo_path=str(clone)))
    assert start_snapshot(current, RepoSource(clone)).is_file()
    # a patch that applies neither way keeps the plain message
    unrelated = instance_from_row(
        dict(row, base_commit=buggy, repo_path=str(clone), patch=row["patch"].replace("total", "tot4l"))
    )
    with pytest.raises(ConfigError, match="does not apply at") as err:
        start_snapshot(unrelated, RepoSource(clone))
    assert "July 2025" not in str(err.value)


@pytest.mark.parametrize(
    ("change", "words"),
    [
        (
            {"repo": "swesmith/tornadoweb__tornado.d3c7f3f6"},
            ["tornadoweb/tornado", "unittest", "test_cmd and a log_parser"],
        ),
        ({"repo": "swesmith/python__mypy.e93f06ce"}, ["python/mypy", "-k", "log_parser"]),
        (
            {"repo": "swesmith/gin-gonic__gin.3c12d2a8", "FAIL_TO_PASS": ["TestContextRenderJSON"]},
            ["'TestContextRenderJSON'", "not pytest ids", "gin-gonic/gin", "test_cmd"],
        ),
    ],
)
def test_rows_that_pytest_would_grade_wrong_are_refused_naming_the_repository(change, words):
    with pytest.raises(ConfigError) as err:
        instance_from_row(dict(rows()[0], **change), where="smith.jsonl row 1")
    for word in words:
        assert word in str(err.value)
    # with the user's own test command and parser the row loads
    inst = instance_from_row(dict(rows()[0], **change, test_cmd="go test ./...", log_parser="pytest"))
    assert inst.test_cmd == "go test ./..."


def test_a_mirror_of_a_repository_swebench_knows_gets_swebench_s_parser():
    from skyrl_gym.envs.swe.swesmith import upstream_repo

    row = dict(rows()[0], repo="swesmith/django__django.f8fab6f9", FAIL_TO_PASS=["tests/test_x.py::t"])
    assert upstream_repo(row) == "django/django"
    assert instance_from_row(row).log_parser == "swebench:parse_log_django"
    assert (
        instance_from_row(rows()[0]).log_parser == "pytest"
    )  # pocketlib: SWE-bench has no parser of its own
