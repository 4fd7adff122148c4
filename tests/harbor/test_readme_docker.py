"""The README's "Harbor tasks" example runs as written."""

import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[2] / "README.md"


@pytest.mark.docker
def test_readme_harbor_example_runs(base_images, capsys):
    section = README.read_text(encoding="utf-8").split("## Harbor tasks", 1)[1]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    scope = {"__name__": "readme_example"}
    exec(compile(code, "README.md:harbor", "exec"), scope)
    assert (scope["oracle"].reward, scope["nothing"].reward) == (1.0, 0.0)
    assert capsys.readouterr().out.splitlines() == ["180.0 no-network", "1.0 0.0"]
