"""The envs guide's `search` and `judge_qa` examples (docs/guides/envs.md, once in the README) run
as written."""

from tests.docs._markdown import example_after


def _run(section_title: str) -> None:
    block = example_after("docs/guides/envs.md", section_title)
    exec(compile(block.code, block.where, "exec"), {"__name__": "readme_example"})


def test_readme_search_example_runs(capsys):
    _run("## Retrieval search env (`search`)")
    out = capsys.readouterr().out
    expect = "'turns': 3, 'searches': 2, 'invalid_turns': 0, 'answered': True, 'correct': True, 'answer_supported': True"
    assert out == "{" + expect + "}\n"


def test_readme_judge_example_runs(capsys):
    _run("## An env graded by an LLM judge (`judge_qa`)")
    assert capsys.readouterr().out == "1.0 False\n"
