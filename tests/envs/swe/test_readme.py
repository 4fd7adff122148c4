"""The SWE guide's example (docs/guides/swe.md, once in the README) runs as written and prints what
its comments say."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

GUIDE = Path(__file__).resolve().parents[3] / "docs" / "guides" / "swe.md"


@pytest.mark.docker
def test_readme_swe_example(capsys):
    section = GUIDE.read_text(encoding="utf-8").split("# SWE repair (`swe`)", 1)[1]
    code = re.search(r"```python[^\n]*\n(.*?)```", section, re.S).group(1)
    exec(compile(code, "docs/guides/swe.md", "exec"), {"__name__": "readme_swe"})
    printed = capsys.readouterr().out.splitlines()
    expected = [line.split("#", 1)[1].strip() for line in code.splitlines() if line.startswith("print(")]
    assert printed == expected
