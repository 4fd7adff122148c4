"""The Harbor guide's example (docs/guides/harbor.md, once in the README) runs as written."""

import re
from pathlib import Path

import pytest

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "guides" / "harbor.md"


@pytest.mark.docker
def test_readme_harbor_example_runs(base_images, capsys):
    section = GUIDE.read_text(encoding="utf-8").split("# Harbor tasks", 1)[1]
    code = re.search(r"```python[^\n]*\n(.*?)```", section, re.S).group(1)
    scope = {"__name__": "readme_example"}
    exec(compile(code, "docs/guides/harbor.md", "exec"), scope)
    assert (scope["oracle"].reward, scope["nothing"].reward) == (1.0, 0.0)
    assert capsys.readouterr().out.splitlines() == ["180.0 no-network", "1.0 0.0"]
