"""The envs guide's "Give an env tools" example (docs/guides/envs.md, once in the README) runs as
written."""

from tests.docs._markdown import example_after


def test_readme_tools_example_runs(capsys):
    block = example_after("docs/guides/envs.md", "## Give an env tools")
    exec(compile(block.code, block.where, "exec"), {"__name__": "readme_example"})
    assert capsys.readouterr().out == "Unknown tool 'ad'. Did you mean 'add'? Available tools: add.\n"
