"""The shared terminal tools and make_sandbox, on the local backend (Docker: test_docker.py,
tests/envs/test_code_docker.py, tests/harbor)."""

from __future__ import annotations

import json
import pickle
import shutil

import pytest

from skyrl_gym.errors import ConfigError, SandboxError, ToolDefinitionError
from skyrl_gym.sandbox import (
    LocalSandbox,
    MiB,
    SandboxFileNotFoundError,
    SandboxFileTooLargeError,
    SandboxLimits,
    SandboxNotAFileError,
    SandboxPathError,
    SandboxSpec,
    TerminalSettings,
    TerminalTools,
    Workspace,
    make_sandbox,
)
from skyrl_gym.tools import ErrorKind, call_tools

FAST = SandboxLimits(timeout_s=5, grace_s=1, memory_bytes=512 * MiB, pids=64, output_bytes=64 * 1024)


class Host:
    """What an env gives the terminal tools: a workspace and a submitted flag."""

    def __init__(self, sandbox) -> None:
        self._ws = Workspace(sandbox, sandbox.workdir)
        self.submitted = False

    @property
    def workspace(self) -> Workspace:
        return self._ws


def call(name: str, **arguments) -> str:
    return f"<tool_call>{json.dumps({'name': name, 'arguments': arguments})}</tool_call>"


@pytest.fixture
def host():
    with make_sandbox(SandboxSpec("local", FAST)) as sb:
        assert isinstance(sb, LocalSandbox)
        yield Host(sb)


def run(tools, *turn):
    return call_tools([tools], "".join(turn), timeout=None)


def test_typed_path_errors_of_the_sandbox(host):
    sb = host.workspace.sandbox
    sb.write_file("big.txt", "x" * 100)
    sb.exec("mkdir d")
    with pytest.raises(SandboxFileNotFoundError):
        sb.read_file("nope")
    with pytest.raises(SandboxNotAFileError, match="not a regular file"):
        sb.read_file("d")
    with pytest.raises(SandboxFileTooLargeError, match="max_bytes"):
        sb.read_file("big.txt", max_bytes=10)
    with pytest.raises(SandboxPathError, match="writing"):
        sb.write_file("big.txt/inside", "x")  # a file where a directory should be
    for cls in (SandboxFileNotFoundError, SandboxNotAFileError, SandboxFileTooLargeError):
        assert issubclass(cls, SandboxPathError) and issubclass(cls, SandboxError)
        assert type(pickle.loads(pickle.dumps(cls("m")))) is cls


def test_the_tools_an_env_offers_in_its_order(host):
    tools = TerminalTools(host, tools=("bash", "read_file", "write_file", "submit"))
    assert tools.get_tool_names() == ["bash", "read_file", "write_file", "submit"]
    assert TerminalTools(host).get_tool_names() == [
        "bash",
        "view",
        "str_replace",
        "create",
        "read_file",
        "write_file",
        "submit",
    ]
    with pytest.raises(ToolDefinitionError, match="Did you mean 'view'"):
        TerminalTools(host, tools=("bash", "veiw"))


def test_bash_files_and_edits(host):
    tools = TerminalTools(host, settings=TerminalSettings(command_timeout_s=1, max_observation_chars=300))
    (r,) = run(tools, call("bash", command="echo out; echo err >&2; exit 3"))
    assert r.ok and r.content == "out\n\nerr\n[exit code 3]"
    (r,) = run(tools, call("bash", command="sleep 10"))
    assert "[the command timed out after 1 s and was killed]" in r.content
    (r,) = run(tools, call("bash", command="seq 1 10000"))
    assert len(r.content) <= 300 and "characters truncated" in r.content
    (w, rd) = run(
        tools,
        call("write_file", path="pkg/a.py", content="x = 1\ny = 2\n"),
        call("read_file", path="pkg/a.py"),
    )
    assert w.content == "wrote 12 bytes to pkg/a.py" and rd.content == "x = 1\ny = 2\n"
    (r,) = run(tools, call("view", path="pkg/a.py", start_line=2))
    assert r.content == "2\ty = 2"
    (r,) = run(tools, call("str_replace", path="pkg/a.py", old_str="y = 2", new_str="y = 3"))
    assert r.content.startswith("Edited pkg/a.py") and "y = 3" in r.content
    (r,) = run(tools, call("create", path="pkg/a.py", file_text="again"))
    assert r.error is ErrorKind.TOOL_ERROR and "exists" in r.content
    (r,) = run(tools, call("view", path="."))
    assert r.content == ".\npkg\npkg/a.py"
    (r,) = run(tools, call("submit"))
    assert host.submitted and tools.calls["bash"] == 3 and tools.calls["submit"] == 1


def test_the_models_path_mistakes_are_tool_errors(host):
    tools = TerminalTools(host, settings=TerminalSettings(max_file_bytes=10))
    host.workspace.sandbox.write_file("big.txt", "x" * 100)
    host.workspace.sandbox.exec("mkdir d")
    cases = {
        call("read_file", path="nope.txt"): "FileNotFoundError: no file 'nope.txt'",
        call("read_file", path="d"): "IsADirectoryError: d is not a regular file",
        call("read_file", path="big.txt"): "ValueError: big.txt is larger than 10 bytes",
        call("write_file", path="big.txt/x", content="x"): "OSError: could not write 'big.txt/x'",
        call("view", path="nope.py"): "FileNotFoundError: nope.py does not exist",
        call("str_replace", path="big.txt", old_str="y", new_str="z"): "larger than 10 bytes",
    }
    for turn, fragment in cases.items():
        (r,) = run(tools, turn)
        assert r.error is ErrorKind.TOOL_ERROR and fragment in r.content, (turn, r.content)
    shutil.rmtree(host.workspace.root)  # as the model's `rm -rf` of its working directory would
    (r,) = run(tools, call("bash", command="true"))
    assert r.error is ErrorKind.TOOL_ERROR and "no longer exists" in r.content


def test_a_dead_sandbox_raises_out_of_the_tools(host):
    tools = TerminalTools(host)
    host.workspace.sandbox.close()
    for turn in (
        call("bash", command="true"),
        call("read_file", path="a"),
        call("write_file", path="a", content=""),
    ):
        with pytest.raises(SandboxError, match="closed"):
            run(tools, turn)


def test_sandbox_specs_are_checked_and_pickle():
    with pytest.raises(ConfigError, match="unknown sandbox 'vm'"):
        SandboxSpec("vm")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="needs kind='docker'"):
        SandboxSpec("local", pool_size=2)
    with pytest.raises(ConfigError, match="start_timeout_s"):
        SandboxSpec("docker", start_timeout_s=0)
    spec = SandboxSpec("docker", FAST, profile="task", workdir="/app", env={"A": "1"}, labels={"x": "y"})
    assert pickle.loads(pickle.dumps(spec)) == spec
    config = spec.docker_config()
    assert (config.profile.value, config.workdir, dict(config.env), dict(config.labels)) == (
        "task",
        "/app",
        {"A": "1"},
        {"x": "y"},
    )
    assert SandboxSpec("docker").docker_config().workdir == "/workspace"
    local = SandboxSpec("local", FAST, ro_paths=["/opt"], env={"HOME": "/tmp"}).local_config()
    assert (local.limits, local.ro_paths, dict(local.env)) == (FAST, ("/opt",), {"HOME": "/tmp"})
