"""The Python code tool runs on the sandbox layer (local and Docker)."""

import pytest

from skyrl_gym.sandbox import DockerSandbox, DockerSandboxConfig, LocalSandbox, SandboxLimits
from skyrl_gym.sandbox.python_tool import PythonTool, run_python
from skyrl_gym.tools import ToolGroup

LIMITS = SandboxLimits(timeout_s=3, grace_s=1)


@pytest.fixture
def local_tool():
    with LocalSandbox(limits=LIMITS) as sb:
        yield PythonTool(sb)


def test_is_a_tool_group_with_a_python_tool(local_tool):
    assert isinstance(local_tool, ToolGroup) and local_tool.get_tool_names() == ["python"]
    assert local_tool.execute_tool("python", code="print(6 * 7)") == "42"
    assert local_tool.last_result.ok


def test_errors_come_back_as_text(local_tool):
    out = local_tool.execute_tool("python", code="1 / 0")
    assert "ZeroDivisionError" in out and out.endswith("[exit code 1]")
    assert local_tool.python(code="import time; time.sleep(100)").endswith(
        "[timed out after 3 s: the program was killed]"
    )
    assert local_tool.python(code="pass") == "[no output]"
    assert "must be a string" in local_tool.python(code=123)


def test_files_persist_between_calls_but_not_state(local_tool):
    local_tool.python(code="open('data.txt', 'w').write('kept')")
    assert local_tool.python(code="print(open('data.txt').read())") == "kept"
    assert "NameError" in local_tool.python(code="print(undefined_name)")


def test_long_programs_go_through_a_file(local_tool):
    code = "x = 1\n" * 30_000 + "print('long ok')"
    assert local_tool.python(code=code) == "long ok"
    assert local_tool.sandbox.exec("ls -A").stdout == ""  # the temporary file is gone


def test_output_flood_is_truncated(local_tool):
    out = local_tool.python(code="print('x' * 5_000_000)")
    assert out.endswith("[output truncated in the middle]") and len(out) < 1_100_000


@pytest.mark.docker
def test_runs_in_a_strict_docker_sandbox(sandbox_images):
    cfg = DockerSandboxConfig(image=sandbox_images["python"], limits=LIMITS)
    with DockerSandbox(cfg) as sb:
        tool = PythonTool(sb)
        assert tool.python(code="import os; print(os.getuid(), os.getcwd())") == "65534 /workspace"
        r = run_python(sb, "import os; print(sorted(os.listdir('/sys/class/net')))")
        assert r.stdout == "['lo']\n"
