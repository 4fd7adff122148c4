"""The multi-turn comparison page holds the table that examples/multiturn/table.py builds from
the committed run results (so no number on it is typed by hand)."""

from __future__ import annotations

import importlib.util

from tests.docs._markdown import REPO


def _table_module():  # noqa: ANN202 - the example script as a module
    spec = importlib.util.spec_from_file_location(
        "multiturn_table", REPO / "examples" / "multiturn" / "table.py"
    )
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_the_comparison_page_is_fresh():
    mod = _table_module()
    text = mod.PAGE.read_text(encoding="utf-8")
    assert mod.page_with_table(text, mod.table()) == text, (
        "docs/multiturn-comparison.md is stale: run python examples/multiturn/table.py --write"
    )


def test_every_result_folder_has_a_summary_with_both_evaluations():
    mod = _table_module()
    folders = [f for f in mod.RESULTS.iterdir() if f.is_dir()]
    assert folders, "results/multiturn/ has no runs"
    for f in folders:
        row = mod._run_row(f)  # raises on a summary without a baseline or final evaluation
        assert row["env"] in mod.PER_TURN and 0.0 <= row["after"] <= 1.0


def test_the_per_k_table_lists_every_kvchain_run_even_with_other_chain_lengths(tmp_path):
    import json

    mod = _table_module()
    for name, ks in (("a", (3, 4)), ("b", (4, 5))):
        evaluation = {"env_metrics": {f"success_k{k}": k / 10 for k in ks}}
        (tmp_path / name).mkdir()
        summary = {"env": "kvchain", "baseline": evaluation, "final": evaluation}
        (tmp_path / name / "summary.json").write_text(json.dumps(summary))
    lines = mod.per_k_table(tmp_path).splitlines()
    assert lines[0] == "| run | k = 3 | k = 4 | k = 5 |"
    assert lines[2] == "| a | 0.30 -> 0.30 | 0.40 -> 0.40 | n/a -> n/a |"
    assert lines[3] == "| b | n/a -> n/a | 0.40 -> 0.40 | 0.50 -> 0.50 |"
