"""The envs guide's `search` and `judge_qa` examples (docs/guides/envs.md, once in the README) run
as written."""

import re
from pathlib import Path

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "guides" / "envs.md"


def _run(section_title: str) -> None:
    section = GUIDE.read_text(encoding="utf-8").split(section_title, 1)[1]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    exec(compile(code, f"docs/guides/envs.md:{section_title}", "exec"), {"__name__": "readme_example"})


def test_readme_search_example_runs(capsys):
    _run("## Retrieval search env (`search`)")
    out = capsys.readouterr().out
    expect = "'turns': 3, 'searches': 2, 'invalid_turns': 0, 'answered': True, 'correct': True, 'answer_supported': True"
    assert out == "{" + expect + "}\n"


def test_readme_judge_example_runs(capsys):
    _run("## An env graded by an LLM judge (`judge_qa`)")
    assert capsys.readouterr().out == "1.0 False\n"
