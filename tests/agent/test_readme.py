"""The agent-runtime guide's first example (docs/guides/agent-runtime.md, once in the README) runs
as written (with the bundled model)."""

import re
from pathlib import Path

import pytest

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "guides" / "agent-runtime.md"


@pytest.mark.slow
def test_readme_runtime_example_runs(capsys):
    text = GUIDE.read_text(encoding="utf-8")
    section = text.split("# The agent runtime (`skyrl_agent`)", 1)[1]
    code = re.search(r"```python[^\n]*\n(.*?)```", section, re.S).group(1)
    scope = {"__name__": "readme_example"}
    exec(compile(code, "docs/guides/agent-runtime.md", "exec"), scope)
    result, traj = scope["result"], scope["traj"]
    assert result.stats.episodes == 4 and result.stats.masked == 0
    assert "mean reward" in capsys.readouterr().out
    traj.validate()
    assert traj.env_id == "calculator" and traj.num_turns >= 1
    scope["policy"].close()
