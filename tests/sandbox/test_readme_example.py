"""The README's sandbox example runs as written."""

import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[2] / "README.md"


@pytest.mark.docker
def test_readme_sandbox_example_runs(sandbox_images):
    section = README.read_text().split("## Sandboxes", 1)[1]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    exec(compile(code, "README.md#sandboxes", "exec"), {})
