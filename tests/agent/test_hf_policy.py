import asyncio

import pytest
import torch

from skyrl_agent.policies._sampling import find_stop
from skyrl_agent.policies.hf import HFPolicy
from skyrl_agent.types import FinishReason, GenerateRequest, SamplingParams


def _full_logprobs(model, prompt, new):
    ids = torch.tensor([list(prompt) + list(new)])
    with torch.no_grad():
        lp = torch.log_softmax(model(ids).logits[0, :-1].float(), -1)
    return lp[len(prompt) - 1 :].gather(1, ids[0, len(prompt) :, None])[:, 0]


def test_logprobs_are_raw_model_logprobs_and_batching_matches_single(tiny, tiny_policy):
    model, tok = tiny
    ids = tok.encode("The quick brown fox jumps over the lazy dog")
    reqs = [
        GenerateRequest(ids[: 2 + 3 * i], SamplingParams(max_tokens=12, seed=i, temperature=0.7, top_k=50))
        for i in range(4)
    ]
    batched = tiny_policy.generate_sync(reqs)
    for req, out in zip(reqs, batched, strict=True):
        single = tiny_policy.generate_sync([req])[0]
        assert single.token_ids == out.token_ids  # left padding does not change the sample
        assert len(out.logprobs) == len(out.token_ids) == 12
        assert out.finish_reason == FinishReason.LENGTH
        ref = _full_logprobs(model, req.prompt_ids, out.token_ids)
        # temperature 0.7 sampled the token, but the returned logprob is at temperature 1
        assert torch.allclose(ref, torch.tensor(out.logprobs), atol=1e-4)


def test_seeds_repeat_and_differ(tiny_policy, tokenizer):
    ids = tokenizer.encode("Once upon a time")
    a = tiny_policy.generate_sync([GenerateRequest(ids, SamplingParams(max_tokens=16, seed=5))])[0]
    b = tiny_policy.generate_sync([GenerateRequest(ids, SamplingParams(max_tokens=16, seed=5))])[0]
    c = tiny_policy.generate_sync([GenerateRequest(ids, SamplingParams(max_tokens=16, seed=6))])[0]
    assert a.token_ids == b.token_ids
    assert a.token_ids != c.token_ids


def test_stop_strings_and_stop_tokens_end_generation(tiny_policy, tokenizer):
    ids = tokenizer.encode("Once upon a time")
    greedy = SamplingParams(max_tokens=10, temperature=0)
    full = tiny_policy.generate_sync([GenerateRequest(ids, greedy)])[0]
    # a stop string made of the text of tokens 3-4 (as the model writes it)
    stop = tokenizer.decode(full.token_ids[3:5])
    out = tiny_policy.generate_sync([GenerateRequest(ids, greedy.replace(stop=(stop,)))])[0]
    assert out.finish_reason == FinishReason.STOP and out.matched_stop == stop
    assert stop in out.text
    assert out.token_ids == full.token_ids[: len(out.token_ids)] and len(out.token_ids) <= 5
    out = tiny_policy.generate_sync(
        [GenerateRequest(ids, greedy.replace(stop_token_ids=(full.token_ids[2],)))]
    )[0]
    first = full.token_ids.index(full.token_ids[2])
    assert out.token_ids == full.token_ids[: first + 1] and out.matched_stop == full.token_ids[2]


def test_the_static_baseline_micro_batches_concurrent_calls(tiny, tokenizer, monkeypatch, static_policy):
    tiny_policy = static_policy(*tiny, seed=0)  # bench/static_policy.py, the engine's baseline
    sizes = []
    real = tiny_policy._generate_batch

    def spy(requests):
        sizes.append(len(requests))
        return real(requests)

    monkeypatch.setattr(tiny_policy, "_generate_batch", spy)
    ids = tokenizer.encode("Hello")

    async def main():
        return await asyncio.gather(
            *[
                tiny_policy.generate([GenerateRequest(ids, SamplingParams(max_tokens=4, seed=i))])
                for i in range(8)
            ]
        )

    outs = asyncio.run(main())
    assert len(outs) == 8 and all(len(o[0].token_ids) == 4 for o in outs)
    assert sum(sizes) == 8 and max(sizes) > 1, sizes


def test_update_weights_in_place(tiny, tokenizer):
    from skyrl_agent.models import tiny_random_model

    model_a, _ = tiny_random_model(tokenizer, seed=1)
    model_b, _ = tiny_random_model(tokenizer, seed=2)
    pa, pb = HFPolicy(model_a, tokenizer), HFPolicy(model_b, tokenizer)
    req = GenerateRequest(tokenizer.encode("Hello world"), SamplingParams(max_tokens=8, temperature=0))
    out_b = pb.generate_sync([req])[0]
    assert pa.generate_sync([req])[0].token_ids != out_b.token_ids
    assert pa.update_weights(model_b.state_dict()) > 0
    assert pa.weights_version == 1
    out_a = pa.generate_sync([req])[0]
    assert out_a.token_ids == out_b.token_ids
    with pytest.raises(ValueError, match="unknown parameter names"):
        pa.update_weights({"nope": torch.zeros(1)})
    pa.close()
    pb.close()


@pytest.mark.slow
def test_bundled_smollm2_generates_a_chat_reply():
    policy = HFPolicy.from_pretrained()
    tok = policy.tokenizer
    prompt = tok.apply_chat_template(
        [{"role": "user", "content": "What is the capital of France?"}],
        add_generation_prompt=True,
        tokenize=False,
    )
    ids = tok.encode(prompt)
    out = policy.generate_sync([GenerateRequest(ids, SamplingParams(max_tokens=24, temperature=0))])[0]
    assert "Paris" in out.text
    ref = _full_logprobs(policy.model, ids, out.token_ids)
    assert torch.allclose(ref, torch.tensor(out.logprobs), atol=1e-3)
    policy.close()


def test_policy_survives_an_interrupted_event_loop(tiny_policy, tokenizer):
    ids = tokenizer.encode("Hello")

    async def interrupted():
        task = asyncio.ensure_future(
            tiny_policy.generate([GenerateRequest(ids, SamplingParams(max_tokens=50))])
        )
        await asyncio.sleep(0)  # queued, then the loop ends before the batch starts
        task.cancel()

    asyncio.run(interrupted())

    async def fresh():
        return await tiny_policy.generate([GenerateRequest(ids, SamplingParams(max_tokens=3, seed=1))])

    out = asyncio.run(fresh())[0]
    assert len(out.token_ids) == 3


def test_filters_reduce_to_greedy_at_their_limits(tiny_policy, tokenizer):
    ids = tokenizer.encode("Once upon a time there was")
    greedy = tiny_policy.generate_sync([GenerateRequest(ids, SamplingParams(max_tokens=8, temperature=0))])[0]
    for params in (
        SamplingParams(max_tokens=8, top_k=1, seed=1),
        SamplingParams(max_tokens=8, top_p=1e-6, seed=2),
        SamplingParams(max_tokens=8, temperature=0, seed=3),
    ):
        out = tiny_policy.generate_sync([GenerateRequest(ids, params)])[0]
        assert out.token_ids == greedy.token_ids, params


def test_top_k_restricts_the_sampled_tokens(tiny, tiny_policy, tokenizer):
    model, _ = tiny
    ids = tokenizer.encode("Hello")
    with torch.no_grad():
        top5 = set(torch.topk(model(torch.tensor([ids])).logits[0, -1], 5).indices.tolist())
    firsts = {
        tiny_policy.generate_sync([GenerateRequest(ids, SamplingParams(max_tokens=1, top_k=5, seed=s))])[
            0
        ].token_ids[0]
        for s in range(30)
    }
    assert firsts <= top5 and len(firsts) > 1


def test_stop_string_made_of_multibyte_characters_is_found(tiny_policy, tokenizer):
    ids = tokenizer.encode("some text then 数据库 and more", add_special_tokens=False)
    # grow the output token by token, as generation does: the first hit is where 数据 completes
    hits = [k for k in range(1, len(ids) + 1) if find_stop(tokenizer, ids[:k], ("数据",))]
    assert hits, "stop string never found"
    assert "数据" in tokenizer.decode(ids[: hits[0]]) and "数据" not in tokenizer.decode(ids[: hits[0] - 1])


def test_shared_prefix_prefill_matches_full_prefill(tiny, tokenizer):
    model, tok = tiny
    shared = tok.encode("System: you are a careful assistant who answers in one short line. " * 3)
    tails = ["Q: two plus two?", "Q: the capital of France, please?", "Q: hi", "Q: two plus two?"]
    reqs = [
        GenerateRequest(shared + tok.encode(t), SamplingParams(max_tokens=10, seed=7 + i, temperature=0.9))
        for i, t in enumerate(tails)
    ]
    sharing = HFPolicy(model, tok, seed=0, min_shared_prefix=8)
    plain = HFPolicy(model, tok, seed=0, min_shared_prefix=0)
    try:
        assert len(shared) >= 8
        a, b = sharing.generate_sync(reqs), plain.generate_sync(reqs)
        for x, y, req in zip(a, b, reqs, strict=True):
            assert x.token_ids == y.token_ids
            assert torch.allclose(torch.tensor(x.logprobs), torch.tensor(y.logprobs), atol=1e-4)
            ref = _full_logprobs(model, req.prompt_ids, x.token_ids)
            assert torch.allclose(ref, torch.tensor(x.logprobs), atol=1e-4)
    finally:
        sharing.close()
        plain.close()


def test_the_inverse_cdf_draw_follows_the_weights_and_skips_zero_weights():
    from skyrl_agent.policies._sampling import draw

    weights = torch.tensor([0.0, 0.5, 0.0, 0.2, 0.3, 0.0])
    g = torch.Generator().manual_seed(0)
    counts = torch.zeros(6)
    n = 20_000
    for _ in range(n):
        counts[draw(weights, g)] += 1
    assert counts[[0, 2, 5]].sum() == 0
    freq = counts / n
    se = (weights * (1 - weights) / n).sqrt()  # binomial standard error of each frequency
    assert ((freq - weights).abs() <= 4 * se + 1e-9).all(), freq
    assert draw(torch.tensor([0.0, 0.0, 1.0]), g) == 2


def test_rows_drawn_together_equal_rows_drawn_one_by_one():
    """``sample_rows`` draws its plain rows (no top-k or top-p) in one batch: the same tokens as
    each row's tempered softmax through :func:`draw` with its own generator, whatever the mix."""
    from skyrl_agent.policies._sampling import draw, sample_rows
    from skyrl_agent.types import SamplingParams

    logits = torch.randn(7, 5000, generator=torch.Generator().manual_seed(0)) * 4
    logits[3, 10:] = -float("inf")  # a row with a handful of possible tokens
    params = [
        SamplingParams(temperature=t, top_k=k, top_p=p)
        for t, k, p in [
            (0.8, 0, 1.0),
            (1.0, 0, 1.0),
            (0.0, 0, 1.0),
            (1.3, 0, 1.0),
            (0.7, 5, 1.0),
            (0.8, 0, 0.9),
            (0.5, 0, 1.0),
        ]
    ]
    for seed in range(20):
        gens = [torch.Generator().manual_seed(seed * 10 + i) for i in range(7)]
        tokens, lps = sample_rows(logits, params, gens)
        ref_gens = [torch.Generator().manual_seed(seed * 10 + i) for i in range(7)]
        for i in (0, 1, 3, 6):  # the plain rows
            want = draw(torch.softmax(logits[i] / params[i].temperature, dim=-1), ref_gens[i])
            assert int(tokens[i]) == want
        assert int(tokens[2]) == int(logits[2].argmax()) and int(tokens[3]) < 10
        assert int(tokens[4]) in torch.topk(logits[4], 5).indices.tolist()
        torch.testing.assert_close(lps, torch.log_softmax(logits, -1).gather(1, tokens[:, None])[:, 0])
