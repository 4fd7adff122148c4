"""The Tinker-compatible server's OpenAI-compatible surface (``/oai/api/v1``), through the real
``openai`` client and the real ``tinker`` client: base models and sampler checkpoints by name,
chat (plain and streamed) and text completions, the checkpoint's own weights sampled, and
every mistake a 4xx in OpenAI's shape naming ``model``."""

from __future__ import annotations

import httpx
import pytest

openai = pytest.importorskip("openai", reason="the openai client is not installed")
tinker = pytest.importorskip("tinker", reason="the tinker client is not installed (the `tinker` extra)")

from tinker import types  # noqa: E402

from integrations.tinker import TINY_RANDOM_MODEL, TinkerServer, TinkerServerConfig  # noqa: E402

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """A server with one trained LoRA model's sampler checkpoint, and that checkpoint's path."""
    root = tmp_path_factory.mktemp("oai")
    with TinkerServer(TinkerServerConfig(checkpoint_dir=str(root), api_keys=("tml-oai",))) as server:
        client = tinker.ServiceClient(base_url=server.url, api_key="tml-oai")
        training = client.create_lora_training_client(TINY_RANDOM_MODEL, rank=4, seed=0).result()
        tok = training.get_tokenizer()
        seq = tok.encode("an OpenAI client pokes at a checkpoint")
        datum = types.Datum(
            model_input=types.ModelInput.from_ints(seq[:-1]),
            loss_fn_inputs={"target_tokens": seq[1:], "weights": [1.0] * (len(seq) - 1)},
        )
        training.forward_backward([datum], "cross_entropy").result()
        training.optim_step(types.AdamParams(learning_rate=5e-2)).result()
        path = training.save_weights_for_sampler("oai").result().path
        sampler = client.create_sampling_client(model_path=path).result()
        yield server, path, sampler, seq
        client.close("success").result()


def _openai(server, key="tml-oai"):
    return openai.OpenAI(base_url=f"{server.url}/oai/api/v1", api_key=key, max_retries=0)


def test_models_chat_stream_and_completions_on_a_base_model(served):
    server, _, _, _ = served
    oai = _openai(server)
    assert TINY_RANDOM_MODEL in {m.id for m in oai.models.list()}
    chat = oai.chat.completions.create(
        model=TINY_RANDOM_MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=4, temperature=0
    )
    assert chat.model == TINY_RANDOM_MODEL and chat.choices[0].message.role == "assistant"
    assert chat.usage.completion_tokens == 4 and chat.usage.prompt_tokens > 0
    chunks = list(
        oai.chat.completions.create(
            model=TINY_RANDOM_MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=4,
            temperature=0, stream=True,
        )
    )  # fmt: skip
    streamed = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert streamed == chat.choices[0].message.content  # greedy: the same text, in pieces
    text = oai.completions.create(model=TINY_RANDOM_MODEL, prompt="one two", max_tokens=3, temperature=0, n=2)
    assert len(text.choices) == 2 and text.usage.completion_tokens == 6


def test_a_sampler_checkpoint_samples_its_own_weights(served):
    server, path, sampler, seq = served
    oai = _openai(server)
    prompt = seq[:5]
    direct = sampler.sample(
        types.ModelInput.from_ints(prompt), 1, types.SamplingParams(max_tokens=6, temperature=0.0)
    ).result()
    expected = direct.sequences[0].tokens
    for name in (path, f"{TINY_RANDOM_MODEL};{path}"):
        got = _ids(oai, name, prompt)
        assert got == expected[: len(got)] and got, (got, expected)
    assert _ids(oai, TINY_RANDOM_MODEL, prompt) != got  # the trained adapters moved the continuation


def _ids(oai, model, prompt):
    """The token ids of a greedy completion (vLLM's ``return_token_ids``, which skyrl serve has)."""
    out = oai.completions.create(
        model=model, prompt=prompt, max_tokens=6, temperature=0, extra_body={"return_token_ids": True}
    )
    assert out.model == model
    return out.choices[0].model_extra["token_ids"]


@pytest.mark.parametrize(
    ("body", "status", "param", "says"),
    [
        (b"not json", 400, None, "JSON object"),
        (b"[1]", 400, None, "JSON object"),
        (b'{"prompt": "x"}', 400, "model", "model is required"),
        (b'{"model": "no-such-model", "prompt": "x"}', 404, "model", "unknown base model"),
        (b'{"model": "tinker://nobody/sampler_weights/x", "prompt": "x"}', 404, "model", "no checkpoint"),
        (b'{"model": "tinker://../etc", "prompt": "x"}', 400, "model", "tinker://"),
        (b'{"model": "tiny-random", "prompt": "x", "max_tokens": "many"}', 400, "max_tokens", "max_tokens"),
    ],
)
def test_mistakes_are_4xx_in_openai_s_shape(served, body, status, param, says):
    server, _, _, _ = served
    r = httpx.post(
        f"{server.url}/oai/api/v1/completions",
        content=body,
        headers={"Authorization": "Bearer tml-oai", "content-type": "application/json"},
    )
    assert r.status_code == status, r.text
    error = r.json()["error"]
    assert error["param"] == param and says in error["message"], error


def test_the_checkpoint_s_base_must_match_and_keys_are_checked(served):
    server, path, _, _ = served
    with pytest.raises(openai.BadRequestError, match="was trained on 'tiny-random'"):
        _openai(server).completions.create(model=f"smollm2-135m;{path}", prompt="x", max_tokens=1)
    with pytest.raises(openai.AuthenticationError):
        _openai(server, key="tml-wrong").models.list()
    r = httpx.post(
        f"{server.url}/oai/api/v1/embeddings",
        json={"model": TINY_RANDOM_MODEL},
        headers={"X-API-Key": "tml-oai"},
    )
    assert r.status_code == 404 and "not served" in r.json()["error"]["message"]
