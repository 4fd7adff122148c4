"""Warm pool, reaper, and cleanup on exit, SIGTERM, SIGINT and kill -9 (real Docker)."""

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from skyrl_gym.sandbox import DockerSandbox, DockerSandboxConfig, SandboxLimits, SandboxPool, reap

pytestmark = pytest.mark.docker

REPO = Path(__file__).resolve().parents[2]
LIMITS = SandboxLimits(timeout_s=5, grace_s=1)


def _exists(name: str) -> bool:
    import docker

    client = docker.from_env()
    try:
        client.containers.get(name)
        return True
    except docker.errors.NotFound:
        return False
    finally:
        client.close()


def _wait_gone(names, timeout=20.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not any(_exists(n) for n in names):
            return True
        time.sleep(0.2)
    return False


def test_pool_resets_between_episodes(sandbox_images):
    cfg = DockerSandboxConfig(image=sandbox_images["python"], limits=LIMITS)
    with SandboxPool(cfg, size=1) as pool:
        pool.wait_warm(timeout=60)
        with pool.sandbox() as sb:
            first = sb.name
            sb.write_file("notes.txt", "episode 1")
            sb.exec("echo t > /tmp/t; mkdir -p d && chmod 000 d; setsid sleep 1000 > /dev/null 2>&1 &")
        pool.wait_warm(timeout=60)
        with pool.sandbox() as sb:
            assert sb.name == first  # the same container, reset
            assert sb.exec("ls -A /workspace /tmp").stdout.split() == ["/tmp:", "/workspace:"]
            procs = sb.exec("ps -eo comm=").stdout.split()
            assert "sleep" in procs and procs.count("sleep") == 1  # only PID 1's timer
        assert pool.warm_count <= 1


def test_pool_acquire_when_empty_creates_cold_and_close_removes_everything(sandbox_images):
    cfg = DockerSandboxConfig(image=sandbox_images["minimal"], limits=LIMITS)
    pool = SandboxPool(cfg, size=0)
    a, b = pool.acquire(), pool.acquire()
    assert a.exec("echo a").stdout == "a\n" and b.name != a.name
    pool.close()
    pool.close()
    assert a.closed and b.closed and not _exists(a.name) and not _exists(b.name)


def test_async_pool(sandbox_images):
    import asyncio

    cfg = DockerSandboxConfig(image=sandbox_images["minimal"], limits=LIMITS)

    async def main():
        with SandboxPool(cfg, size=2) as pool:

            async def episode(i):
                async with pool.asandbox() as sb:
                    return (await sb.aexec(f"echo {i}")).stdout

            return await asyncio.gather(*(episode(i) for i in range(3)))

    assert asyncio.run(main()) == ["0\n", "1\n", "2\n"]


def test_reaper_spares_live_owners_and_removes_expired(sandbox_images):
    cfg = DockerSandboxConfig(image=sandbox_images["minimal"], limits=SandboxLimits(ttl_s=1))
    live = DockerSandbox(DockerSandboxConfig(image=sandbox_images["minimal"], limits=LIMITS))
    short = DockerSandbox(cfg)
    try:
        time.sleep(1.2)
        report = reap()
        assert short.name in report.containers and live.name not in report.containers
        assert _exists(live.name) and not _exists(short.name)
    finally:
        live.close()
        short.close()  # already gone: must not raise


_OWNER = textwrap.dedent(
    """
    import faulthandler, signal, sys, time
    faulthandler.register(signal.SIGUSR1)  # the test asks for every thread's stack if we hang
    # as in a program started from a terminal: a test run in the background (CI) hands its
    # children SIGINT ignored, and the owner would then sleep through the signal
    signal.signal(signal.SIGINT, signal.default_int_handler)
    from skyrl_gym.sandbox import DockerSandbox, DockerSandboxConfig, SandboxPool
    cfg = DockerSandboxConfig(image=sys.argv[1])
    a, b = DockerSandbox(cfg), DockerSandbox(cfg)
    pool = SandboxPool(cfg, size=1)
    pool.wait_warm(timeout=60)
    names = [a.name, b.name] + [sb.name for sb, _ in pool._warm]
    print(" ".join(names), flush=True)
    time.sleep(120)
    """
)


def _start_owner(image):
    proc = subprocess.Popen(
        [sys.executable, "-c", _OWNER, image],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    line = proc.stdout.readline()
    names = line.split()
    assert len(names) == 3, line
    assert all(_exists(n) for n in names)
    return proc, names


@pytest.mark.slow
def test_kill_9_then_the_reaper_removes_everything(sandbox_images):
    proc, names = _start_owner(sandbox_images["minimal"])
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)
    assert all(_exists(n) for n in names)  # nothing ran in the killed process
    report = reap()
    assert set(names) <= set(report.containers)
    assert not any(_exists(n) for n in names)


@pytest.mark.slow
@pytest.mark.timeout(420)
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signals_clean_up_without_the_reaper(sandbox_images, sig):
    proc, names = _start_owner(sandbox_images["minimal"])
    os.kill(proc.pid, sig)
    # Closing three containers (and the pool's filler, which may be mid-create) is quick on a
    # quiet machine and has taken over a minute on a loaded one; a hang shows its stacks.
    try:
        proc.wait(timeout=240)
    except subprocess.TimeoutExpired:
        os.kill(proc.pid, signal.SIGUSR1)
        time.sleep(2)
        proc.kill()
        _, err = proc.communicate(timeout=30)
        pytest.fail(f"the owner did not exit within 240 s of signal {sig}; its threads:\n{err[-6000:]}")
    proc.stderr.close()
    assert proc.returncode == -sig, proc.returncode  # it died of the signal, not at the end of its sleep
    assert _wait_gone(names), "containers survived their owner's SIGTERM/SIGINT"


def test_reap_cli(capsys):
    import argparse

    from skyrl_gym.sandbox.cli import add_command

    parser = argparse.ArgumentParser()
    add_command(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["sandbox", "reap"])
    assert args.handler(args) == 0
    assert "removed" in capsys.readouterr().out
    args = parser.parse_args(["sandbox", "ls"])
    assert args.handler(args) == 0
