"""The local-process backend, with the adversarial cases that apply to it."""

import asyncio
import os
import time

import pytest

from skyrl_gym.errors import ConfigError, SandboxError
from skyrl_gym.sandbox import (
    AsyncSandbox,
    LocalSandbox,
    LocalSandboxConfig,
    MiB,
    Sandbox,
    SandboxFileNotFoundError,
    SandboxLimits,
    bwrap_usable,
)

ROOT = os.geteuid() == 0
needs_bwrap = pytest.mark.skipif(not bwrap_usable(), reason="bubblewrap missing or unusable here")
needs_isolation = pytest.mark.skipif(
    not (ROOT or bwrap_usable()), reason="needs root (own uid) or bubblewrap to be safe for the host"
)
FAST = SandboxLimits(
    timeout_s=3, grace_s=1, memory_bytes=512 * MiB, pids=64, output_bytes=64 * 1024, tmp_bytes=8 * MiB
)


@pytest.fixture
def sb():
    with LocalSandbox(limits=FAST) as s:
        yield s


def test_exec_basics(sb):
    assert isinstance(sb, Sandbox) and isinstance(sb, AsyncSandbox)
    r = sb.exec("echo out; echo err >&2; exit 3")
    assert (r.stdout, r.stderr, r.exit_code, r.timed_out, r.ok) == ("out\n", "err\n", 3, False, False)
    assert sb.exec(["printf", "%s|", "a b", "c"]).stdout == "a b|c|"
    assert sb.exec("cat", stdin="piped\n").stdout == "piped\n"
    assert sb.exec("pwd").stdout.strip() == sb.workdir
    assert sb.exec("echo $FOO", env={"FOO": "bar"}).stdout == "bar\n"


def test_host_environment_does_not_leak(sb, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret")
    assert "sk-secret" not in sb.exec("env").stdout


def test_files_and_directories(sb, tmp_path):
    sb.write_file("a/b.txt", "hello")
    assert sb.read_file("a/b.txt") == b"hello"
    assert sb.exec("cat a/b.txt").stdout == "hello"
    assert sb.exec("echo more > a/c.txt").ok
    with pytest.raises(SandboxFileNotFoundError):
        sb.read_file("missing")
    with pytest.raises(SandboxError, match="max_bytes"):
        sb.read_file("a/b.txt", max_bytes=2)
    (tmp_path / "src" / "pkg").mkdir(parents=True)
    (tmp_path / "src" / "pkg" / "m.py").write_text("X = 1\n")
    sb.upload(tmp_path / "src", "proj")
    assert sb.exec("cat proj/pkg/m.py && echo y > proj/new").ok
    sb.download("proj", tmp_path / "back")
    assert (tmp_path / "back" / "pkg" / "m.py").read_text() == "X = 1\n"
    assert (tmp_path / "back" / "new").read_text() == "y\n"
    with pytest.raises(SandboxFileNotFoundError):
        sb.exec("true", workdir="nope")


def test_close_is_idempotent_and_removes_the_workdir():
    s = LocalSandbox(limits=FAST)
    s.exec("touch x")
    s.close()
    s.close()
    assert not os.path.exists(s.workdir)
    with pytest.raises(SandboxError, match="closed"):
        s.exec("true")


def test_bad_timeout_is_a_config_error(sb):
    with pytest.raises(ConfigError):
        sb.exec("true", timeout=0)


def test_async_twins(sb):
    async def main():
        results = await asyncio.gather(*(sb.aexec(f"echo {i}") for i in range(8)))
        await sb.awrite_file("f", b"x")
        return [r.stdout for r in results], await sb.aread_file("f")

    outs, data = asyncio.run(main())
    assert outs == [f"{i}\n" for i in range(8)] and data == b"x"


# -- adversarial ------------------------------------------------------------------------------
def test_infinite_loop_with_background_children_is_killed(sb):
    start = time.monotonic()
    r = sb.exec("sleep 1000 & sleep 1000 & while :; do :; done", timeout=2)
    assert r.timed_out and r.exit_code in (124, 137)
    assert time.monotonic() - start < 2 + FAST.grace_s + 3
    assert sb.exec("echo alive").stdout == "alive\n"
    if sb.uid is not None:
        from skyrl_gym.sandbox.local import _pids_where

        assert _pids_where(uid=sb.uid) == []


def test_background_child_does_not_hold_the_command_open(sb):
    start = time.monotonic()
    r = sb.exec("sleep infinity & echo started")
    assert r.ok and r.stdout == "started\n" and time.monotonic() - start < 2.5


def test_term_ignoring_command_gets_killed_after_grace(sb):
    r = sb.exec("trap '' TERM; while :; do :; done", timeout=1)
    assert r.timed_out and r.exit_code == 137


def test_huge_output_is_capped_in_the_middle(sb):
    start = time.monotonic()
    # 10 GB (GNU head stops it there); the deadline ends it first if the machine is slow
    r = sb.exec("yes 0123456789 | head -c 10000000000; echo END", timeout=4)
    assert r.output_truncated and len(r.stdout) < FAST.output_bytes + 200
    assert "bytes of output omitted" in r.stdout and r.stdout.startswith("0123456789\n")
    assert time.monotonic() - start < 4 + FAST.grace_s + 3
    assert sb.exec("echo ok").ok


def test_memory_bomb_fails_inside_the_limit(sb):
    r = sb.exec(["python3", "-c", "x = bytearray(2 * 1024**3); print('allocated')"])
    assert not r.ok and "allocated" not in r.stdout and "MemoryError" in r.stderr
    assert sb.exec("echo ok").ok


def test_file_size_limit():
    lim = SandboxLimits(timeout_s=5, grace_s=1, file_size_bytes=1 * MiB)
    with LocalSandbox(limits=lim) as s:
        r = s.exec("head -c 5000000 /dev/zero > big")
        assert r.exit_code != 0 and os.path.getsize(os.path.join(s.workdir, "big")) <= MiB


@needs_isolation
def test_fork_bomb_is_contained():
    lim = SandboxLimits(timeout_s=3, grace_s=1, pids=64)
    with LocalSandbox(limits=lim) as s:
        start = time.monotonic()
        r = s.exec("bomb() { bomb | bomb & }; bomb; sleep 10", timeout=3)
        assert time.monotonic() - start < 3 + 1 + 5
        assert r.exit_code != 0 or r.timed_out
        assert s.exec("echo survived").stdout == "survived\n"


@needs_bwrap
def test_disk_fill_stops_at_the_tmpfs_size(sb):
    r = sb.exec("dd if=/dev/zero of=/tmp/fill bs=1M count=64")
    assert r.exit_code != 0 and "No space left" in r.stderr
    assert sb.exec("echo ok").ok


@needs_bwrap
def test_rm_rf_root_leaves_the_host_alone(sb, tmp_path):
    sentinel = tmp_path / "sentinel"
    sentinel.write_text("still here")
    sb.write_file("mine.txt", "x")
    r = sb.exec("rm -rf / --no-preserve-root", timeout=10)
    assert r.exit_code != 0  # most of / is read-only or invisible
    assert sentinel.read_text() == "still here" and os.path.exists("/usr/bin/env")
    assert sb.exec("echo usable").stdout == "usable\n"


@needs_bwrap
def test_network_is_off_under_bubblewrap(sb):
    devs = [line.split(":")[0].strip() for line in sb.exec("cat /proc/net/dev").stdout.splitlines()[2:]]
    assert devs == ["lo"]


@needs_isolation
def test_host_secrets_are_not_readable(sb, tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("TOPSECRET")
    secret.chmod(0o600)
    r = sb.exec(f"cat {secret}; cat /etc/shadow; ls /root")
    assert "TOPSECRET" not in r.stdout and r.exit_code != 0
    assert "root:" not in r.stdout


@needs_bwrap
def test_no_capabilities_under_bubblewrap(sb):
    caps = dict(
        line.split(":\t")
        for line in sb.exec("cat /proc/self/status").stdout.splitlines()
        if line.startswith("Cap")
    )
    assert caps["CapEff"].strip() == "0000000000000000" and caps["CapBnd"].strip() == "0000000000000000"


def test_plain_processes_without_bubblewrap_still_limit_and_clean_up():
    with LocalSandbox(LocalSandboxConfig(limits=FAST, isolation="none")) as s:
        assert not s.use_bwrap
        r = s.exec("sleep 1000 & while :; do :; done", timeout=1)
        assert r.timed_out
        assert s.exec("echo ok").ok


@needs_isolation
def test_planted_symlinks_do_not_reach_the_host(sb, tmp_path):
    host_file = tmp_path / "host.txt"
    host_file.write_text("host data")
    host_file.chmod(0o644)
    tmp_path.chmod(0o755)
    sb.exec(f"ln -s /etc/shadow leak.txt; ln -s {host_file} clobber.txt")
    with pytest.raises(SandboxError):
        sb.read_file("leak.txt")  # as the sandbox's user: no permission (or not even visible)
    with pytest.raises(SandboxError):
        sb.write_file("clobber.txt", "overwritten")
    assert host_file.read_text() == "host data"


def test_sigterm_to_the_owner_removes_its_sandboxes():
    import signal
    import subprocess
    import sys
    from pathlib import Path

    repo = Path(__file__).resolve().parents[2]
    code = (
        "import time\nfrom skyrl_gym.sandbox import LocalSandbox\n"
        "sb = LocalSandbox()\nprint(sb.workdir, flush=True)\ntime.sleep(60)\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code],
        cwd=repo,
        env={**os.environ, "PYTHONPATH": str(repo)},
        stdout=subprocess.PIPE,
        text=True,
    )
    workdir = proc.stdout.readline().strip()
    assert os.path.isdir(workdir)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=20) == -signal.SIGTERM  # it still dies by SIGTERM
    assert not os.path.exists(workdir)


@needs_isolation
@pytest.mark.parametrize("isolation", ["auto", "none"])
def test_spawn_a_long_lived_process_and_kill_it(isolation):
    with LocalSandbox(LocalSandboxConfig(limits=FAST, isolation=isolation)) as sb:
        proc = sb.spawn(["sh", "-c", "read line; echo got $line; sleep 100 & sleep 100"], cpu_budget_s=5)
        proc.stdin.write(b"hello\n")
        proc.stdin.flush()
        assert proc.stdout.readline() == b"got hello\n"
        with pytest.raises(SandboxError, match="spawn"):
            sb.exec("true")  # its cleanup would end the spawned process
        with pytest.raises(SandboxError, match="spawn"):
            sb.spawn(["true"], cpu_budget_s=1)
        sb.kill(proc)
        assert proc.returncode is not None
        assert sb.exec("echo again").stdout == "again\n"  # usable again after kill()
        sb.kill(proc)  # idempotent
        with pytest.raises(ConfigError):
            sb.spawn(["true"], cpu_budget_s=0)
        second = sb.spawn(["sleep", "100"], cpu_budget_s=5)
    assert second.poll() is not None  # close() ended it
