"""bench/bench_main_job.py: variants of the main job one after another, each against the first."""

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

import bench_main_job  # noqa: E402


def _write_run(run_dir: Path, train: list[dict], before: float, after: float) -> None:
    run_dir.mkdir(parents=True)
    records = [
        {"kind": "eval", "step": 0, "success": before},
        *train,
        {"kind": "eval", "step": 9, "success": after},
    ]
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    summary = {
        "baseline": {"success": before, "success_se": 0.02},
        "final": {"success": after, "success_se": 0.01},
    }
    (run_dir / "summary.json").write_text(json.dumps(summary))


def test_figures_are_summed_per_trained_token_and_compared_with_the_first_run(tmp_path):
    step = {"kind": "train", "mem_rollout_peak_gb": 8.0, "mem_train_peak_gb": 12.0, "mem_rss_gb": 10.0}
    _write_run(
        tmp_path / "a",
        [
            {**step, "num_tokens": 1000, "train_seconds": 10.0, "gen_seconds": 5.0},
            {**step, "num_tokens": 3000, "train_seconds": 30.0, "gen_seconds": 7.0, "mem_rss_gb": 11.0},
        ],
        0.15,
        0.98,
    )
    _write_run(
        tmp_path / "b",
        [{**step, "num_tokens": 2000, "train_seconds": 30.0, "gen_seconds": 6.0, "mem_train_peak_gb": 6.0}],
        0.15,
        0.99,
    )
    a = bench_main_job.read_run(tmp_path / "a", "a", [], 0, 100.0, 13.0)
    b = bench_main_job.read_run(tmp_path / "b", "b", ["--x"], 0, 120.0, 6.5)
    assert (a.train_steps, a.trained_tokens, a.train_ms_per_token, a.rollout_s) == (2, 4000, 10.0, 12.0)
    assert (a.resident_after_update_min_gb, a.resident_after_update_max_gb) == (10.0, 11.0)
    assert b.train_ms_per_token == 15.0 and b.train_peak_gb == 6.0 and b.after == 0.99
    out = bench_main_job.table([a, b])
    assert re.search(r"train ms / trained token\s+10\.00\s+15\.00 \(1\.50x\)", out)
    assert re.search(r"largest train-step peak \(GB\)\s+12\.00\s+6\.00 \(0\.50x\)", out)
    assert re.search(r"held-out success\s+0\.150 -> 0\.980\s+0\.150 -> 0\.990", out)


def test_a_run_without_files_reports_no_summary(tmp_path):
    missing = bench_main_job.read_run(tmp_path / "none", "none", [], 1, 3.0, 0.5)
    assert missing.train_steps == 0 and missing.after is None
    assert "(no summary)" in bench_main_job.table([missing])


def test_a_variant_without_a_name_is_refused():
    assert bench_main_job.parse_variant("rel0=--release-memory-above 0") == (
        "rel0",
        ["--release-memory-above", "0"],
    )
    assert bench_main_job.parse_variant("default=") == ("default", [])
    with pytest.raises(SystemExit, match="NAME=FLAGS"):
        bench_main_job.parse_variant("--release-memory-above 0")
    assert bench_main_job.parse_variant("before@f396808=--seed 1") == ("before@f396808", ["--seed", "1"])
    assert bench_main_job.split_rev("before@f396808") == ("before", "f396808")
    assert bench_main_job.split_rev("after") == ("after", None)
    with pytest.raises(SystemExit, match="NAME@COMMIT"):
        bench_main_job.parse_variant("@HEAD=")


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads wait4's ru_maxrss")
def test_two_tiny_variants_run_one_after_another(tmp_path, tiny_model_dir):
    model_dir = tiny_model_dir
    common = [
        "--model", str(model_dir), "--steps", "1", "--prompts-per-step", "2", "--group-size", "2",
        "--train-prompts", "4", "--eval-prompts", "2", "--eval-samples", "1", "--max-tokens-per-turn", "4",
        "--no-bf16", "--no-skip-equal-reward-groups", "--threads", "1",
    ]  # fmt: skip
    out = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "bench_main_job.py"), "--run-root", str(tmp_path / "runs"),
         "--variant", "plain@HEAD=", "--variant", "release0=--release-memory-above 0",
         "--json", str(tmp_path / "out.json"), "--", *common],
        capture_output=True, text=True, timeout=400, cwd=ROOT,
    )  # fmt: skip
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    runs = json.loads((tmp_path / "out.json").read_text())
    assert [r["name"] for r in runs] == ["plain@HEAD", "release0"]  # HEAD's code from a worktree
    assert not (tmp_path / "runs" / "tree-HEAD").exists()  # its worktree removed
    assert all(r["exit_code"] == 0 and r["train_steps"] == 1 and r["max_rss_gb"] > 0.1 for r in runs)
    assert all(r["after"] is not None for r in runs)
    assert re.search(r"max RSS \(GB\)\s+[\d.]+\s+[\d.]+ \([\d.]+x\)", out.stdout)
    assert (tmp_path / "runs" / "release0" / "summary.json").exists()
