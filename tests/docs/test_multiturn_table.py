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
