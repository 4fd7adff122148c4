"""A harness's calls captured as a branching session: one base URL per trial, client retries
deduplicated, each root-to-leaf path a trajectory with its place in the tree, a rule for which
paths train, and one GRPO step on what was captured (real HTTP, the real ``openai`` client, a
tiny random model behind ``skyrl serve``'s app)."""

from __future__ import annotations

import httpx
import openai
import pytest
import torch

from skyrl_agent.io import load_jsonl, load_parquet, save_jsonl, save_parquet
from skyrl_agent.server import CallRecord, ChoiceRecord, ServerConfig, ServerThread, calls_to_trajectories
from skyrl_agent.server.sessions import select_paths, with_reward
from skyrl_agent.types import Trajectory
from skyrl_gym.errors import ConfigError


def _call(prompt, *outs):
    return CallRecord(
        "completion", list(prompt), [ChoiceRecord(list(o), [-0.5] * len(o), "stop") for o in outs]
    )


def test_a_retry_replaces_the_answer_nobody_used_and_a_rewrite_starts_a_branch():
    calls = [
        _call([1, 2], [3, 4]),
        _call([1, 2, 3, 4, 9], [5]),  # continues call 0
        _call([1, 2, 3, 4, 9, 5, 8], [6]),  # continues call 1 ...
        _call([1, 2, 3, 4, 9, 5, 8], [7]),  # ... and the client retried it: [6] was never used
        _call([1, 2, 77], [78]),  # the harness summarised: a new root sharing [1, 2]
    ]
    trajs = calls_to_trajectories(calls, reward=1.0, session_id="s")
    assert [t.input_ids for t in trajs] == [[1, 2, 3, 4, 9, 5, 8, 7], [1, 2, 77, 78]]
    first, second = (t.session for t in trajs)
    assert first.retries == second.retries == 1 and first.branches == 2
    assert (second.forked_from, second.fork_at) == (0, 2) and (first.forked_from, first.fork_at) == (1, 2)
    assert second.final and not first.final and second.session_id == "s"
    assert all(t.env_metrics == {} for t in trajs)  # the place is a record, not a metric
    assert trajs[0].loss_mask == [1, 1, 0, 1, 0, 1] and trajs[0].num_turns == 3
    assert select_paths(trajs, "final") == [trajs[1]] and select_paths(trajs, "all") == trajs
    longest = select_paths(trajs, lambda ts: [max(ts, key=lambda t: len(t.input_ids))])
    assert longest == [trajs[0]]
    for t in trajs:
        t.validate()


def test_a_repeated_prompt_whose_first_answer_was_used_is_a_branch_not_a_retry():
    calls = [
        _call([1, 2], [3]),
        _call([1, 2], [4]),  # looks like a retry of call 0 ...
        _call([1, 2, 3, 5], [6]),  # ... but the harness went on from call 0's answer
    ]
    trajs = calls_to_trajectories(calls)
    assert sorted(t.input_ids for t in trajs) == [[1, 2, 3, 5, 6], [1, 2, 4]]
    assert {t.session.retries for t in trajs} == {0}  # not a retry after all: a branch


def test_a_capture_written_with_its_place_in_env_metrics_loads_with_it_as_a_record(tmp_path):
    """Files written before ``SessionPlace`` (2026-12) kept the place in ``env_metrics``."""
    (new,) = calls_to_trajectories([_call([1, 2], [3])], reward=1.0, session_id="s")
    old = new.to_dict()
    old.pop("session")
    old["env_metrics"] = {
        "session_id": "s",
        "branch": 0,
        "branches": 1,
        "forked_from": None,
        "fork_at": None,
        "final": True,
        "retries": 0,
        "tests": 3,
    }
    back = Trajectory.from_dict(old)
    assert back.session == new.session and back.env_metrics == {"tests": 3}
    assert load_jsonl(save_jsonl([back], tmp_path / "t.jsonl")) == [back]
    assert load_parquet(save_parquet([back], tmp_path / "t.parquet")) == [back]
    # an env whose own metrics name a branch (a git task's) keeps them as metrics
    git = Trajectory.from_dict({**old, "env_metrics": {"branch": "main", "tests": 3}})
    assert git.session is None and git.env_metrics == {"branch": "main", "tests": 3}


def test_path_rules_are_checked():
    trajs = calls_to_trajectories([_call([1], [2])])
    with pytest.raises(ConfigError, match="unknown path rule 'best'"):
        select_paths(trajs, "best")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="from the list"):
        select_paths(trajs, lambda ts: [calls_to_trajectories([_call([5], [6])])[0]])


def _harness(base_url: str, *, summarise: bool) -> None:
    """What an agent harness does with nothing but a base URL: turns that extend each other, a
    retried request, and (``summarise``) a rewrite of its own history."""
    client = openai.OpenAI(base_url=base_url, api_key="unused", max_retries=0, timeout=60)
    history = [{"role": "user", "content": "List the files."}]
    first = client.chat.completions.create(model="tiny", messages=history, max_tokens=6, temperature=1.0)
    history += [
        {"role": "assistant", "content": first.choices[0].message.content},
        {"role": "user", "content": "Now count them."},
    ]
    for _ in range(2):  # the first answer got lost on the way back: the client sends it again
        second = client.chat.completions.create(model="tiny", messages=history, max_tokens=6, temperature=1.0)
    if summarise:
        notes = [{"role": "user", "content": f"Summary so far: {second.choices[0].message.content}. Finish."}]
        client.chat.completions.create(model="tiny", messages=notes, max_tokens=6, temperature=1.0)


def test_each_trial_has_its_own_base_url_and_its_paths_train(hf_server, tokenizer):
    server = hf_server
    from skyrl_agent.models import tiny_random_model
    from trainers.config import TrainConfig
    from trainers.episodes import train_on_episodes

    _harness(server.session_url("trial-1"), summarise=True)
    _harness(server.session_url("trial-2"), summarise=False)
    assert server.session_url("trial-1") == f"{server.origin}/s/trial-1/v1"
    assert len(server.store.get("trial-1")) == 4 and len(server.store.get("trial-2")) == 3
    one = server.store.trajectories("trial-1")
    assert len(one) == 2 and all(t.session.retries == 1 for t in one)
    assert [t.num_turns for t in one] == [2, 1] and one[1].session.final
    assert one[1].session.forked_from == 0 and one[1].session.fork_at > 0
    (final,) = server.store.trajectories("trial-1", paths="final")
    assert final.input_ids == one[1].input_ids
    (two,) = server.store.trajectories("trial-2")  # the retry left one path
    assert two.num_turns == 2 and two.session.branches == 1
    # over HTTP too, as a harness's driver fetches them after the trial
    body = httpx.get(f"{server.url}/sessions/trial-1", timeout=30).json()
    fetched = [Trajectory.from_dict(d) for d in body["trajectories"]]
    assert [t.input_ids for t in fetched] == [t.input_ids for t in one]
    assert [t.session.branch for t in fetched] == [0, 1] and fetched[0].session.session_id == "trial-1"
    # the base URL's session name is checked like any field
    bad = httpx.post(f"{server.origin}/s/no%20spaces/v1/chat/completions", json={}, timeout=30)
    assert bad.status_code == 400 and "session_id" in bad.text

    # one GRPO step on the captured paths: trial 1 solved (reward 1), trial 2 not (0)
    episodes = [[with_reward(t, 1.0) for t in one], [with_reward(two, 0.0)]]
    torch.manual_seed(0)
    model, _ = tiny_random_model(tokenizer)
    before = [p.detach().clone() for p in model.parameters()]
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    stats = train_on_episodes(
        model, opt, episodes, TrainConfig(bf16=False, micro_batch_size=2), pad_id=tokenizer.pad_token_id
    )
    assert torch.isfinite(torch.tensor(stats.loss)) and stats.grad_norm > 0
    assert any(not torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))


def test_a_base_url_session_needs_the_api_key_when_one_is_set(tokenizer):
    from skyrl_agent.policies.fake import ScriptedPolicy

    with ServerThread(ScriptedPolicy(tokenizer, ["ok"]), ServerConfig(model_name="m", api_key="k3y")) as srv:
        url = srv.session_url("t")
        with pytest.raises(openai.AuthenticationError):
            openai.OpenAI(base_url=url, api_key="wrong", max_retries=0).models.list()
        ok = openai.OpenAI(base_url=url, api_key="k3y", max_retries=0)
        assert [m.id for m in ok.models.list().data] == ["m"]
        ok.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}], max_tokens=2)
        assert list(srv.store.ids()) == ["t"]


def test_skyrl_view_shows_the_branches_where_they_fork_and_what_trained(tmp_path):
    from skyrl_agent.io import save_jsonl
    from skyrl_agent.viewer import load_episodes, render_html

    calls = [
        _call([1, 2], [3, 4]),
        _call([1, 2, 3, 4, 9], [5]),
        _call([1, 2, 3, 4, 9], [6]),  # a retry
        _call([1, 2, 3, 77], [78, 79]),  # a rewrite that keeps three tokens
    ]
    trajs = calls_to_trajectories(calls, reward=1.0, session_id="trial-9")
    page = render_html(load_episodes(save_jsonl(trajs, tmp_path / "session.jsonl")))
    assert page.count('class="fork"') == 2  # each branch marks where it leaves the other
    assert "branch 0/2" in page and "branch 1/2 (final)" in page
    assert "shares its first 3 tokens with branch 0" in page and "client retries dropped: 1" in page
    assert "captured sessions (branches)</td><td>trial-9 (2)" in page
    trained = [sum(t.loss_mask) for t in trajs]
    assert f"/ {trained[0]}</td>" in page and f"/ {trained[1]}</td>" in page  # trained tokens per path
    # the marker sits before the first token the branches do not share: [3] in the rewrite
    rewrite = page.split('id="ep-1"')[1]
    assert rewrite.index("fork: branch 0") < rewrite.index('title="prompt id 77"')
    assert rewrite.index('title="prompt id 3"') < rewrite.index("fork: branch 0")
