"""The sandbox guide's first example (docs/guides/sandboxes.md, once in the README) runs as written."""

import re
from pathlib import Path

import pytest

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "guides" / "sandboxes.md"


@pytest.mark.docker
def test_readme_sandbox_example_runs(sandbox_images):
    section = GUIDE.read_text().split("# Sandboxes", 1)[1]
    code = re.search(r"```python[^\n]*\n(.*?)```", section, re.S).group(1)
    namespace: dict = {}
    exec(compile(code, "docs/guides/sandboxes.md", "exec"), namespace)  # it asserts 6 * 7 == 42 itself
    assert namespace["r"].timed_out  # the example's runaway loop was stopped at its deadline
