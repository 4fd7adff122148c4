"""The OpenAI-compatible server, through real HTTP on 127.0.0.1: the real ``openai`` client in
this process, ``litellm`` and ``skyrl serve`` in other processes, a tiny random model behind it
(and a scripted policy where a tool call must come out deterministically)."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time

import httpx
import openai
import pytest

from skyrl_agent.chat import ChatRenderer
from skyrl_agent.policies.fake import ScriptedPolicy
from skyrl_agent.server import CallRecord, ChoiceRecord, ServerConfig, ServerThread, calls_to_trajectories
from skyrl_agent.types import GenerateRequest, SamplingParams

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
USER = [{"role": "user", "content": "Say something."}]
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "add",
            "description": "Add two integers.",
            "parameters": {
                "type": "object",
                "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                "required": ["a", "b"],
            },
        },
    }
]
CALL_TEXT = 'Let me add.\n<tool_call>\n{"name": "add", "arguments": {"a": 2, "b": 3}}\n</tool_call>'


class CountingPolicy(ScriptedPolicy):
    """A scripted policy that also counts ``generate`` calls (batches)."""

    batches = 0

    async def generate(self, requests):
        self.batches += 1
        return await super().generate(requests)


@pytest.fixture(scope="module")
def scripted_server(tokenizer):
    def script(prompt_ids, index):
        # a tool call first; once the tool result is in the context, the answer
        return "The sum is 5." if "<tool_response>" in tokenizer.decode(prompt_ids) else CALL_TEXT

    policy = CountingPolicy(tokenizer, script)
    with ServerThread(policy, ServerConfig(model_name="scripted")) as server:
        server.policy = policy
        yield server


def _client(server) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.url, api_key="unused", max_retries=0, timeout=60)


def _session(name):
    return {"X-Session-ID": name}


# --------------------------------------------------------------------------- chat
def test_models_and_unknown_model_is_404(hf_server):
    client = _client(hf_server)
    assert [m.id for m in client.models.list().data] == ["tiny"]
    with pytest.raises(openai.NotFoundError) as err:
        client.chat.completions.create(model="gpt-4o", messages=USER, max_tokens=2)
    assert err.value.body["code"] == "model_not_found"


def test_chat_records_prompt_ids_completion_ids_logprobs_and_usage(hf_server, tokenizer):
    client = _client(hf_server)
    r = client.chat.completions.create(
        model="tiny", messages=USER, max_tokens=6, logprobs=True, extra_headers=_session("chat-1")
    )
    [call] = hf_server.store.get("chat-1")
    [choice] = call.choices
    # rendered once with the chat template; sampled ids recorded as they came out
    assert call.prompt_ids == ChatRenderer(tokenizer).encode_prompt(USER)
    assert len(choice.token_ids) == 6 and r.choices[0].finish_reason == "length" == choice.finish_reason
    assert r.usage.prompt_tokens == len(call.prompt_ids) and r.usage.completion_tokens == 6
    assert r.usage.total_tokens == len(call.prompt_ids) + 6
    got = [t.logprob for t in r.choices[0].logprobs.content]
    assert got == pytest.approx(choice.logprobs) and all(lp < 0 for lp in got)
    assert r.choices[0].message.content == tokenizer.decode(choice.token_ids) == choice.text
    assert call.messages == [{"role": "user", "content": "Say something."}]


def test_user_field_names_the_session_when_no_header(hf_server):
    client = _client(hf_server)
    client.chat.completions.create(model="tiny", messages=USER, max_tokens=2, user="by-user-field")
    assert len(hf_server.store.get("by-user-field")) == 1


def test_multi_turn_chat_continues_the_sampled_ids_and_makes_one_trajectory(hf_server, tokenizer):
    client = _client(hf_server)
    sid = _session("multi")
    r1 = client.chat.completions.create(model="tiny", messages=USER, max_tokens=5, extra_headers=sid)
    history = USER + [
        {"role": "assistant", "content": r1.choices[0].message.content},
        {"role": "user", "content": "And again?"},
    ]
    client.chat.completions.create(model="tiny", messages=history, max_tokens=5, extra_headers=sid)
    first, second = hf_server.store.get("multi")
    sampled = first.prompt_ids + first.choices[0].token_ids
    assert second.prompt_ids[: len(sampled)] == sampled  # the model sees what it sampled
    assert second.reused_ids == len(sampled)
    [traj] = hf_server.store.trajectories("multi", reward=1.0)
    traj.validate()
    assert traj.prompt_ids == first.prompt_ids
    assert traj.input_ids == second.prompt_ids + second.choices[0].token_ids
    assert traj.num_turns == 2 and traj.num_generated_tokens == 10
    (s0, e0), (s1, e1) = traj.turn_spans
    assert traj.loss_mask[e0:s1] == [0] * (s1 - e0) and s1 > e0  # template + user text between
    between = tokenizer.decode(traj.response_ids[e0:s1])
    assert between.startswith("<|im_end|>") and "And again?" in between
    assert between.endswith("<|im_start|>assistant\n")
    assert traj.rollout_logprobs[s1:e1] == pytest.approx(second.choices[0].logprobs)
    assert traj.token_rewards[e1 - 1] == 1.0 and sum(traj.token_rewards) == 1.0

    # the same over HTTP; DELETE pops the session
    body = httpx.get(f"{hf_server.url}/sessions/multi", timeout=10).json()
    assert [c["prompt_ids"] for c in body["calls"]] == [first.prompt_ids, second.prompt_ids]
    assert body["calls"][1]["choices"][0]["token_ids"] == second.choices[0].token_ids
    assert body["trajectories"][0]["loss_mask"] == traj.loss_mask
    assert httpx.delete(f"{hf_server.url}/sessions/multi", timeout=10).status_code == 200
    gone = httpx.get(f"{hf_server.url}/sessions/multi", timeout=10)
    assert gone.status_code == 404 and gone.json()["error"]["code"] == "session_not_found"


def test_rewritten_history_starts_a_new_trajectory(hf_server):
    client = _client(hf_server)
    sid = _session("rewrite")
    r1 = client.chat.completions.create(model="tiny", messages=USER, max_tokens=4, extra_headers=sid)
    edited = USER + [
        {"role": "assistant", "content": "something the model never said"},
        {"role": "user", "content": "ok"},
    ]
    client.chat.completions.create(model="tiny", messages=edited, max_tokens=4, extra_headers=sid)
    assert r1.choices[0].message.content != "something the model never said"
    first, second = hf_server.store.get("rewrite")
    assert second.reused_ids == 0
    trajs = hf_server.store.trajectories("rewrite")
    assert len(trajs) == 2 and all(t.num_turns == 1 for t in trajs)
    assert trajs[1].prompt_ids == second.prompt_ids
    for t in trajs:
        t.validate()


def test_n_samples_come_from_one_batched_call(scripted_server):
    client = _client(scripted_server)
    before = scripted_server.policy.batches
    r = client.chat.completions.create(
        model="scripted", messages=USER, n=3, max_tokens=64, extra_headers=_session("n3")
    )
    assert scripted_server.policy.batches == before + 1
    assert [c.index for c in r.choices] == [0, 1, 2]
    [call] = scripted_server.store.get("n3")
    assert len(call.choices) == 3
    assert r.usage.completion_tokens == sum(len(c.token_ids) for c in call.choices)
    trajs = scripted_server.store.trajectories("n3")
    assert sorted(t.sample_index for t in trajs) == [0, 1, 2]


def test_vllm_sampling_extensions_reach_the_policy(scripted_server):
    """``ignore_eos`` and ``stop_token_ids`` (vLLM's request fields) become the policy's
    ``SamplingParams``; a request without them gets the defaults."""
    client = _client(scripted_server)
    policy = scripted_server.policy
    client.chat.completions.create(
        model="scripted",
        messages=USER,
        max_tokens=8,
        extra_body={"ignore_eos": True, "stop_token_ids": [7]},
        extra_headers=_session("ext"),
    )
    sent = policy.requests[-1].sampling
    assert sent.ignore_eos and sent.stop_token_ids == (7,)
    client.chat.completions.create(
        model="scripted", messages=USER, max_tokens=8, extra_headers=_session("ext2")
    )
    sent = policy.requests[-1].sampling
    assert not sent.ignore_eos and sent.stop_token_ids == ()


def test_n_samples_with_a_seed_differ_and_repeat(hf_server):
    client = _client(hf_server)

    def sample():
        r = client.chat.completions.create(model="tiny", messages=USER, n=2, max_tokens=4, seed=11)
        return [c.message.content for c in r.choices]

    a, b = sample(), sample()
    assert a == b and len(set(a)) == 2


def test_stop_string_cuts_the_text_but_the_sampled_ids_are_kept(hf_server, tokenizer):
    client = _client(hf_server)
    full = client.chat.completions.create(model="tiny", messages=USER, max_tokens=12, seed=5)
    text = full.choices[0].message.content
    words = text.split()
    stop = words[len(words) // 2]
    r = client.chat.completions.create(
        model="tiny", messages=USER, max_tokens=12, seed=5, stop=[stop], extra_headers=_session("stop")
    )
    assert r.choices[0].finish_reason == "stop"
    assert r.choices[0].message.content == text[: text.index(stop)]
    [call] = hf_server.store.get("stop")
    assert stop in tokenizer.decode(call.choices[0].token_ids)  # the stop string's tokens were sampled


def test_streamed_chat_equals_the_whole_answer(hf_server):
    client = _client(hf_server)
    whole = client.chat.completions.create(model="tiny", messages=USER, max_tokens=8, seed=3)
    chunks = list(
        client.chat.completions.create(
            model="tiny",
            messages=USER,
            max_tokens=8,
            seed=3,
            stream=True,
            logprobs=True,
            stream_options={"include_usage": True},
        )
    )
    deltas = [c.choices[0] for c in chunks if c.choices]
    assert deltas[0].delta.role == "assistant"
    assert "".join(d.delta.content or "" for d in deltas) == whole.choices[0].message.content
    assert deltas[-1].finish_reason == "length"
    assert sum(len(d.logprobs.content) for d in deltas if d.logprobs) == 8
    assert chunks[-1].usage.completion_tokens == 8 and not chunks[-1].choices
    with httpx.stream(
        "POST",
        f"{hf_server.url}/chat/completions",
        json={"model": "tiny", "messages": USER, "max_tokens": 3, "stream": True},
        timeout=30,
    ) as resp:
        lines = [line for line in resp.iter_lines() if line]
    assert resp.headers["content-type"].startswith("text/event-stream")
    assert lines[-1] == "data: [DONE]" and all(line.startswith("data: ") for line in lines)


def test_top_logprobs_in_the_openai_shape(hf_server, tiny):
    import torch

    model, tok = tiny
    client = _client(hf_server)
    r = client.chat.completions.create(
        model="tiny", messages=USER, max_tokens=4, temperature=0, logprobs=True, top_logprobs=3
    )
    entries = r.choices[0].logprobs.content
    assert len(entries) == r.usage.completion_tokens == 4
    [call] = [c for c in hf_server.store.get("default") if c.request_id == r.id]
    ids = call.prompt_ids + call.choices[0].token_ids
    with torch.no_grad():  # the raw next-token distribution at each sampled position
        logprobs_TV = torch.log_softmax(model(torch.tensor([ids])).logits[0].float(), -1)
    for k, (entry, tid) in enumerate(zip(entries, call.choices[0].token_ids, strict=True)):
        want_lp, want_ids = torch.topk(logprobs_TV[len(call.prompt_ids) - 1 + k], 3)
        assert len(entry.top_logprobs) == 3
        assert [a.token for a in entry.top_logprobs] == [tok.decode([int(t)]) for t in want_ids]
        assert [a.logprob for a in entry.top_logprobs] == pytest.approx(want_lp.tolist(), abs=1e-4)
        assert entry.top_logprobs[0].token == entry.token == tok.decode([tid])  # greedy: the top token
        assert entry.top_logprobs[0].bytes == list(entry.token.encode())
    # streamed: one alternative list per token chunk
    stream = client.chat.completions.create(
        model="tiny", messages=USER, max_tokens=3, logprobs=True, top_logprobs=2, stream=True
    )
    tops = [e.top_logprobs for ch in stream for c in ch.choices if c.logprobs for e in c.logprobs.content]
    assert len(tops) == 3 and all(len(t) == 2 for t in tops)
    # completions: logprobs=N gives N alternatives per token as {token: logprob}
    c = client.completions.create(model="tiny", prompt="hi", max_tokens=3, logprobs=2, temperature=0)
    lp = c.choices[0].logprobs
    assert len(lp.top_logprobs) == 3 and all(len(d) == 2 for d in lp.top_logprobs)
    for token, token_lp, alts in zip(lp.tokens, lp.token_logprobs, lp.top_logprobs, strict=True):
        assert max(alts.values()) == pytest.approx(token_lp, abs=1e-5) and token in alts
    with pytest.raises(openai.BadRequestError) as err:
        client.chat.completions.create(model="tiny", messages=USER, max_tokens=2, top_logprobs=3)
    assert err.value.body["param"] == "top_logprobs"


def test_top_logprobs_are_refused_not_faked_by_a_policy_without_them(scripted_server):
    client = _client(scripted_server)
    with pytest.raises(openai.BadRequestError) as err:
        client.chat.completions.create(
            model="scripted", messages=USER, max_tokens=2, logprobs=True, top_logprobs=3
        )
    assert "no top logprobs" in err.value.body["message"] and err.value.body["param"] == "top_logprobs"
    with pytest.raises(openai.BadRequestError):
        client.completions.create(model="scripted", prompt="hi", max_tokens=2, logprobs=2)


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"model": "tiny"}, "messages"),
        ({"model": "tiny", "messages": USER, "max_tokens": "many"}, "max_tokens"),
        ({"model": "tiny", "messages": USER, "temperature": 5}, "temperature"),
        ({"model": "tiny", "messages": [{"role": "robot", "content": "x"}]}, "messages[0].role"),
        (
            {
                "model": "tiny",
                "messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}],
            },
            "messages[0].content",
        ),
        ({"model": "tiny", "messages": USER, "max_tokens": 100000}, "max_tokens"),
        ({"model": "tiny", "messages": USER, "tool_choice": "required", "tools": TOOLS}, "tool_choice"),
        ({"model": "tiny", "messages": USER, "frequency_penalty": 0.5}, "frequency_penalty"),
    ],
)
def test_bad_chat_requests_get_400_with_openai_error_json(hf_server, body, param):
    resp = httpx.post(f"{hf_server.url}/chat/completions", json=body, timeout=30)
    assert resp.status_code == 400, resp.text
    error = resp.json()["error"]
    assert error["type"] == "invalid_request_error" and error["message"]
    assert error["param"] == param


# --------------------------------------------------------------------------- completions
def test_completions_with_text_and_token_id_prompts(hf_server, tokenizer):
    client = _client(hf_server)
    ids = tokenizer.encode("The capital of France is")
    r = client.completions.create(
        model="tiny", prompt=ids, max_tokens=5, logprobs=0, seed=3, extra_headers=_session("cmpl")
    )
    r2 = client.completions.create(
        model="tiny",
        prompt="The capital of France is",
        max_tokens=5,
        seed=3,
        extra_headers=_session("cmpl"),
    )
    a, b = hf_server.store.get("cmpl")
    assert a.prompt_ids == ids == b.prompt_ids and a.kind == "completion"
    assert r.choices[0].text == r2.choices[0].text == a.choices[0].text
    assert r.choices[0].logprobs.token_logprobs == pytest.approx(a.choices[0].logprobs)
    assert r.usage.prompt_tokens == len(ids) and r.usage.completion_tokens == 5
    batch = client.completions.create(model="tiny", prompt=["a b", "c d"], n=2, max_tokens=2)
    assert [c.index for c in batch.choices] == [0, 1, 2, 3]
    bad = httpx.post(
        f"{hf_server.url}/completions", json={"model": "tiny", "prompt": [10**9], "max_tokens": 2}, timeout=10
    )
    assert bad.status_code == 400 and "vocabulary" in bad.json()["error"]["message"]


def test_completion_stop_strings_over_a_scripted_policy(scripted_server, tokenizer):
    client = _client(scripted_server)
    r = client.completions.create(
        model="scripted", prompt="x", stop=["add", "zzz"], max_tokens=64, extra_headers=_session("cstop")
    )
    assert r.choices[0].text == "Let me " and r.choices[0].finish_reason == "stop"
    kept = client.completions.create(
        model="scripted",
        prompt="x",
        stop="add",
        max_tokens=64,
        extra_body={"include_stop_str_in_output": True},
    )
    assert kept.choices[0].text == "Let me add"
    [call] = scripted_server.store.get("cstop")
    assert tokenizer.decode(call.choices[0].token_ids).startswith(CALL_TEXT)  # the record keeps every id


def test_streamed_completion_equals_the_whole_text(hf_server):
    client = _client(hf_server)
    whole = client.completions.create(model="tiny", prompt="Once upon", max_tokens=6, seed=3)
    parts = list(
        client.completions.create(model="tiny", prompt="Once upon", max_tokens=6, seed=3, stream=True)
    )
    assert "".join(p.choices[0].text for p in parts) == whole.choices[0].text
    assert parts[-1].choices[0].finish_reason == "length"


def test_the_runtimes_own_openai_client_policy_gets_exact_ids(hf_server, tiny):
    from skyrl_agent.policies.hf import HFPolicy
    from skyrl_agent.policies.openai_compat import OpenAICompatPolicy

    model, tok = tiny
    ids = tok.encode("Hello there")
    sp = SamplingParams(max_tokens=6, seed=4)
    local = HFPolicy(model, tok)
    direct = local.generate_sync([GenerateRequest(ids, sp)])[0]
    local.close()
    policy = OpenAICompatPolicy(hf_server.url, "tiny", tok)

    async def main():
        try:
            return (await policy.generate([GenerateRequest(ids, sp)]))[0]
        finally:
            await policy.aclose()

    remote = asyncio.run(main())
    assert remote.token_ids == direct.token_ids
    assert remote.logprobs == pytest.approx(direct.logprobs, abs=1e-4)


# --------------------------------------------------------------------------- tools
def test_tool_call_comes_back_as_openai_tool_calls_and_the_episode_is_trainable(scripted_server, tokenizer):
    client = _client(scripted_server)
    sid = _session("tools")
    messages = [{"role": "user", "content": "What is 2 + 3?"}]
    r = client.chat.completions.create(model="scripted", messages=messages, tools=TOOLS, extra_headers=sid)
    choice = r.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content == "Let me add."  # no tool-call markup
    [call] = choice.message.tool_calls
    assert call.function.name == "add" and json.loads(call.function.arguments) == {"a": 2, "b": 3}
    # the tools were rendered into the prompt by the template
    first = scripted_server.store.get("tools")[0]
    assert '"name": "add"' in tokenizer.decode(first.prompt_ids)
    messages += [
        choice.message.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": call.id, "content": "5"},
    ]
    r2 = client.chat.completions.create(model="scripted", messages=messages, tools=TOOLS, extra_headers=sid)
    assert r2.choices[0].finish_reason == "stop" and r2.choices[0].message.content == "The sum is 5."
    assert r2.choices[0].message.tool_calls is None
    a, b = scripted_server.store.get("tools")
    assert (
        b.prompt_ids[: len(a.prompt_ids) + len(a.choices[0].token_ids)]
        == a.prompt_ids + a.choices[0].token_ids
    )
    [traj] = scripted_server.store.trajectories("tools")
    traj.validate()
    assert traj.num_turns == 2
    assert "<tool_response>\n5\n</tool_response>" in tokenizer.decode(traj.response_ids)
    assert (
        tokenizer.decode([t for t, m in zip(traj.response_ids, traj.loss_mask, strict=True) if m]).count(
            "<tool_call>"
        )
        == 1
    )


def test_streamed_tool_calls(scripted_server):
    client = _client(scripted_server)
    chunks = list(
        client.chat.completions.create(
            model="scripted", messages=[{"role": "user", "content": "2+3?"}], tools=TOOLS, stream=True
        )
    )
    calls = [tc for c in chunks for tc in (c.choices[0].delta.tool_calls or [])]
    assert [(tc.index, tc.function.name) for tc in calls] == [(0, "add")]
    assert json.loads(calls[0].function.arguments) == {"a": 2, "b": 3}
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == "Let me add."
    assert chunks[-1].choices[0].finish_reason == "tool_calls"


def test_tool_choice_none_leaves_the_text_alone(scripted_server):
    client = _client(scripted_server)
    r = client.chat.completions.create(
        model="scripted", messages=[{"role": "user", "content": "2+3?"}], tools=TOOLS, tool_choice="none"
    )
    assert r.choices[0].message.content == CALL_TEXT and r.choices[0].finish_reason == "stop"


# --------------------------------------------------------------------------- other processes
LITELLM_SNIPPET = """
import json, sys, litellm
url, model = sys.argv[1], sys.argv[2]
tools = json.loads(sys.argv[3])
kw = dict(model="openai/" + model, api_base=url, api_key="unused", max_tokens=32, tools=tools,
          extra_headers={"X-Session-ID": "litellm"})
messages = [{"role": "user", "content": "What is 2 + 3?"}]
r = litellm.completion(messages=messages, **kw)
m = r.choices[0].message
calls = m.tool_calls or []
out = {"finish": r.choices[0].finish_reason, "content": m.content,
       "calls": [[c.function.name, c.function.arguments] for c in calls],
       "usage": [r.usage.prompt_tokens, r.usage.completion_tokens]}
messages.append({"role": "assistant", "content": m.content,
                 "tool_calls": [{"id": c.id, "type": "function",
                                 "function": {"name": c.function.name, "arguments": c.function.arguments}}
                                for c in calls]})
messages += [{"role": "tool", "tool_call_id": c.id, "content": "5"} for c in calls]
r2 = litellm.completion(messages=messages, **kw)
out["answer"] = r2.choices[0].message.content
print(json.dumps(out))
"""


def _child_env():
    env = dict(os.environ, LITELLM_LOCAL_MODEL_COST_MAP="True", HF_HUB_OFFLINE="1", NO_PROXY="*")
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    return env


@pytest.mark.slow
def test_litellm_from_another_process_produces_a_trainable_trajectory(scripted_server):
    proc = subprocess.run(
        [sys.executable, "-c", LITELLM_SNIPPET, scripted_server.url, "scripted", json.dumps(TOOLS)],
        capture_output=True,
        text=True,
        timeout=120,
        env=_child_env(),
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["finish"] == "tool_calls" and out["calls"][0][0] == "add"
    assert json.loads(out["calls"][0][1]) == {"a": 2, "b": 3}
    assert out["answer"] == "The sum is 5."
    call, second = scripted_server.store.get("litellm")
    assert out["usage"] == [len(call.prompt_ids), len(call.choices[0].token_ids)]
    assert second.reused_ids == len(call.prompt_ids) + len(call.choices[0].token_ids)
    [traj] = scripted_server.store.trajectories("litellm")
    traj.validate()
    assert traj.num_turns == 2 and traj.input_ids == second.prompt_ids + second.choices[0].token_ids
    assert traj.response_ids[: len(call.choices[0].token_ids)] == call.choices[0].token_ids


@pytest.mark.slow
def test_skyrl_serve_in_another_process(tmp_path):
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "skyrl_agent.server",
            "--tiny",
            "--port",
            "0",
            "--threads",
            "1",
            "--log-level",
            "warning",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=_child_env(),
        cwd=ROOT,
    )
    try:
        deadline = time.monotonic() + 120
        line = ""
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            if line.startswith("serving") or not line and proc.poll() is not None:
                break
        assert line.startswith("serving tiny-random at http://127.0.0.1:"), line
        url = line.split(" at ")[1].strip()
        client = openai.OpenAI(base_url=url, api_key="unused", max_retries=0, timeout=60)
        assert [m.id for m in client.models.list().data] == ["tiny-random"]
        r = client.chat.completions.create(
            model="tiny-random", messages=USER, max_tokens=4, extra_headers=_session("cli")
        )
        body = httpx.get(f"{url}/sessions/cli", timeout=10).json()
        assert len(body["calls"][0]["choices"][0]["token_ids"]) == r.usage.completion_tokens == 4
        assert body["trajectories"][0]["loss_mask"] == [1, 1, 1, 1]
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


# --------------------------------------------------------------------------- pure parts
def _call(prompt, *outs, logprobs=True):
    return CallRecord(
        "completion",
        list(prompt),
        [ChoiceRecord(list(o), [-1.0] * len(o) if logprobs else None, "stop") for o in outs],
    )


def test_calls_merge_when_append_only_fork_on_n_and_restart_otherwise():
    calls = [
        _call([1, 2], [3, 4]),
        _call([1, 2, 3, 4, 9, 9], [5], [6, 7]),  # continues call 0, two samples: a fork
        _call([1, 2, 3, 4, 9, 9, 6, 7, 8], [10]),  # continues sample 1 of call 1
        _call([42], [43]),  # continues nothing: a new trajectory
    ]
    trajs = calls_to_trajectories(calls, reward=2.0)
    assert [t.input_ids for t in trajs] == [
        [1, 2, 3, 4, 9, 9, 5],
        [1, 2, 3, 4, 9, 9, 6, 7, 8, 10],
        [42, 43],
    ]
    t = trajs[1]
    assert t.prompt_ids == [1, 2]
    assert t.loss_mask == [1, 1, 0, 0, 1, 1, 0, 1]
    assert t.rollout_logprobs == [-1.0, -1.0, 0.0, 0.0, -1.0, -1.0, 0.0, -1.0]
    assert t.turn_spans == [(0, 2), (4, 6), (7, 8)] and t.sample_index == 1
    assert t.token_rewards == [0.0] * 7 + [2.0] and t.turn_rewards == [0.0, 0.0, 2.0]
    for traj in trajs:
        traj.validate()


def test_a_call_without_logprobs_gives_none():
    [t] = calls_to_trajectories([_call([1], [2]), _call([1, 2, 3], [4], logprobs=False)])
    assert t.rollout_logprobs is None and t.loss_mask == [1, 0, 1]


def test_api_key_is_enforced_when_set(tokenizer):
    with ServerThread(
        ScriptedPolicy(tokenizer, ["ok"]), ServerConfig(model_name="m", api_key="s3cret")
    ) as server:
        with pytest.raises(openai.AuthenticationError):
            openai.OpenAI(base_url=server.url, api_key="wrong", max_retries=0).models.list()
        client = openai.OpenAI(base_url=server.url, api_key="s3cret", max_retries=0)
        assert client.chat.completions.create(model="m", messages=USER).choices[0].message.content == "ok"


def test_store_bounds_sessions_and_calls():
    from skyrl_agent.server import SessionStore

    store = SessionStore(max_sessions=2, max_calls_per_session=3)
    for i in range(5):
        store.record("a", _call([i], [i + 100]))
    store.record("b", _call([1], [2]))
    store.record("c", _call([1], [2]))
    assert store.ids() == {"b": 1, "c": 1}  # "a" was the least recently used
    for i in range(5):
        store.record("b", _call([i], [i + 100]))
    assert [c.prompt_ids for c in store.get("b")] == [[2], [3], [4]]
    assert len(store.pop("b")) == 3 and store.get("b") is None and store.clear() == 1


def test_missing_fastapi_names_the_serve_extra(monkeypatch, tokenizer):
    from skyrl_agent.server import build_app
    from skyrl_gym.errors import MissingDependencyError

    monkeypatch.setitem(sys.modules, "fastapi", None)
    with pytest.raises(MissingDependencyError, match="serve"):
        build_app(ScriptedPolicy(tokenizer, ["x"]))


def test_importing_the_server_package_imports_no_fastapi_or_torch():
    code = (
        "import sys, skyrl_agent.server as s; s.SessionStore(); "
        "print(sorted(m for m in ('fastapi', 'uvicorn', 'torch') if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=_child_env(), timeout=60
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_serve_verb_is_declared_and_parses():
    import argparse
    import tomllib

    from skyrl_agent.server.cli import add_command

    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        project = tomllib.load(f)["project"]
    assert project["entry-points"]["skyrl.cli"]["serve"] == "skyrl_agent.server.cli:add_command"
    assert "fastapi>=0.110" in project["optional-dependencies"]["serve"]
    from importlib.metadata import EntryPoint

    value = project["entry-points"]["skyrl.cli"]["serve"]
    assert EntryPoint("serve", value, "skyrl.cli").load() is add_command
    parser = argparse.ArgumentParser()
    add_command(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["serve", "--tiny", "--port", "0", "--host", "127.0.0.1"])
    assert args.tiny and args.port == 0 and args.handler.__name__ == "_serve"


@pytest.mark.slow
def test_readme_server_example_runs():
    from tests.docs._markdown import example_after

    block = example_after(
        "docs/guides/serve.md", "# An OpenAI-compatible server that records trainable trajectories"
    )
    scope = {"__name__": "readme_server_example"}
    exec(compile(block.code, block.where, "exec"), scope)
    traj = scope["traj"]
    assert traj.num_turns == 2 and traj.reward == 1.0
    assert 0 in traj.loss_mask and traj.loss_mask[0] == 1


def test_openai_compat_policy_reads_top_logprobs_from_this_server(hf_server, tiny, tokenizer):
    from skyrl_agent.policies.hf import HFPolicy
    from skyrl_agent.policies.openai_compat import OpenAICompatPolicy

    model, tok = tiny
    ids = tokenizer.encode("Hello there")
    sampling = SamplingParams(max_tokens=5, seed=11, top_logprobs=3)
    direct_policy = HFPolicy(model, tok, seed=0)
    try:
        [direct] = direct_policy.generate_sync([GenerateRequest(ids, sampling)])
    finally:
        direct_policy.close()

    async def remote_gen():
        policy = OpenAICompatPolicy(hf_server.url, "tiny", tokenizer)
        try:
            return (await policy.generate([GenerateRequest(ids, sampling)]))[0]
        finally:
            await policy.aclose()

    remote = asyncio.run(remote_gen())
    assert remote.token_ids == direct.token_ids and len(remote.top_logprobs) == 5
    for got, want in zip(remote.top_logprobs, direct.top_logprobs, strict=True):
        assert [t for t, _ in got] == [t for t, _ in want]
        assert [lp for _, lp in got] == pytest.approx([lp for _, lp in want], abs=1e-4)
