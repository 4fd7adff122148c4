"""``skyrl swe grade`` and ``skyrl swe check`` on the local runtime (Docker: test_swe_docker.py)."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

from skyrl_gym.envs.swe import BUNDLED_TASKS
from skyrl_gym.envs.swe.cli import main
from tests.envs.swe.conftest import FLIP_HOOK

ROOT = Path(__file__).resolve().parents[3]


def test_the_verb_and_the_env_are_declared_entry_points():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["entry-points"]["skyrl.cli"]["swe"] == "skyrl_gym.envs.swe.cli:add_command"
    assert project["entry-points"]["skyrl_gym.envs"]["swe"] == "skyrl_gym.envs.swe.env:SWEEnv"


def test_check_subset_local(capsys):
    ids = ["pocketlib__pocketlib-4", "pocketlib__pocketlib-8"]
    code = main(["check", "--sandbox", "local", "--json", *(f"--instance={i}" for i in ids)])
    rows = json.loads(capsys.readouterr().out)
    assert code == 0 and [r["instance_id"] for r in rows] == ids
    assert all(r["ok"] and r["gold_resolved"] and not r["empty_resolved"] for r in rows)


def test_check_fails_on_a_task_whose_gold_patch_does_not_resolve(tmp_path, capsys):
    rows = [json.loads(line) for line in BUNDLED_TASKS.read_text().splitlines()][:2]
    rows[1]["patch"] = rows[0]["patch"]  # the wrong fix for task 2: it does not even apply there
    rows = [r | {"repo_path": str(BUNDLED_TASKS.parent / "pocketlib.bundle")} for r in rows]
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text("".join(json.dumps(r) + "\n" for r in rows))
    code = main(["check", str(tasks), "--sandbox", "local", "--workers", "1"])
    out = capsys.readouterr().out
    assert code == 1
    assert "1/2 instances behave" in out and "NOT resolved" in out and "FAIL" in out


def test_grade_predictions_table_and_json(tmp_path, capsys, instances, make_patch):
    preds = tmp_path / "preds.jsonl"
    hack = make_patch(instances[0], {"conftest.py": FLIP_HOOK})
    rows = [
        {"instance_id": instances[0].instance_id, "model_name_or_path": "hacker", "model_patch": hack},
        {
            "instance_id": instances[1].instance_id,
            "model_name_or_path": "gold",
            "model_patch": instances[1].patch,
        },
        {"instance_id": instances[2].instance_id, "model_name_or_path": "lazy", "model_patch": None},
    ]
    preds.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert main(["grade", str(BUNDLED_TASKS), str(preds), "--sandbox", "local", "--json"]) == 0
    results = json.loads(capsys.readouterr().out)
    assert [(r["instance_id"], r["model_name_or_path"], r["resolved"]) for r in results] == [
        (instances[0].instance_id, "hacker", False),
        (instances[1].instance_id, "gold", True),
        (instances[2].instance_id, "lazy", False),
    ]
    assert results[0]["discarded_files"] == ["conftest.py"]
    assert {t["name"] for t in results[1]["tests"]} >= set(instances[1].FAIL_TO_PASS)
    as_list = tmp_path / "preds.json"
    as_list.write_text(json.dumps(rows[1:2]))
    assert main(["grade", str(BUNDLED_TASKS), str(as_list), "--sandbox", "local"]) == 0
    table = capsys.readouterr().out
    assert "instance" in table.splitlines()[0] and "gold" in table and "resolved 1/1" in table


def test_grade_errors_are_clear(tmp_path, capsys):
    preds = tmp_path / "preds.jsonl"
    preds.write_text(json.dumps({"instance_id": "pocketlib__pocketlib-99", "model_patch": ""}) + "\n")
    assert main(["grade", str(BUNDLED_TASKS), str(preds), "--sandbox", "local"]) == 1
    assert "unknown instance 'pocketlib__pocketlib-99'" in capsys.readouterr().err
    preds.write_text('{"model_patch": ""}\n')
    assert main(["grade", str(BUNDLED_TASKS), str(preds)]) == 1
    assert "needs instance_id" in capsys.readouterr().err


def test_check_a_published_style_file_with_repos_dir(tmp_path, capsys):
    import shutil

    rows = [json.loads(line) for line in BUNDLED_TASKS.read_text().splitlines()][4:5]
    for row in rows:
        del row["repo_path"]  # as SWE-bench publishes them: only owner/name
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text("".join(json.dumps(r) + "\n" for r in rows))
    repos = tmp_path / "repos"
    repos.mkdir()
    assert main(["check", str(tasks), "--sandbox", "local"]) == 1
    assert "--repos DIR" in capsys.readouterr().out
    shutil.copy(BUNDLED_TASKS.parent / "pocketlib.bundle", repos / "pocketlib__pocketlib.bundle")
    assert main(["check", str(tasks), "--repos", str(repos), "--sandbox", "local"]) == 0
    assert "1/1 instances behave" in capsys.readouterr().out


def test_check_names_listed_tests_that_never_run(tmp_path, capsys):
    import dataclasses

    from skyrl_gym.envs.swe import bundled_instances

    inst = bundled_instances()[0]
    wrong = dataclasses.replace(
        inst, PASS_TO_PASS=(*inst.PASS_TO_PASS, "tests/test_roman.py::test_no_such_test")
    )
    tasks = tmp_path / "tasks.jsonl"
    row = wrong.to_row() | {"repo_path": str(BUNDLED_TASKS.parent / "pocketlib.bundle")}
    tasks.write_text(json.dumps(row) + "\n")
    assert main(["check", str(tasks), "--sandbox", "local", "--json"]) == 1
    [result] = json.loads(capsys.readouterr().out)
    assert not result["ok"] and result["gold"]["missing"] == ["tests/test_roman.py::test_no_such_test"]
    assert "gold patch: listed tests never ran: tests/test_roman.py::test_no_such_test" in result["error"]
