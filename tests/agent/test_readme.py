"""The agent-runtime guide's first example (docs/guides/agent-runtime.md, once in the README) runs
as written (with the bundled model)."""

import pytest

from tests.docs._markdown import example_after


@pytest.mark.slow
def test_readme_runtime_example_runs(capsys):
    block = example_after("docs/guides/agent-runtime.md", "# The agent runtime (`skyrl_agent`)")
    scope = {"__name__": "readme_example"}
    exec(compile(block.code, block.where, "exec"), scope)
    result, traj = scope["result"], scope["traj"]
    assert result.stats.episodes == 4 and result.stats.masked == 0
    assert "mean reward" in capsys.readouterr().out
    traj.validate()
    assert traj.env_id == "calculator" and traj.num_turns >= 1
    scope["policy"].close()
