"""The continuous-batching engine behind HFPolicy: exact logprobs, late arrivals joining a running
batch, KV reuse across turns, invalidation on weight changes, and its memory bounds."""

import asyncio
import threading
import time

import pytest
import torch

from skyrl_agent.policies._engine import PrefixStore
from skyrl_agent.policies.hf import EngineConfig, HFPolicy
from skyrl_agent.types import GenerateRequest, SamplingParams
from skyrl_gym.errors import ConfigError

GREEDY = SamplingParams(temperature=0.0, max_tokens=12)


def _full_logprobs(model, prompt, new):
    with torch.no_grad():
        logits = model(torch.tensor([list(prompt) + list(new)])).logits[0].float()
    lp = torch.log_softmax(logits, dim=-1)
    return torch.tensor([lp[len(prompt) - 1 + i, t].item() for i, t in enumerate(new)])


def _prompts(tokenizer, n):
    texts = ["Hello there", "What is two plus two, my friend?", "A", "Tell me a long story about the sea"]
    return [tokenizer.encode(texts[i % len(texts)] + " #" * (i % 5)) for i in range(n)]


@pytest.fixture
def policies(tiny, static_policy):
    """(engine policy, one-request-at-a-time reference), same weights."""
    engine = HFPolicy(*tiny, seed=0, max_batch_size=4)
    yield engine, static_policy(*tiny, seed=0, max_batch_size=1)
    engine.close()


def test_batched_results_equal_one_at_a_time_and_logprobs_are_exact(policies, tiny, tokenizer):
    engine, reference = policies
    reqs = [
        GenerateRequest(p, GREEDY.replace(max_tokens=6 + 3 * i)) for i, p in enumerate(_prompts(tokenizer, 9))
    ]
    reqs += [
        GenerateRequest(p, SamplingParams(temperature=0.9, max_tokens=10, seed=40 + i))
        for i, p in enumerate(_prompts(tokenizer, 5))
    ]
    got = engine.generate_sync(reqs)  # 14 requests through at most 4 rows: rows leave and join
    for req, out in zip(reqs, got, strict=True):
        want = reference.generate_sync([req])[0]
        assert out.token_ids == want.token_ids and out.finish_reason == want.finish_reason
        ref = _full_logprobs(tiny[0], req.prompt_ids, out.token_ids)
        assert torch.allclose(ref, torch.tensor(out.logprobs), atol=1e-4), (ref, out.logprobs)
    stats = engine.engine_stats()
    assert stats.requests == len(reqs) and stats.peak_rows == 4
    assert stats.rows_decoded > stats.decode_steps  # batches of more than one row ran


def test_a_late_request_joins_the_running_batch(policies, tokenizer):
    engine, reference = policies
    long_req = GenerateRequest(tokenizer.encode("Once upon a time"), GREEDY.replace(max_tokens=60))
    late_req = GenerateRequest(tokenizer.encode("Hi"), GREEDY.replace(max_tokens=5))
    first = engine.engine.submit(long_req)
    while engine.engine_stats().decode_steps < 3:  # the long row is decoding
        time.sleep(0.001)
    late = engine.engine.submit(late_req)
    late_out = late.result(timeout=60)
    assert not first.done(), "the late request waited for the running one instead of joining it"
    long_out = first.result(timeout=60)
    assert late_out.token_ids == reference.generate_sync([late_req])[0].token_ids
    assert long_out.token_ids == reference.generate_sync([long_req])[0].token_ids
    assert engine.engine_stats().peak_rows == 2


@pytest.mark.parametrize("running", [5, 1])
def test_a_busy_batch_takes_newcomers_together_every_admit_every_steps(tiny, tokenizer, running):
    """Five of eight rows running (busy): two newcomers wait for the batch's admission step and
    prefill in one forward. One of eight: they join at the next step."""
    policy = HFPolicy(*tiny, seed=0, engine=EngineConfig(max_rows=8, admit_every=40))
    long_req = GenerateRequest(tokenizer.encode("Once upon a time"), GREEDY.replace(max_tokens=150))
    short = [
        GenerateRequest(tokenizer.encode(t), GREEDY.replace(max_tokens=3)) for t in ("Hi", "Hello there")
    ]
    try:
        # queued together, so one step admits them all (one by one, the engine's thread could
        # start on the first before the rest arrive, and the batch would not be busy yet)
        longs = policy.engine.submit_many([long_req] * running)
        while policy.engine_stats().decode_steps < 2:
            time.sleep(0.001)
        before = policy.engine_stats()
        outs = [f.result(timeout=60) for f in [policy.engine.submit(r) for r in short]]
        after = policy.engine_stats()
        assert not any(f.done() for f in longs)
        for f in longs:
            f.result(timeout=60)
    finally:
        policy.close()
    assert [len(o.token_ids) for o in outs] == [3, 3]
    if running == 5:  # admitted at step 40 since the long rows joined, both in one prefill
        assert after.decode_steps >= 40 and after.prefills == before.prefills + 1
    else:
        assert after.decode_steps < 40


def test_admit_every_must_be_positive():
    with pytest.raises(ConfigError, match="admit_every"):
        EngineConfig(admit_every=0)


def test_concurrent_async_callers_share_steps(tiny, tokenizer):
    policy = HFPolicy(*tiny, seed=0)
    ids = tokenizer.encode("Hello")

    async def main():
        calls = [
            policy.generate([GenerateRequest(ids, SamplingParams(max_tokens=4, seed=i))]) for i in range(8)
        ]
        return await asyncio.gather(*calls)

    try:
        outs = asyncio.run(main())
        stats = policy.engine_stats()
    finally:
        policy.close()
    assert [len(o[0].token_ids) for o in outs] == [4] * 8
    assert stats.peak_rows > 1 and stats.rows_decoded > stats.decode_steps


def _next_turn(prompt, out, tokenizer):
    return list(prompt) + list(out.token_ids) + tokenizer.encode("\nObservation: 42\nAssistant:")


def test_the_next_turn_reuses_the_kv_of_the_last(policies, tiny, tokenizer):
    engine, reference = policies
    p1 = tokenizer.encode("User: compute 6 * 7 for me, then answer.\nAssistant:")
    out1 = engine.generate_sync([GenerateRequest(p1, GREEDY)])[0]
    p2 = _next_turn(p1, out1, tokenizer)
    before = engine.engine_stats()
    out2 = engine.generate_sync([GenerateRequest(p2, GREEDY)])[0]
    after = engine.engine_stats()
    reused = after.reused_tokens - before.reused_tokens
    prefilled = after.prefill_tokens - before.prefill_tokens
    assert reused == len(p1) + len(out1.token_ids) - 1  # all but the last sampled token, never run
    assert prefilled == len(p2) - reused  # only the new tokens ran
    assert out2.token_ids == reference.generate_sync([GenerateRequest(p2, GREEDY)])[0].token_ids
    ref = _full_logprobs(tiny[0], p2, out2.token_ids)
    assert torch.allclose(ref, torch.tensor(out2.logprobs), atol=1e-4)


_SYSTEM = "System: you are a careful assistant who uses the calculator tool for every sum.\n"


def test_samples_of_a_group_prefill_once_and_later_prompts_reuse_the_system_prompt(policies, tiny, tokenizer):
    engine, reference = policies
    q1 = tokenizer.encode(_SYSTEM + "User: what is 17 + 25?\nAssistant:")
    group = [GenerateRequest(q1, SamplingParams(temperature=0.9, max_tokens=8, seed=s)) for s in range(4)]
    before = engine.engine_stats()
    outs = engine.generate_sync(group)
    after = engine.engine_stats()
    assert after.prefill_tokens - before.prefill_tokens == len(q1)  # one row ran for four
    for req, out in zip(group, outs, strict=True):  # each sample as if it ran alone
        assert out.token_ids == reference.generate_sync([req])[0].token_ids
        ref = _full_logprobs(tiny[0], q1, out.token_ids)
        assert torch.allclose(ref, torch.tensor(out.logprobs), atol=1e-4)
    q2 = tokenizer.encode(_SYSTEM + "User: and 3 + 4?\nAssistant:")
    shared = next(i for i, (a, b) in enumerate(zip(q1, q2, strict=False)) if a != b)
    before = engine.engine_stats()
    [out2] = engine.generate_sync([GenerateRequest(q2, GREEDY)])
    after = engine.engine_stats()
    assert after.reused_tokens - before.reused_tokens == shared  # the system prompt's KV, stored
    assert after.prefill_tokens - before.prefill_tokens == len(q2) - shared
    assert out2.token_ids == reference.generate_sync([GenerateRequest(q2, GREEDY)])[0].token_ids
    assert torch.allclose(_full_logprobs(tiny[0], q2, out2.token_ids), torch.tensor(out2.logprobs), atol=1e-4)


def test_next_turns_of_different_episodes_prefill_as_one_batch(tiny, tokenizer, static_policy):
    """Rows continuing different stored prefixes (of different lengths, one with a gap from a
    shared-prefix prefill) join in one prefill over their padded pasts; results are exact."""
    engine = HFPolicy(*tiny, seed=0, max_batch_size=8)
    reference = static_policy(*tiny, seed=0, max_batch_size=1)
    try:
        firsts = [
            tokenizer.encode(_SYSTEM + f"User: {q}\nAssistant:") for q in ("hi", "what is 2 + 2?", "a b c")
        ]
        outs1 = engine.generate_sync(
            [GenerateRequest(p, GREEDY.replace(max_tokens=5 + 2 * i)) for i, p in enumerate(firsts)]
        )
        seconds = [_next_turn(p, o, tokenizer) for p, o in zip(firsts, outs1, strict=True)]
        calls = []
        real = engine.engine.runner._run_prefill

        def spy(rows, tails, pasts, over_shared=False):
            calls.append((len(rows), len(pasts)))
            return real(rows, tails, pasts, over_shared)

        engine.engine.runner._run_prefill = spy
        before = engine.engine_stats()
        outs2 = engine.generate_sync([GenerateRequest(p, GREEDY) for p in seconds])
        assert calls == [(3, 3)]  # one batch, each row on its own past
        reused = engine.engine_stats().reused_tokens - before.reused_tokens
        assert reused == sum(len(p) + len(o.token_ids) - 1 for p, o in zip(firsts, outs1, strict=True))
        for p, out in zip(seconds, outs2, strict=True):
            assert out.token_ids == reference.generate_sync([GenerateRequest(p, GREEDY)])[0].token_ids
            assert torch.allclose(
                _full_logprobs(tiny[0], p, out.token_ids), torch.tensor(out.logprobs), atol=1e-4
            )
    finally:
        engine.close()
        reference.close()


def test_a_weight_update_invalidates_stored_prefixes(tiny, tokenizer, static_policy):
    model, tok = tiny
    import copy

    engine = HFPolicy(copy.deepcopy(model), tok, seed=0)
    try:
        p1 = tokenizer.encode("User: say something nice.\nAssistant:")
        out1 = engine.generate_sync([GenerateRequest(p1, GREEDY)])[0]
        assert len(engine.engine.store) == 1
        new_weights = {k: v + 0.05 * torch.randn_like(v) for k, v in model.state_dict().items()}
        engine.update_weights(new_weights)
        assert len(engine.engine.store) == 0
        p2 = _next_turn(p1, out1, tokenizer)
        before = engine.engine_stats()
        out2 = engine.generate_sync([GenerateRequest(p2, GREEDY)])[0]
        assert engine.engine_stats().reused_tokens == before.reused_tokens  # nothing stale reused
        fresh_model = copy.deepcopy(model)
        fresh_model.load_state_dict(new_weights)
        fresh = static_policy(fresh_model, tok, seed=0)
        assert out2.token_ids == fresh.generate_sync([GenerateRequest(p2, GREEDY)])[0].token_ids
        fresh.close()
    finally:
        engine.close()


def test_weights_changed_in_place_by_an_optimizer_invalidate_too(tiny, tokenizer):
    """The trainer shares the trained module with the sampler: optimizer steps change the
    weights without update_weights, and the engine still drops what it stored."""
    import copy

    model = copy.deepcopy(tiny[0])
    engine = HFPolicy(model, tokenizer, seed=0)
    try:
        p1 = tokenizer.encode("User: say something nice.\nAssistant:")
        out1 = engine.generate_sync([GenerateRequest(p1, GREEDY)])[0]
        assert len(engine.engine.store) == 1
        with torch.no_grad():
            for p in model.parameters():
                p.add_(0.01)
        before = engine.engine_stats()
        engine.generate_sync([GenerateRequest(_next_turn(p1, out1, tokenizer), GREEDY)])
        assert engine.engine_stats().reused_tokens == before.reused_tokens
    finally:
        engine.close()


@pytest.mark.parametrize(
    "make_optimizer",
    [
        lambda ps: torch.optim.AdamW(ps, lr=1e-2, fused=True),  # the trainer's: no version bump
        lambda ps: torch.optim.AdamW(ps, lr=1e-2, foreach=True),
        lambda ps: torch.optim.SGD(ps, lr=1e-1),
    ],
    ids=["adamw-fused", "adamw-foreach", "sgd"],
)
def test_an_optimizer_step_on_the_sampled_module_invalidates_stored_prefixes(tiny, tokenizer, make_optimizer):
    """A real backward and optimizer step on the module the engine samples from (as the trainer
    does): the next turn must not continue KV of the old weights, and its tokens and logprobs
    are those of the new weights."""
    import copy

    model = copy.deepcopy(tiny[0])
    engine = HFPolicy(model, tokenizer, seed=0)
    other = torch.nn.Linear(2, 2)  # an optimizer over parameters of no engine changes nothing
    try:
        p1 = tokenizer.encode("User: say something nice.\nAssistant:")
        out1 = engine.generate_sync([GenerateRequest(p1, GREEDY)])[0]
        p2 = _next_turn(p1, out1, tokenizer)
        assert len(engine.engine.store) == 1
        unrelated = make_optimizer(other.parameters())
        other(torch.ones(1, 2)).sum().backward()
        unrelated.step()
        key = engine.engine._current_weights_key()
        assert key == engine.engine.runner.weights_key  # weights of this engine untouched
        optimizer = make_optimizer(model.parameters())
        model.train()
        model(torch.tensor([p2]), labels=torch.tensor([p2])).loss.backward()
        optimizer.step()
        model.eval()
        before = engine.engine_stats()
        out2 = engine.generate_sync([GenerateRequest(p2, GREEDY)])[0]
        assert engine.engine_stats().reused_tokens == before.reused_tokens  # nothing stale reused
        ref = _full_logprobs(model, p2, out2.token_ids)
        assert torch.allclose(ref, torch.tensor(out2.logprobs), atol=1e-4), (ref, out2.logprobs)
    finally:
        engine.close()


def test_weights_changed_covers_writes_no_version_counter_sees(tiny, tokenizer):
    """Writes through ``.data`` bypass the version counters; ``weights_changed()`` says so."""
    import copy

    model = copy.deepcopy(tiny[0])
    engine = HFPolicy(model, tokenizer, seed=0)
    try:
        p1 = tokenizer.encode("User: say something nice.\nAssistant:")
        out1 = engine.generate_sync([GenerateRequest(p1, GREEDY)])[0]
        p2 = _next_turn(p1, out1, tokenizer)
        for p in model.parameters():
            p.data.add_(0.01)
        assert engine.engine._current_weights_key() == engine.engine.runner.weights_key  # unseen
        version = engine.weights_version
        engine.weights_changed()
        assert engine.weights_version == version + 1
        before = engine.engine_stats()
        engine.generate_sync([GenerateRequest(p2, GREEDY)])
        assert engine.engine_stats().reused_tokens == before.reused_tokens
    finally:
        engine.close()


def test_stale_prefixes_are_kept_when_allowed(tiny, tokenizer):
    import copy

    model = copy.deepcopy(tiny[0])
    engine = HFPolicy(model, tokenizer, seed=0, engine=EngineConfig(allow_stale_prefix=True))
    try:
        p1 = tokenizer.encode("User: say something nice.\nAssistant:")
        out1 = engine.generate_sync([GenerateRequest(p1, GREEDY)])[0]
        engine.update_weights({k: v + 0.01 for k, v in model.state_dict().items()})
        before = engine.engine_stats()
        engine.generate_sync([GenerateRequest(_next_turn(p1, out1, tokenizer), GREEDY)])
        assert engine.engine_stats().reused_tokens > before.reused_tokens
    finally:
        engine.close()


def test_the_prefix_store_respects_its_byte_bound():
    store = PrefixStore(max_bytes=3 * 4 * 100, min_tokens=1)
    kv = [(torch.zeros(1, 1, 50, 1), torch.zeros(1, 1, 50, 1))]  # 400 bytes an entry
    for i in range(5):
        store.put([i] * 50, kv, version=0)
        assert store.nbytes <= store.max_bytes
    assert len(store) == 3 and store.evictions == 2
    assert store.take([0] * 51, version=0) is None  # evicted first (least recently stored)
    n, got = store.take([4] * 50 + [9], version=0)
    assert n == 50 and got[0][0].shape == (1, 1, 50, 1) and len(store) == 2
    assert store.take([3] * 60, version=1) is None  # other weights: never reused


def test_the_engine_store_stays_under_its_bound(tiny, tokenizer):
    bound = 40_000  # the tiny model's KV is 512 bytes a token: a few entries
    engine = HFPolicy(*tiny, seed=0, engine=EngineConfig(prefix_cache_bytes=bound))
    try:
        for i in range(12):
            engine.generate_sync(
                [GenerateRequest(tokenizer.encode(f"{i} is the prompt number " * 4), GREEDY)]
            )
            assert engine.engine.store.nbytes <= bound
            held = engine.engine_stats().prefix_store_bytes  # what the store reports it holds
            assert held == engine.engine.store.nbytes and 0 < held <= bound
        assert engine.engine_stats().store_evictions > 0
    finally:
        engine.close()


def test_rows_and_tokens_in_flight_are_bounded(tiny, tokenizer):
    prompts = _prompts(tokenizer, 10)
    budget = max(len(p) for p in prompts) * 2 + 2 * 12
    engine = HFPolicy(*tiny, seed=0, engine=EngineConfig(max_rows=3, max_tokens_in_flight=budget))
    try:
        engine.generate_sync([GenerateRequest(p, GREEDY) for p in prompts])
        stats = engine.engine_stats()
    finally:
        engine.close()
    assert stats.requests == 10 and stats.peak_rows <= 3 and stats.peak_tokens_in_flight <= budget


def test_one_byte_budget_bounds_the_buffers_and_the_store_and_changes_no_result(tiny, tokenizer):
    """Under ``memory_bytes`` the rows' KV buffers plus the prefix store stay within the budget
    after every request, fewer rows run at once, the tokens are those of an engine without a
    budget, and a request that cannot fit alone fails naming the budget, the others unharmed."""
    prompts = _prompts(tokenizer, 12)
    reqs = [GenerateRequest(p, GREEDY.replace(max_tokens=8 + i)) for i, p in enumerate(prompts)]
    free = HFPolicy(*tiny, seed=0, max_batch_size=8)
    try:
        want = free.generate_sync(reqs)
        free_peak = free.engine_stats().peak_rows
        per_token = free.engine._slots.bytes_per_token
    finally:
        free.close()
    budget = 300 * per_token  # room for two or three of these rows and their prefill
    cfg = EngineConfig(max_rows=8, memory_bytes=budget, budget_name="--sampler-memory-gb")
    bounded = HFPolicy(*tiny, seed=0, engine=cfg)
    try:
        engine = bounded.engine
        futures = [engine.submit(r) for r in reqs]
        seen = 0
        while not all(f.done() for f in futures):  # the buffers and the store, read while running
            seen = max(seen, engine._slots.nbytes() + engine.store.nbytes)
            time.sleep(0.0005)
        got = [f.result() for f in futures]
        too_long = GenerateRequest(list(range(5, 400)), GREEDY)
        with pytest.raises(ConfigError, match="--sampler-memory-gb"):
            engine.submit(too_long).result(timeout=60)
        after = bounded.generate_sync(reqs[:2])  # the engine goes on
        stats = bounded.engine_stats()
    finally:
        bounded.close()
    assert [o.token_ids for o in got] == [o.token_ids for o in want]
    assert [o.token_ids for o in after] == [o.token_ids for o in want[:2]]
    assert 0 < seen <= budget and stats.peak_kv_bytes <= budget
    assert stats.peak_rows < free_peak and stats.budget_waits > 0
    assert stats.prefix_store_bytes <= budget


def test_a_cancelled_request_frees_its_row_and_a_deadline_ends_one(tiny, tokenizer):
    engine = HFPolicy(*tiny, seed=0)
    try:
        long = GenerateRequest(tokenizer.encode("Go on"), GREEDY.replace(max_tokens=2000, stop_token_ids=()))
        fut = engine.engine.submit(long)
        while engine.engine_stats().decode_steps < 2:
            time.sleep(0.001)
        fut.cancel()
        out = engine.generate_sync([GenerateRequest(tokenizer.encode("Hi"), GREEDY.replace(max_tokens=3))])[0]
        assert len(out.token_ids) == 3
        deadline = time.monotonic() + 30
        while engine.engine.scheduler.running and time.monotonic() < deadline:
            time.sleep(0.01)
        assert not engine.engine.scheduler.running, "the cancelled row kept decoding"
        timed = engine.engine.submit(long, deadline_s=0.05)
        with pytest.raises(TimeoutError):
            timed.result(timeout=60)
    finally:
        engine.close()


def test_update_weights_waits_for_running_rows(tiny, tokenizer, static_policy):
    import copy

    model = copy.deepcopy(tiny[0])
    engine = HFPolicy(model, tokenizer, seed=0)
    reference = static_policy(copy.deepcopy(tiny[0]), tokenizer, seed=0)
    try:
        req = GenerateRequest(tokenizer.encode("Once upon a time"), GREEDY.replace(max_tokens=40))
        fut = engine.engine.submit(req)
        while engine.engine_stats().decode_steps < 2:
            time.sleep(0.001)
        t = threading.Thread(
            target=engine.update_weights, args=({k: v * 0.5 for k, v in model.state_dict().items()},)
        )
        t.start()
        out = fut.result(timeout=60)
        t.join(timeout=60)
        assert out.token_ids == reference.generate_sync([req])[0].token_ids  # all of it with the old weights
        assert engine.weights_version == 1
    finally:
        engine.close()
        reference.close()


def test_a_prefix_stored_by_one_newcomer_cannot_evict_what_another_was_promised(
    tiny, tokenizer, static_policy
):
    """Admitted together: the next turn of an episode (its KV found in the store) and a group of
    fresh identical prompts whose shared prefix, stored during their prefill, evicts that entry
    (the store holds one). The found KV is taken first, so nothing fails and results are exact.
    (Before: a KeyError failed every row of the step, seen in a main-job run.)"""
    a1 = tokenizer.encode("User: compute 6 * 7 for me, then answer.\nAssistant:")
    group = tokenizer.encode("Zebra notes: " + "stripes and grass, " * 6 + "\nAssistant:")
    engine = HFPolicy(*tiny, seed=0, engine=EngineConfig(prefix_cache_bytes=0))
    reference = static_policy(*tiny, seed=0, max_batch_size=1)
    try:
        out1 = engine.generate_sync([GenerateRequest(a1, GREEDY)])[0]
        a2 = _next_turn(a1, out1, tokenizer)
        per_token = 512  # the tiny model's KV bytes a token
        entry = (len(a1) + len(out1.token_ids) - 1) * per_token
        assert len(group) * per_token > entry  # the group's prefix alone needs the room
        bound = len(group) * per_token + entry // 2  # room for either, not both
        engine.close()
        engine = HFPolicy(*tiny, seed=0, engine=EngineConfig(prefix_cache_bytes=bound))
        engine.generate_sync([GenerateRequest(a1, GREEDY)])
        assert len(engine.engine.store) == 1
        before = engine.engine_stats()
        reqs = [GenerateRequest(a2, GREEDY)] + [GenerateRequest(group, GREEDY)] * 2
        outs = engine.generate_sync(reqs)
        after = engine.engine_stats()
        assert after.reused_tokens - before.reused_tokens == len(a1) + len(out1.token_ids) - 1
        assert after.store_evictions > before.store_evictions  # the group's prefix did evict it
        for req, out in zip(reqs, outs, strict=True):
            assert out.token_ids == reference.generate_sync([req])[0].token_ids
    finally:
        engine.close()
        reference.close()


def test_next_turn_batches_split_where_padding_costs_more_than_a_pass():
    from skyrl_agent.policies._scheduler import PASS_COST_POSITIONS, split_by_length

    lengths = [17, 110, 25, 90, 17, 100, 76, 26]
    parts = split_by_length(list(range(8)), lengths)
    assert sorted(i for p in parts for i in p) == list(range(8))  # every row, once
    assert [sorted(lengths[i] for i in p) for p in parts] == [[17, 17, 25, 26], [76, 90, 100, 110]]

    def cost(ps: list[list[int]]) -> int:
        return sum(PASS_COST_POSITIONS + len(p) * max(lengths[i] for i in p) for p in ps)

    assert cost(parts) < cost([list(range(8))])  # 4 * 26 + 4 * 110 + 2 passes < 8 * 110 + 1
    # similar lengths stay one batch; nothing and one row pass through
    assert split_by_length(list("abc"), [76, 78, 80]) == [list("abc")]
    assert split_by_length([], []) == [] and split_by_length(["x"], [5]) == [["x"]]


@pytest.mark.parametrize("scheduler", ["continuous", "static"])
def test_ignore_eos_generates_past_end_of_sequence(tiny, tokenizer, scheduler, static_policy):
    """A token the model ends on stops a generation, unless the request sets ``ignore_eos``:
    then only ``max_tokens`` ends it, with the same tokens as without that end token, on the
    engine (``HFPolicy.submit`` hands back futures the caller waits on) and on the static
    baseline (``bench/static_policy.py``)."""
    import copy

    model, tok = tiny
    prompt = tokenizer.encode("Tell me a long story about the sea")
    params = SamplingParams(temperature=1.0, seed=5, max_tokens=8)  # seeded: the same draws again
    make = HFPolicy if scheduler == "continuous" else static_policy
    free = make(model, tok, seed=0)
    try:
        [plain] = free.generate_sync([GenerateRequest(prompt, params)])
    finally:
        free.close()
    ids = plain.token_ids
    assert len(ids) == 8
    # the first token not drawn before it becomes the end-of-sequence token
    end = next(i for i in range(1, 8) if ids[i] not in ids[:i])
    ender = copy.deepcopy(model)
    ender.generation_config.eos_token_id = ids[end]
    policy = make(ender, tok, seed=0)
    try:
        reqs = [GenerateRequest(prompt, params), GenerateRequest(prompt, params.replace(ignore_eos=True))]
        if scheduler == "continuous":
            stopped, ignored = [f.result(timeout=60) for f in policy.submit(reqs)]
        else:
            stopped, ignored = policy.generate_sync(reqs)
    finally:
        policy.close()
    assert stopped.token_ids == ids[: end + 1] and stopped.finish_reason == "stop"
    assert ignored.token_ids == ids and ignored.finish_reason == "length"


def test_the_static_scheduler_is_refused_with_where_it_went(tiny):
    with pytest.raises(ConfigError, match="bench/static_policy.py"):
        HFPolicy(*tiny, seed=0, scheduler="static")


def test_drop_stale_kv_empties_the_store_unless_stale_prefixes_are_allowed(tiny, tokenizer):
    prompt = tokenizer.encode("the prompt that leaves its KV in the store " * 3)
    for allow_stale in (False, True):
        engine = HFPolicy(*tiny, seed=0, engine=EngineConfig(allow_stale_prefix=allow_stale))
        try:
            engine.generate_sync([GenerateRequest(prompt, GREEDY)])
            held = engine.engine_stats().prefix_store_bytes
            assert held > 0
            if allow_stale:  # the stored KV stays usable after an update: kept
                assert engine.drop_stale_kv() == 0 and engine.engine_stats().prefix_store_bytes == held
            else:
                assert engine.drop_stale_kv() == held and engine.engine_stats().prefix_store_bytes == 0
            engine.generate_sync([GenerateRequest(prompt, GREEDY)])  # and it samples on
        finally:
            engine.close()
