"""The Tinker guide's example (docs/guides/tinker.md, once in the README) runs as written (with the
tiny model for speed)."""

from __future__ import annotations

import pytest

from tests.docs._markdown import example_after


@pytest.mark.slow
def test_readme_tinker_example_runs(tmp_path, capsys):
    pytest.importorskip("tinker")
    block = example_after("docs/guides/tinker.md", "# Tinker-compatible API")
    code = block.code
    assert '"smollm2-135m"' in code and '"runs/tinker"' in code
    code = code.replace('"smollm2-135m"', '"tiny-random"').replace('"runs/tinker"', repr(str(tmp_path)))
    scope = {"__name__": "readme_example"}
    exec(compile(code, block.where, "exec"), scope)
    losses = [
        float(line.split()[-1]) for line in capsys.readouterr().out.splitlines() if line.startswith("loss:")
    ]
    assert len(losses) == 3 and losses[-1] < losses[0]
    assert scope["path"].startswith("tinker://") and scope["path"].endswith("/weights/step-3")
    assert (tmp_path / scope["path"][len("tinker://") :] / "meta.json").exists()
