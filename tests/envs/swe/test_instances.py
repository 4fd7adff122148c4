"""Loading SWE instances: the formats SWE-bench publishes, repository lookup, clear errors."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest

from skyrl_gym.envs.swe import BUNDLED_TASKS, bundled_instances, instance_from_row, load_instances
from skyrl_gym.envs.swe._repo import RepoSource, resolve_repo
from skyrl_gym.errors import ConfigError


def bundled_rows() -> list[dict]:
    return [json.loads(line) for line in BUNDLED_TASKS.read_text().splitlines()]


def test_bundled_tasks_are_real_swe_rows():
    rows = bundled_rows()
    assert len(rows) >= 6
    for row in rows:
        # as published: the test lists are JSON strings
        assert isinstance(row["FAIL_TO_PASS"], str) and json.loads(row["FAIL_TO_PASS"])
        for key in (
            "instance_id",
            "repo",
            "base_commit",
            "problem_statement",
            "patch",
            "test_patch",
            "version",
        ):
            assert row[key]
    instances = bundled_instances()
    assert [i.instance_id for i in instances] == [r["instance_id"] for r in rows]
    assert all(isinstance(i.FAIL_TO_PASS, tuple) and i.FAIL_TO_PASS for i in instances)
    assert all(i.repo_path.endswith(f"{i.repo.split('/')[1]}.bundle") for i in instances)
    # three repository shapes: pytest on the test patch's files, unittest through tox's
    # command with SWE-bench's parser, and two packages' pytest suites
    shapes = {
        (i.repo, i.test_cmd.split(" -m ")[-1].split()[0] if i.test_cmd else "", i.log_parser)
        for i in instances
    }
    assert shapes == {
        ("pocketlib/pocketlib", "", "pytest"),
        ("ledgerlite/ledgerlite", "unittest", "swebench:parse_log_django"),
        ("gridkit/gridkit", "pytest", "pytest"),
    }


def test_lists_may_be_real_lists_and_round_trip(tmp_path):
    row = bundled_rows()[0]
    as_lists = row | {
        "FAIL_TO_PASS": json.loads(row["FAIL_TO_PASS"]),
        "PASS_TO_PASS": json.loads(row["PASS_TO_PASS"]),
    }
    a = instance_from_row(row, base_dir=BUNDLED_TASKS.parent)
    b = instance_from_row(as_lists, base_dir=BUNDLED_TASKS.parent)
    assert a == b
    assert instance_from_row(a.to_row()) == a
    assert a.extra["created_at"] == row["created_at"]  # unknown fields are kept


def test_parquet_json_and_dataset_load_the_same(tmp_path):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    rows = bundled_rows()
    shutil.copy(BUNDLED_TASKS.parent / "pocketlib.bundle", tmp_path / "pocketlib.bundle")
    # every column in every row (from_pylist takes its columns from the first row), None where a
    # row has no value, as a published Parquet file of mixed rows has
    columns = list(dict.fromkeys(k for r in rows for k in r))
    full = [{k: r.get(k) for k in columns} for r in rows]
    pq.write_table(pa.Table.from_pylist(full), tmp_path / "tasks.parquet")
    (tmp_path / "tasks.json").write_text(json.dumps(rows))
    from_parquet = load_instances(tmp_path / "tasks.parquet")
    from_json = load_instances(tmp_path / "tasks.json")
    assert from_parquet == from_json
    assert from_parquet[0].repo_path == str(tmp_path / "pocketlib.bundle")  # relative to the task file
    datasets = pytest.importorskip("datasets")
    from_dataset = load_instances(datasets.Dataset.from_list(full), base_dir=tmp_path)
    assert from_dataset == from_parquet


def test_repo_found_under_repos_dir_as_owner__name(tmp_path):
    row = {k: v for k, v in bundled_rows()[2].items() if k != "repo_path"}
    inst = instance_from_row(row)
    with pytest.raises(ConfigError, match="--repos DIR"):
        resolve_repo(inst)
    with pytest.raises(ConfigError, match="pocketlib__pocketlib"):
        resolve_repo(inst, tmp_path)
    shutil.copy(BUNDLED_TASKS.parent / "pocketlib.bundle", tmp_path / "pocketlib__pocketlib.bundle")
    assert resolve_repo(inst, tmp_path) == tmp_path / "pocketlib__pocketlib.bundle"
    # a plain clone (a directory) works too and wins over the bundle
    subprocess.run(
        [
            "git",
            "clone",
            "-q",
            str(tmp_path / "pocketlib__pocketlib.bundle"),
            str(tmp_path / "pocketlib__pocketlib"),
        ],
        check=True,
    )
    path = resolve_repo(inst, tmp_path)
    assert path == tmp_path / "pocketlib__pocketlib"
    assert RepoSource(path).commit(inst.base_commit) == inst.base_commit


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"instance_id": ""}, "missing or empty field"),
        ({"patch": None}, r"missing or empty field\(s\) \['patch'\]"),
        ({"repo": "pocketlib"}, "owner/name"),
        ({"FAIL_TO_PASS": "[not json"}, "not a JSON list"),
        ({"FAIL_TO_PASS": "[]"}, "FAIL_TO_PASS is empty"),
        ({"PASS_TO_PASS": [1, 2]}, "list of test ids"),
        ({"test_patch": "  "}, "test_patch is empty"),
        ({"install": 3}, "shell command"),
    ],
)
def test_bad_rows_say_what_is_wrong(change, message):
    row = bundled_rows()[0] | change
    with pytest.raises(ConfigError, match=message):
        instance_from_row(row, where="tasks.jsonl row 1")


def test_bad_files(tmp_path):
    bad = tmp_path / "tasks.jsonl"
    bad.write_text(json.dumps(bundled_rows()[0]) + "\n{oops\n")
    with pytest.raises(ConfigError, match=r"tasks.jsonl:2: not valid JSON"):
        load_instances(bad)
    dup = tmp_path / "dup.jsonl"
    dup.write_text(json.dumps(bundled_rows()[0]) + "\n" + json.dumps(bundled_rows()[0]) + "\n")
    with pytest.raises(ConfigError, match="appears twice"):
        load_instances(dup)
    with pytest.raises(ConfigError, match="does not exist"):
        load_instances(tmp_path / "nope.jsonl")
    (tmp_path / "tasks.csv").write_text("instance_id\n")
    with pytest.raises(ConfigError, match=".jsonl, .json or .parquet"):
        load_instances(tmp_path / "tasks.csv")


def test_missing_commit_and_repo_path_are_config_errors(tmp_path):
    inst = instance_from_row(bundled_rows()[0] | {"repo_path": str(tmp_path / "absent.bundle")})
    with pytest.raises(ConfigError, match="does not exist"):
        resolve_repo(inst)
    source = RepoSource(bundled_instances()[0].repo_path)
    with pytest.raises(ConfigError, match="is not in"):
        source.commit("0" * 40)
