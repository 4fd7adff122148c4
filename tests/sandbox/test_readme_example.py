"""The README's sandbox example runs as written."""

import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[2] / "README.md"


@pytest.mark.docker
def test_readme_sandbox_example_runs(sandbox_images):
    section = README.read_text().split("## Sandboxes", 1)[1]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    namespace: dict = {}
    exec(compile(code, "README.md#sandboxes", "exec"), namespace)  # the example asserts 6 * 7 == 42 itself
    assert namespace["r"].timed_out  # the example's runaway loop was stopped at its deadline
