"""The README's "Give an env tools" example runs as written."""

import re
from pathlib import Path

README = Path(__file__).resolve().parents[2] / "README.md"


def test_readme_tools_example_runs(capsys):
    text = README.read_text(encoding="utf-8")
    section = text.split("## Give an env tools", 1)[1]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    exec(compile(code, "README.md:give-an-env-tools", "exec"), {"__name__": "readme_example"})
    assert capsys.readouterr().out == "Unknown tool 'ad'. Did you mean 'add'? Available tools: add.\n"
