"""The sandbox guide's first example (docs/guides/sandboxes.md, once in the README) runs as written."""

import pytest

from tests.docs._markdown import example_after


@pytest.mark.docker
def test_readme_sandbox_example_runs(sandbox_images):
    block = example_after("docs/guides/sandboxes.md", "# Sandboxes")
    namespace: dict = {}
    exec(compile(block.code, block.where, "exec"), namespace)  # it asserts 6 * 7 == 42 itself
    assert namespace["r"].timed_out  # the example's runaway loop was stopped at its deadline
