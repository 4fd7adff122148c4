"""results/README.md and README.md's headline table are what results/build.py writes from the
committed summaries now."""

from __future__ import annotations

import importlib.util
import json

from tests.docs._markdown import REPO


def _build():
    spec = importlib.util.spec_from_file_location("results_build", REPO / "results" / "build.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_results_page_and_the_readme_headline_are_fresh(capsys):
    assert _build().main(["--check"]) == 0, capsys.readouterr().err


def test_the_page_carries_each_summary_s_figures_and_a_stale_page_is_caught(tmp_path, monkeypatch):
    build = _build()
    summary_path = REPO / "results" / "multiturn" / "kvchain-3step-grpo-seed1" / "summary.json"
    summary = json.loads(summary_path.read_text())
    text = build.page()
    row = next(line for line in text.splitlines() if line.startswith("| [kvchain-3step-grpo-seed1]"))
    assert f"{summary['final']['success']:.3f} +/- {summary['final']['success_se']:.3f}" in row
    assert "[plot](multiturn/kvchain-3step-grpo-seed1/metrics.png)" in row
    # every folder of results/ has a section, every benchmark output a row
    for folder in (REPO / "results").iterdir():
        if folder.is_dir():
            assert f"## `{folder.name}/`" in text
    assert "(bench_generation/bench-generation-2026-12-05.txt)" in text

    stale = tmp_path / "README.md"
    stale.write_text(text.replace(f"{summary['final']['success']:.3f}", "0.999"))
    monkeypatch.setattr(build, "PAGE", stale)
    monkeypatch.setattr(build, "REPO", tmp_path.parent)  # names the file relative to this
    assert build.main(["--check"]) == 1
