"""The SWE guide's example (docs/guides/swe.md, once in the README) runs as written and prints what
its comments say."""

from __future__ import annotations

import pytest

from tests.docs._markdown import example_after


@pytest.mark.docker
def test_readme_swe_example(capsys):
    block = example_after("docs/guides/swe.md", "# SWE repair (`swe`)")
    code = block.code
    exec(compile(code, block.where, "exec"), {"__name__": "readme_swe"})
    printed = capsys.readouterr().out.splitlines()
    expected = [line.split("#", 1)[1].strip() for line in code.splitlines() if line.startswith("print(")]
    assert printed == expected
