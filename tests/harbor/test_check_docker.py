"""``skyrl harbor check``: the bundled tasks pass with real Docker; broken tasks fail with reasons."""

from __future__ import annotations

import argparse
import json

import pytest

from harbor_adapter import bundled_tasks_dir
from harbor_adapter.cli import add_command

pytestmark = pytest.mark.docker


def run_cli(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="skyrl")
    add_command(parser.add_subparsers(dest="command"))
    args = parser.parse_args(argv)
    return args.handler(args)


def test_bundled_tasks_pass_the_check(base_images, capsys):
    code = run_cli(["harbor", "check", str(bundled_tasks_dir()), "--json"])
    report = json.loads(capsys.readouterr().out)
    failures = {r["task"]: r["reasons"] for r in report if not r["passed"]}
    assert code == 0 and not failures, failures
    assert len(report) >= 6
    for r in report:
        assert r["oracle"]["reward"] == 1.0 and r["oracle"]["error"] is None
        assert r["nop"]["reward"] == 0.0 and r["nop"]["error"] is None
        # the oracle acted through the tools like an agent: files written, one command, submit
        assert r["oracle"]["metrics"]["submitted"] and r["oracle"]["metrics"]["commands"] >= 1
        assert r["nop"]["metrics"]["commands"] == 0
    named = {r["task"]: r["oracle"]["metrics"] for r in report}
    assert named["sales-by-region"]["verifier/rows_correct"] == 4  # reward.json's named metrics
    assert named["archive-audit"]["verifier/clean"] == 1.0


def test_broken_tasks_fail_with_reasons(make_task, tmp_path, capsys):
    good = "[ -f /app/done ] && r=1 || r=0; echo $r > /logs/verifier/reward.txt\n"
    make_task("a-good", test_sh=good, solve_sh="mkdir -p /app && touch /app/done\n")
    make_task("b-oracle-fails", test_sh=good, solve_sh="echo 'cannot solve'; exit 1\n")
    make_task("c-always-one", test_sh="echo 1 > /logs/verifier/reward.txt\n")
    make_task("d-no-reward", test_sh="true\n")
    make_task("e-broken-toml", toml="[agent\n")
    make_task("f-no-solution", test_sh=good, solve_sh=None)
    make_task("g-hangs", test_sh=good, solve_sh="sleep 60\n")
    code = run_cli(["harbor", "check", str(tmp_path), "--command-timeout", "2", "--jobs", "2"])
    table = capsys.readouterr().out
    assert code == 1
    lines = {
        line.split()[0]: line
        for line in table.splitlines()
        if line[:2] in ("a-", "b-", "c-", "d-", "e-", "f-", "g-")
    }
    assert lines["a-good"].rstrip().endswith("PASS")
    assert "oracle scored 0.0, expected 1" in lines["b-oracle-fails"]
    assert "do-nothing agent scored 1.0, expected 0" in lines["c-always-one"]
    assert "RewardError" in lines["d-no-reward"] and "no reward file" in lines["d-no-reward"]
    assert "does not load" in lines["e-broken-toml"] and "not valid TOML" in lines["e-broken-toml"]
    assert "does not load" in lines["f-no-solution"] and "solve.sh" in lines["f-no-solution"]
    assert "oracle scored 0.0" in lines["g-hangs"]  # the 2 s command deadline stopped it
    assert table.strip().endswith("1/7 tasks pass")
