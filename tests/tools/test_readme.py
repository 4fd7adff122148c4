"""The envs guide's "Give an env tools" example (docs/guides/envs.md, once in the README) runs as
written."""

import re
from pathlib import Path

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "guides" / "envs.md"


def test_readme_tools_example_runs(capsys):
    text = GUIDE.read_text(encoding="utf-8")
    section = text.split("## Give an env tools", 1)[1]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    exec(compile(code, "docs/guides/envs.md:give-an-env-tools", "exec"), {"__name__": "readme_example"})
    assert capsys.readouterr().out == "Unknown tool 'ad'. Did you mean 'add'? Available tools: add.\n"
