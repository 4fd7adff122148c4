"""The README's "SWE repair" example runs as written and prints what its comments say."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[3] / "README.md"


@pytest.mark.docker
def test_readme_swe_example(capsys):
    section = README.read_text(encoding="utf-8").split("## SWE repair (`swe`)", 1)[1]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    exec(compile(code, "README.md:swe", "exec"), {"__name__": "readme_swe"})
    printed = capsys.readouterr().out.splitlines()
    expected = [line.split("#", 1)[1].strip() for line in code.splitlines() if line.startswith("print(")]
    assert printed == expected
