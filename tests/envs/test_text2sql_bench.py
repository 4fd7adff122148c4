"""Smoke run of bench/bench_text2sql.py (ours vs raw sqlite3; the published env needs PyPI)."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench" / "bench_text2sql.py"


def test_bench_runs_and_reports_a_ratio(capsys):
    spec = importlib.util.spec_from_file_location("bench_text2sql", BENCH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.main(["--actions", "24", "--repeats", "1", "--skip-published"]) == 0
    out = capsys.readouterr().out
    assert "24 actions in" in out
    assert re.search(r"ours / raw = \d+\.\d\d", out)
    cases = module.parity_cases()
    assert {c["case"] for c in cases} >= {"gold", "wrong", "no think", "turn limit"}
