"""The C allocator of a ``skyrl train`` process (trainers.allocator): jemalloc preloaded by
starting the command again, glibc on request, and the release of free pages on either."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from skyrl_gym.errors import ConfigError
from trainers import allocator
from trainers.config import TrainConfig

ROOT = Path(__file__).resolve().parents[2]
linux = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="LD_PRELOAD and /proc/self/maps")
needs_jemalloc = pytest.mark.skipif(
    allocator.find_jemalloc() is None, reason="no jemalloc here (Debian's libjemalloc2 or the ray extra)"
)

_CHILD = """
import json, os, sys, torch
from trainers.allocator import reexec, jemalloc_loaded
from trainers.memory import release_free_memory, rss_bytes
print(json.dumps({"before": os.getpid()}), flush=True)
reexec(sys.argv[1])
keep = [torch.ones(16 * 1024) for _ in range(12_000)]  # about 790 MB in 64 KB blocks
grown = rss_bytes()
del keep
released = release_free_memory()
print(json.dumps({"pid": os.getpid(), "jemalloc": jemalloc_loaded(), "grown": grown,
                  "released": released, "after": rss_bytes(), "conf": os.environ.get("MALLOC_CONF")}))
"""


def _child(choice: str) -> list[dict]:
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, choice], capture_output=True, text=True, timeout=120, cwd=ROOT
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]


@linux
@needs_jemalloc
def test_reexec_starts_the_same_process_again_on_jemalloc_and_purge_gives_pages_back():
    first, again, last = _child("jemalloc")
    assert first["before"] == again["before"] == last["pid"]  # execve: the same process, started twice
    assert last["jemalloc"] is True
    assert last["conf"] == allocator.MALLOC_CONF
    assert last["released"] is True  # jemalloc's purge, not glibc's malloc_trim
    assert last["grown"] - last["after"] > 500e6


@linux
def test_glibc_keeps_the_process_as_it_is():
    (first, last) = _child("glibc")
    assert first["before"] == last["pid"]
    assert last["jemalloc"] is False and last["conf"] is None
    assert last["released"] is True  # malloc_trim


def test_jemalloc_asked_for_but_missing_says_how_to_fix_it(monkeypatch):
    monkeypatch.setattr(allocator, "jemalloc_loaded", lambda: False)
    monkeypatch.setattr(allocator, "find_jemalloc", lambda: None)
    monkeypatch.delenv("SKYRL_ALLOCATOR_REEXEC", raising=False)
    with pytest.raises(ConfigError, match="libjemalloc2.*--allocator glibc"):
        allocator.reexec("jemalloc")
    allocator.reexec("auto")  # auto without one: glibc, no error


def test_a_preload_that_did_not_take_is_not_tried_again(monkeypatch):
    monkeypatch.setattr(allocator, "jemalloc_loaded", lambda: False)
    monkeypatch.setattr(allocator, "find_jemalloc", lambda: "/nowhere/libjemalloc.so.2")
    monkeypatch.setenv("SKYRL_ALLOCATOR_REEXEC", "1")
    monkeypatch.setattr(allocator.os, "execve", lambda *a: pytest.fail("started again"))
    allocator.reexec("auto")
    with pytest.raises(ConfigError, match="not mapped"):
        allocator.reexec("jemalloc")


def test_an_unknown_allocator_is_refused():
    with pytest.raises(ConfigError, match="allocator must be"):
        TrainConfig(allocator="tcmalloc")
    with pytest.raises(ConfigError, match="allocator must be"):
        allocator.reexec("tcmalloc")


@linux
@needs_jemalloc
def test_skyrl_train_runs_on_glibc_unless_told_otherwise(tmp_path, tiny_model_dir):
    model_dir = tiny_model_dir
    common = [
        "--model", str(model_dir), "--steps", "1", "--prompts-per-step", "2", "--group-size", "2",
        "--train-prompts", "4", "--eval-prompts", "0", "--max-tokens-per-turn", "4",
        "--no-bf16", "--threads", "1", "--report-to", "none",
    ]  # fmt: skip
    for flags, expect in (
        ([], "glibc"),
        (["--allocator", "jemalloc"], "jemalloc"),
        (["--allocator", "auto"], "jemalloc"),
    ):
        run_dir = tmp_path / f"{expect}-{len(flags)}{flags[-1] if flags else ''}"
        done = subprocess.run(
            [sys.executable, "-m", "trainers.cli", "train", *common, *flags, "--run-dir", str(run_dir)],
            capture_output=True, text=True, timeout=300, cwd=ROOT,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr[-3000:]
        assert json.loads((run_dir / "summary.json").read_text())["allocator"] == expect
