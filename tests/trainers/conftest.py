"""Fixtures of the trainer tests."""

import pytest
import torch


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory):
    """A tiny random model (one layer, hidden size 32, the SmolLM2 tokenizer) saved once per
    session, for runs that load ``--model`` from a directory (tests only read it)."""
    from skyrl_agent.models import tiny_random_model

    path = tmp_path_factory.mktemp("tiny-model")
    model, tok = tiny_random_model(hidden_size=32, num_layers=1)
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return path


@pytest.fixture
def restore_threads():
    """``train`` sets torch's thread count for the whole process; give later tests theirs back."""
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)
