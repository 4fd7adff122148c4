"""A smoke run of bench/bench_memory.py --trainer at a tiny size with the bundled model."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_the_trainer_section_runs_and_prints_each_variant_against_the_first(tmp_path):
    from skyrl_agent.models import bf16_is_native

    # float32 where bf16 would be emulated (as the trainer itself chooses): 3x faster there
    bf16 = bf16_is_native()
    out = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "bench_memory.py"), "--trainer", "--variants", "mbt512",
         "lean-mbt512", "ckpt-mbt512", "--groups", "1", "--group-size", "2", "--tokens", "120", "--prefix", "40",
         "--observations", "1", "--obs-tokens", "10", "--steps", "1", "--threads", "1",
         "--json", str(tmp_path / "out.json"), "--bf16" if bf16 else "--no-bf16"],
        capture_output=True, text=True, timeout=300, cwd=ROOT,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    assert "last step against mbt512" in out.stdout
    assert ("bf16 autocast" if bf16 else "float32 (--no-bf16)") in out.stdout.splitlines()[0]
    rows = re.findall(r"^  (\S+)\s+peak\s+([\d.]+) GB \(([\d.]+)x\)", out.stdout, flags=re.M)
    assert [r[0] for r in rows] == ["mbt512", "lean-mbt512", "ckpt-mbt512"] and rows[0][2] == "1.00"
    assert all(float(r[1]) > 0.3 for r in rows)  # at least the model's weights
    assert (tmp_path / "out.json").stat().st_size > 0
