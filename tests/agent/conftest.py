"""Fixtures of the runtime tests: the SmolLM2 tokenizer and a tiny random model that uses it."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))


@pytest.fixture(scope="session")
def tokenizer():
    from skyrl_agent.models import load_tokenizer

    return load_tokenizer()


@pytest.fixture(scope="session")
def tiny(tokenizer):
    """(model, tokenizer): a 2-layer random Llama with the SmolLM2 vocabulary."""
    import torch

    from skyrl_agent.models import tiny_random_model

    torch.set_num_threads(2)
    return tiny_random_model(tokenizer)


@pytest.fixture
def tiny_policy(tiny):
    from skyrl_agent.policies.hf import HFPolicy

    model, tok = tiny
    policy = HFPolicy(model, tok, seed=0)
    yield policy
    policy.close()


@pytest.fixture
def static_policy():
    """``StaticBatchPolicy`` (``bench/static_policy.py``): the micro-batcher the engine replaced,
    the tests' plain reference decode (one request at a time with ``max_batch_size=1``)."""
    from static_policy import StaticBatchPolicy

    made = []

    def make(*args, **kw):
        made.append(StaticBatchPolicy(*args, **kw))
        return made[-1]

    yield make
    for policy in made:
        policy.close()


@pytest.fixture(scope="session")
def hf_server(tiny):
    """``skyrl serve``'s app on 127.0.0.1 in a thread, the tiny random model behind it (one for
    the session: starting it takes about half a minute; tests use session names of their own)."""
    from skyrl_agent.policies.hf import HFPolicy
    from skyrl_agent.server import ServerConfig, ServerThread

    model, tok = tiny
    policy = HFPolicy(model, tok, seed=0)
    with ServerThread(policy, ServerConfig(model_name="tiny", max_model_len=512)) as server:
        yield server
    policy.close()


@pytest.fixture
def echo_env():
    """:class:`tests.agent.envs.EchoEnv` registered under ``ECHO_ID`` for the test; its id."""
    import skyrl_gym
    from tests.agent.envs import ECHO_ID

    skyrl_gym.register(ECHO_ID, "tests.agent.envs:EchoEnv")
    yield ECHO_ID
    skyrl_gym.deregister(ECHO_ID)
