"""The env's optional setup()/grade() hooks run in their own pipeline stages, outside the
generation slots."""

import asyncio
import threading
import time

import pytest

import skyrl_gym
from skyrl_agent._env_stages import has_hook
from skyrl_agent.engine import PromptItem, RolloutEngine
from skyrl_agent.loop import run_episode
from skyrl_agent.policies.fake import ScriptedPolicy
from skyrl_agent.types import RolloutConfig, StopReason
from skyrl_gym import BaseTextEnv, BaseTextEnvStepOutput
from tests.agent.envs import EchoEnv

ENV_ID = "test-agent-slow-hooks"


class _Tracker:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.hooks_running = 0
        self.setups = 0
        self.grades = 0
        self.inits_before_setup = 0
        self.closed = 0


TRACK = _Tracker()


class SlowHooksEnv(BaseTextEnv):
    """Two turns of 0.1 reward; setup() and grade() sleep (a container start, a verifier)."""

    def __init__(self, env_config=None, extras=None):
        super().__init__(env_config, extras)
        extras = extras or {}
        self.max_turns = 2
        self.setup_s = float(extras.get("setup_s", 0.0))
        self.grade_s = float(extras.get("grade_s", 0.0))
        self.grade_value = extras.get("grade_value", 1.0)
        self.fail = extras.get("fail")
        self.step_s = float(extras.get("step_s", 0.0))
        self.ready = False

    def _sleep(self, seconds):
        with TRACK.lock:
            TRACK.hooks_running += 1
        try:
            time.sleep(seconds)
        finally:
            with TRACK.lock:
                TRACK.hooks_running -= 1

    def setup(self):
        if self.ready:
            return
        if self.fail == "setup":
            raise ConnectionError("container did not start")
        self._sleep(self.setup_s)
        with TRACK.lock:
            TRACK.setups += 1
        self.ready = True

    def init(self, prompt):
        if not self.ready:
            with TRACK.lock:
                TRACK.inits_before_setup += 1
        return prompt, {}

    def step(self, action):
        self.turns += 1
        time.sleep(self.step_s)
        return BaseTextEnvStepOutput([{"role": "user", "content": "ok"}], 0.1, self.turns >= self.max_turns)

    def grade(self):
        if self.fail == "grade":
            raise RuntimeError("verifier crashed")
        self._sleep(self.grade_s)
        with TRACK.lock:
            TRACK.grades += 1
        return self.grade_value

    def close(self):
        with TRACK.lock:
            TRACK.closed += 1


@pytest.fixture(autouse=True)
def _registered():
    global TRACK
    TRACK = _Tracker()
    skyrl_gym.register(ENV_ID, SlowHooksEnv)
    yield
    skyrl_gym.deregister(ENV_ID)


def _items(n, **extras):
    return [
        PromptItem(ENV_ID, ({"role": "user", "content": f"task {i}"},), {}, extras, f"p{i}") for i in range(n)
    ]


class _Watching(ScriptedPolicy):
    """Records how many generate calls run at once, and whether hooks were sleeping meanwhile."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.in_flight = 0
        self.max_in_flight = 0
        self.calls_during_hooks = 0

    async def generate(self, requests):
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        if TRACK.hooks_running:
            self.calls_during_hooks += 1
        try:
            return await super().generate(requests)
        finally:
            self.in_flight -= 1


def test_hooks_are_detected_by_override():
    assert has_hook(SlowHooksEnv(), "setup") and has_hook(SlowHooksEnv(), "grade")
    assert not has_hook(EchoEnv(), "setup") and not has_hook(EchoEnv(), "grade")
    assert not has_hook(object(), "grade")  # a duck-typed env without hooks
    assert BaseTextEnv().grade() is None and BaseTextEnv().setup() is None  # the no-op defaults


def test_slow_setup_and_grade_do_not_hold_generation_slots(tokenizer):
    setup_s, grade_s, latency_s, concurrency, episodes = 0.3, 0.3, 0.05, 2, 8
    policy = _Watching(tokenizer, ["a"], latency_s=latency_s)
    cfg = RolloutConfig(max_turns=4, concurrency=concurrency, env_threads=episodes)
    start = time.perf_counter()
    result = RolloutEngine(policy, cfg, progress=False).run_sync(
        _items(episodes, setup_s=setup_s, grade_s=grade_s)
    )
    wall = time.perf_counter() - start
    waves = episodes // concurrency
    in_slot = waves * (setup_s + 2 * latency_s + grade_s)  # if set-up and grading held the slots
    staged = setup_s + waves * 2 * latency_s + grade_s  # the pipeline: about 1.0 s here
    assert result.stats.masked == 0 and TRACK.setups == episodes and TRACK.grades == episodes
    assert TRACK.inits_before_setup == 0 and TRACK.closed == episodes
    # generation ran at full concurrency while set-ups and graders were sleeping
    assert policy.max_in_flight == concurrency and policy.calls_during_hooks > 0
    assert wall < (staged + in_slot) / 2, (wall, staged, in_slot)
    for t in result.trajectories:
        assert t.stop_reason == StopReason.ENV_DONE and t.grade_reward == 1.0
        assert t.reward == pytest.approx(1.2) and t.turn_rewards == pytest.approx([0.1, 1.1])
        last = t.turn_spans[-1][1] - 1
        assert t.token_rewards[last] == pytest.approx(1.1) and sum(t.token_rewards) == pytest.approx(1.2)
        assert t.env_seconds >= setup_s + grade_s
        t.validate()


@pytest.mark.parametrize(
    ("extras", "where"),
    [
        ({"fail": "setup"}, "in env.setup"),
        ({"fail": "grade"}, "in env.grade"),
        ({"grade_value": float("nan")}, "not a finite reward"),
        ({"grade_s": 1.0}, "env.grade took longer than 0.2s"),
    ],
)
def test_hook_failures_mask_the_episode(tokenizer, extras, where):
    cfg = RolloutConfig(max_turns=4, max_retries=0, env_grade_timeout_s=0.2)
    result = RolloutEngine(ScriptedPolicy(tokenizer, ["a"]), cfg, progress=False).run_sync(
        _items(2, **extras)
    )
    for t in result.trajectories:
        assert t.masked and t.stop_reason == StopReason.ENV_ERROR and where in t.error
        assert t.grade_reward is None
    assert result.stats.masked == 2 and result.stats.mean_reward == 0.0
    if extras.get("fail") == "setup":
        assert TRACK.closed == 2  # a failed set-up still closes the env


def test_run_episode_calls_the_hooks_itself(tokenizer):
    env = SlowHooksEnv(extras={"grade_value": 0.5})
    traj = asyncio.run(
        run_episode(
            ScriptedPolicy(tokenizer, ["a"]),
            env,
            [{"role": "user", "content": "x"}],
            config=RolloutConfig(max_turns=4),
        )
    )
    assert TRACK.setups == 1 and TRACK.inits_before_setup == 0 and TRACK.grades == 1 and TRACK.closed == 1
    assert traj.reward == pytest.approx(0.7) and traj.grade_reward == 0.5


def test_budget_stops_are_graded_and_errors_are_not(tokenizer):
    # the runtime's turn budget ends the episode: the verifier still scores the work done
    cfg = RolloutConfig(max_turns=1)
    [t] = (
        RolloutEngine(ScriptedPolicy(tokenizer, ["a"]), cfg, progress=False).run_sync(_items(1)).trajectories
    )
    assert t.stop_reason == StopReason.MAX_TURNS and t.grade_reward == 1.0 and t.reward == pytest.approx(1.1)
    # a policy failure masks the episode: nothing to grade
    cfg = RolloutConfig(max_turns=4, max_retries=0)
    policy = ScriptedPolicy(tokenizer, ["a"], fail_on=[1])
    [t] = RolloutEngine(policy, cfg, progress=False).run_sync(_items(1)).trajectories
    assert t.masked and t.grade_reward is None and TRACK.grades == 1


def test_readme_hooks_example(tokenizer):
    from tests.docs._markdown import example_after

    block = example_after("docs/guides/agent-runtime.md", "**Slow set-up and grading**")
    scope = {"__name__": "readme_hooks"}
    exec(compile(block.code, block.where, "exec"), scope)
    skyrl_gym.register("readme-verified", scope["VerifiedEnv"])
    try:
        items = [
            PromptItem("readme-verified", ({"role": "user", "content": "6 x 7?"},), {}, {}, str(i))
            for i in range(4)
        ]
        policy = ScriptedPolicy(tokenizer, ["It is 42."])
        t0 = time.perf_counter()
        result = RolloutEngine(policy, RolloutConfig(concurrency=1, env_threads=4), progress=False).run_sync(
            items
        )
        wall = time.perf_counter() - t0
    finally:
        skyrl_gym.deregister("readme-verified")
    assert [t.reward for t in result.trajectories] == [1.0] * 4 and result.stats.masked == 0
    assert wall < 4 * 0.4  # one generation slot, yet set-ups and gradings overlapped


def test_chat_level_episodes_get_the_hooks_too():
    class Chat:
        async def chat(self, messages, sampling):
            return "a"

    cfg = RolloutConfig(max_turns=4)
    [t] = RolloutEngine(Chat(), cfg, progress=False).run_sync(_items(1, grade_value=2.0)).trajectories
    assert TRACK.setups == 1 and TRACK.inits_before_setup == 0 and TRACK.grades == 1 and TRACK.closed == 1
    assert (
        t.grade_reward == 2.0
        and t.turn_rewards == pytest.approx([0.1, 2.1])
        and t.reward == pytest.approx(2.2)
    )


def test_deadline_grading_depends_on_whether_the_env_is_idle(tokenizer):
    # the deadline passes while the policy generates: the env is idle, the verifier runs
    cfg = RolloutConfig(max_turns=4, episode_deadline_s=0.3, max_retries=0)
    slow_policy = ScriptedPolicy(tokenizer, ["a"], latency_s=0.5)
    [t] = RolloutEngine(slow_policy, cfg, progress=False).run_sync(_items(1)).trajectories
    assert t.stop_reason == StopReason.DEADLINE and t.num_turns == 0 and t.grade_reward is None  # no turn yet
    cfg = RolloutConfig(max_turns=4, episode_deadline_s=0.8, max_retries=0)
    policy = ScriptedPolicy(tokenizer, ["a"], latency_s=0.5)
    [t] = RolloutEngine(policy, cfg, progress=False).run_sync(_items(1)).trajectories
    assert t.stop_reason == StopReason.DEADLINE and t.num_turns == 1 and t.grade_reward == 1.0
    # the deadline passes inside env.step: the call runs on in its thread, so no grading
    [t] = (
        RolloutEngine(ScriptedPolicy(tokenizer, ["a"]), cfg, progress=False)
        .run_sync(_items(1, step_s=2.0))
        .trajectories
    )
    assert t.stop_reason == StopReason.DEADLINE and t.num_turns == 1 and t.grade_reward is None
