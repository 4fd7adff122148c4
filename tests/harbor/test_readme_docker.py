"""The Harbor guide's example (docs/guides/harbor.md, once in the README) runs as written."""

import pytest

from tests.docs._markdown import example_after


@pytest.mark.docker
def test_readme_harbor_example_runs(base_images, capsys):
    block = example_after("docs/guides/harbor.md", "# Harbor tasks")
    scope = {"__name__": "readme_example"}
    exec(compile(block.code, block.where, "exec"), scope)
    assert (scope["oracle"].reward, scope["nothing"].reward) == (1.0, 0.0)
    assert capsys.readouterr().out.splitlines() == ["180.0 no-network", "1.0 0.0"]
