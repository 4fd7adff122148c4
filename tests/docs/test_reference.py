"""The committed reference pages equal what docs/gen_reference.py writes from today's code."""

from __future__ import annotations

import importlib.util

from tests.docs._markdown import REPO


def _generator():
    spec = importlib.util.spec_from_file_location("gen_reference", REPO / "docs" / "gen_reference.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_reference_pages_are_fresh():
    stale = [
        path.relative_to(REPO).as_posix()
        for path, text in _generator().pages().items()
        if not path.exists() or path.read_text(encoding="utf-8") != text
    ]
    assert not stale, f"stale reference pages {stale}: run `python docs/gen_reference.py` and commit them"


def test_reference_covers_every_public_module_and_documented_name():
    gen = _generator()
    pages = gen.pages()
    text = pages[REPO / "docs" / "reference" / "trainers.md"]
    for module in gen.public_modules("trainers"):
        assert f"## `{module}`" in text
    assert "### class `TrainConfig`" in text and "| `lr` | `float` | `4e-05` | AdamW learning rate. |" in text
    assert '<a id="trainers.advantages.compute_advantages"></a>' in text
    assert all(p.name.endswith(".md") for p in pages) and len(pages) == len(gen.PACKAGES)
