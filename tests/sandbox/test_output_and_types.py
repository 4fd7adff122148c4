import pickle
import signal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from skyrl_gym.errors import ConfigError, SandboxError
from skyrl_gym.sandbox import (
    DockerProfile,
    DockerSandboxConfig,
    EndReason,
    ExecResult,
    LocalSandboxConfig,
    MiB,
    SandboxFileNotFoundError,
    SandboxLimits,
)
from skyrl_gym.sandbox._output import HeadTail


@given(st.lists(st.binary(max_size=300), max_size=30), st.integers(min_value=2, max_value=500))
def test_head_tail_keeps_first_and_last_bytes(chunks, cap):
    data = b"".join(chunks)
    ht = HeadTail(cap)
    for c in chunks:
        ht.feed(c)
    assert ht.total == len(data)
    out = ht.getvalue()
    if len(data) <= cap:
        assert out == data and not ht.truncated
    else:
        assert ht.truncated
        head, tail = cap // 2, cap - cap // 2
        assert out.startswith(data[:head]) and out.endswith(data[-tail:])
        assert f"[... {len(data) - cap} bytes of output omitted ...]".encode() in out


def test_limits_defaults_match_the_documented_table():
    lim = SandboxLimits()
    assert (lim.cpus, lim.memory_bytes, lim.pids) == (1.0, 2 * 1024**3, 512)
    assert (lim.timeout_s, lim.grace_s, lim.output_bytes, lim.ttl_s) == (30.0, 10.0, MiB, 1800)


@pytest.mark.parametrize(
    "bad", [{"timeout_s": 0}, {"pids": -1}, {"memory_bytes": 1024}, {"grace_s": -1}, {"output_bytes": 1.5}]
)
def test_bad_limits_raise_config_error(bad):
    with pytest.raises(ConfigError):
        SandboxLimits(**bad)


def test_limits_from_config_rejects_unknown_keys_and_pickles():
    lim = SandboxLimits.from_config({"timeout_s": 5, "pids": 64})
    assert lim.timeout_s == 5 and lim.pids == 64
    assert pickle.loads(pickle.dumps(lim)) == lim
    with pytest.raises(ConfigError, match="unknown sandbox limit"):
        SandboxLimits.from_config({"timeout": 5})
    cfg = DockerSandboxConfig(limits=lim, profile="task")
    assert cfg.profile is DockerProfile.TASK and pickle.loads(pickle.dumps(cfg)) == cfg
    assert pickle.loads(pickle.dumps(LocalSandboxConfig(limits=lim))).limits == lim


def test_strict_profile_refuses_a_network_and_reserved_labels():
    with pytest.raises(ConfigError, match="never has a network"):
        DockerSandboxConfig(network=True)
    with pytest.raises(ConfigError, match="reserved"):
        DockerSandboxConfig(labels={"skyrl.owner.pid": "1"})
    with pytest.raises(ConfigError, match="absolute"):
        DockerSandboxConfig(workdir="rel")


def test_exec_result_reasons():
    assert ExecResult("", "", 0).reason is EndReason.EXITED and ExecResult("", "", 0).ok
    assert ExecResult("", "", 124, timed_out=True).reason is EndReason.TIMED_OUT
    assert ExecResult("", "", 137, oom_killed=True, signal=9).reason is EndReason.OOM_KILLED
    assert ExecResult("", "", 152, signal=signal.SIGXCPU).reason is EndReason.CPU_TIME_LIMIT
    assert ExecResult("", "", 153, signal=signal.SIGXFSZ).reason is EndReason.FILE_SIZE_LIMIT
    assert "timed out" in ExecResult("", "", 124, timed_out=True, duration_s=1).describe()


def test_errors_are_sandbox_errors_and_builtins():
    assert issubclass(SandboxFileNotFoundError, SandboxError)
    assert issubclass(SandboxFileNotFoundError, FileNotFoundError)
    err = pickle.loads(pickle.dumps(SandboxFileNotFoundError("x")))
    assert str(err) == "x"


def test_missing_docker_sdk_names_the_extra(monkeypatch):
    import sys

    from skyrl_gym.errors import MissingDependencyError
    from skyrl_gym.sandbox import dockerlib

    monkeypatch.setitem(sys.modules, "docker", None)
    monkeypatch.setattr(dockerlib, "_client", None)
    with pytest.raises(MissingDependencyError, match=r"skyrl-stack\[docker\]"):
        dockerlib.docker_client()
