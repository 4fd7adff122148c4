"""``check_env``: assert the ``BaseTextEnv`` contract on any env.

Run it on a new env before training on it::

    from skyrl_gym import check_env, make
    check_env(lambda: make("my_task", env_config=cfg, extras=row), prompt=row["prompt"])

It checks, on fresh episodes: ``init`` returns messages and a dict; every ``step`` returns a
proper step output with a finite reward; ``done`` arrives by ``max_turns``; garbage actions
(empty, NUL bytes, 1 MB of text, broken tool calls, unusual Unicode) produce observations rather
than exceptions; ``get_metrics``/``aggregate_metrics`` give dicts; ``close`` can be called
twice; two episodes with the same seed and actions give the same outputs; and, when the env's
``example()`` names solving actions, that they earn a positive reward.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from skyrl_gym.core import BaseTextEnv
from skyrl_gym.errors import EnvContractError
from skyrl_gym.types import BaseTextEnvStepOutput, ConversationType, as_step_output

__all__ = ["check_env", "GARBAGE_ACTIONS", "CheckReport"]

GARBAGE_ACTIONS: tuple[str, ...] = (
    "",
    "\x00\x00\x00",
    "x" * (1 << 20),
    "<tool_call>{not json</tool_call>",
    '<tool_call>{"name": "no_such_tool", "arguments": {}}</tool_call>',
    '<tool_call>{"name": 1, "arguments": []}</tool_call>',
    "<sql>SELECT</sql><solution>",
    "<function=nothing><parameter=x>1</function>",
    "</s><|im_end|><|endoftext|>",
    "\ud7ff\U0001f600 \u202e reversed \r\n\t",
    "<answer></answer>" * 1000,
)


@dataclass
class CheckReport:
    """What ``check_env`` ran; returned when every check passed."""

    episodes: int = 0
    steps: int = 0
    checks: list[str] = field(default_factory=list)


def _fail(msg: str) -> EnvContractError:
    return EnvContractError(msg)


def _check_messages(messages: Any, where: str) -> None:
    if not isinstance(messages, list):
        raise _fail(f"{where}: expected a list of messages, got {type(messages).__name__}")
    for i, m in enumerate(messages):
        if not isinstance(m, Mapping):
            raise _fail(f"{where}: message {i} is {type(m).__name__}, not a dict")
        if not isinstance(m.get("role"), str):
            raise _fail(f"{where}: message {i} has no string 'role': {m!r:.200}")
        content = m.get("content")
        if not (content is None or isinstance(content, (str, list))):
            raise _fail(f"{where}: message {i} content is {type(content).__name__}")


def _check_step(env: BaseTextEnv, out: Any, action_desc: str) -> BaseTextEnvStepOutput:
    try:
        step = as_step_output(out)
    except TypeError as exc:
        raise _fail(f"step({action_desc}) returned a bad step output: {exc}") from exc
    _check_messages(step.observations, f"step({action_desc}).observations")
    if not isinstance(step.done, bool):
        raise _fail(f"step({action_desc}).done must be a bool, got {type(step.done).__name__}")
    if not math.isfinite(float(step.reward)):
        raise _fail(f"step({action_desc}).reward is not finite: {step.reward}")
    if not isinstance(step.metadata, Mapping):
        raise _fail(f"step({action_desc}).metadata must be a dict, got {type(step.metadata).__name__}")
    if step.postprocessed_action is not None and not isinstance(step.postprocessed_action, str):
        raise _fail(f"step({action_desc}).postprocessed_action must be a str or None")
    return step


def _normalize(step: BaseTextEnvStepOutput) -> tuple:
    return (repr(step.observations), float(step.reward), step.done, step.postprocessed_action)


def _run_episode(
    make_env: Callable[[], BaseTextEnv],
    prompt: ConversationType,
    actions: Sequence[str],
    seed: int | None,
    report: CheckReport,
) -> tuple[list[tuple], BaseTextEnv, dict[str, Any]]:
    env = make_env()
    if not isinstance(env, BaseTextEnv):
        raise _fail(f"expected a BaseTextEnv, got {type(env).__name__}")
    if seed is not None:
        env.seed(seed)
    result = env.init(list(prompt))
    if not (isinstance(result, tuple) and len(result) == 2):
        raise _fail("init(prompt) must return (messages, info)")
    messages, info = result
    _check_messages(messages, "init().messages")
    if not isinstance(info, Mapping):
        raise _fail(f"init().info must be a dict, got {type(info).__name__}")
    if not isinstance(env.max_turns, int) or env.max_turns < 1:
        raise _fail(f"max_turns must be a positive int, got {env.max_turns!r}")
    trace: list[tuple] = []
    done = False
    limit = env.max_turns
    for turn in range(limit):
        action = actions[turn % len(actions)]
        desc = f"{action[:40]!r}{'...' if len(action) > 40 else ''} at turn {turn + 1}"
        try:
            raw = env.step(action)
        except Exception as exc:  # noqa: BLE001 - the point is to report it
            raise _fail(
                f"step({desc}) raised {type(exc).__name__}: {exc}. A model's malformed action must "
                "come back as an observation, not an exception"
            ) from exc
        step = _check_step(env, raw, desc)
        report.steps += 1
        trace.append(_normalize(step))
        if step.done:
            done = True
            break
    if not done:
        raise _fail(f"episode not done after max_turns={limit} steps; done must be True by the turn limit")
    metrics = env.get_metrics()
    if not isinstance(metrics, Mapping):
        raise _fail(f"get_metrics() must return a dict, got {type(metrics).__name__}")
    report.episodes += 1
    return trace, env, dict(metrics)


def _check_hook_signatures(env_cls: type) -> None:
    """``setup`` and ``grade`` are hooks the runtime calls with no argument: an override that
    needs one (a helper that happens to be named ``grade``) would fail every episode."""
    import inspect

    for name in ("setup", "grade"):
        impl = getattr(env_cls, name, None)
        if impl is None or impl is getattr(BaseTextEnv, name, None):
            continue
        try:
            inspect.signature(impl).bind(object())  # self only
        except TypeError:
            raise _fail(
                f"{env_cls.__name__}.{name}{inspect.signature(impl)} must take no arguments: the runtime "
                f"calls env.{name}() as a hook (see BaseTextEnv.{name}); rename a helper of that name"
            ) from None
        except ValueError:  # no signature (a builtin): nothing to check
            continue


def check_env(
    env: BaseTextEnv | Callable[[], BaseTextEnv],
    *,
    prompt: ConversationType | None = None,
    actions: Sequence[str] | None = None,
    good_actions: Sequence[str] | None = None,
    seed: int = 1234,
) -> CheckReport:
    """Check that ``env`` keeps the text-env contract; raise :class:`EnvContractError` if not.

    ``env`` is a zero-argument factory (preferred: every check gets a fresh episode) or an env
    instance made by ``skyrl_gym.make`` (it is used for the first episode; twins are made from
    its spec for the rest). ``prompt``, ``good_actions`` default to the env class's
    ``example()``; ``actions`` defaults to :data:`GARBAGE_ACTIONS`.
    """
    report = CheckReport()
    if isinstance(env, BaseTextEnv):
        first: list[BaseTextEnv | None] = [env]
        if env.spec is None:
            raise _fail("check_env needs a factory (lambda: MyEnv(...)) or an env built by skyrl_gym.make")
        kwargs = dict(getattr(env, "_make_kwargs", {}))
        env_spec = env.spec

        def make_env() -> BaseTextEnv:
            if first[0] is not None:
                e, first[0] = first[0], None
                return e
            return env_spec.make(**kwargs)  # type: ignore[return-value]

        env_cls: type = type(env)
    elif callable(env):
        make_env = env  # type: ignore[assignment]
        probe = make_env()
        env_cls = type(probe)
        probe.close()
    else:
        raise TypeError(f"check_env takes an env or a factory, got {type(env).__name__}")

    _check_hook_signatures(env_cls)
    report.checks.append("setup/grade hooks take no arguments")
    example = env_cls.example() if hasattr(env_cls, "example") else None
    if prompt is None:
        prompt = list(example.prompt) if example is not None else [{"role": "user", "content": "Hello"}]
    if good_actions is None and example is not None:
        good_actions = example.good_actions
    garbage = list(actions or GARBAGE_ACTIONS)

    # 1. Garbage actions: every one, each on its own fresh episode, must not raise.
    traces = []
    for action in garbage:
        trace, ep_env, metrics = _run_episode(make_env, prompt, [action], seed, report)
        ep_env.close()
        ep_env.close()
        traces.append((trace, metrics))
    report.checks += ["garbage actions give observations", "done by max_turns", "close twice"]

    # 2. Metrics aggregate.
    agg = env_cls.aggregate_metrics([m for _, m in traces])
    if not isinstance(agg, Mapping):
        raise _fail(f"aggregate_metrics() must return a dict, got {type(agg).__name__}")
    report.checks.append("aggregate_metrics")

    # 3. Determinism under a seed: the same actions give the same outputs.
    mixed = garbage[:3] + list(good_actions or [])
    runs = []
    for _ in range(2):
        trace, ep_env, metrics = _run_episode(make_env, prompt, mixed, seed, report)
        ep_env.close()
        runs.append((trace, repr(sorted(metrics.items()))))
    if runs[0] != runs[1]:
        raise _fail(
            f"two episodes with seed={seed} and the same actions differ:\n{runs[0]!r:.500}\n{runs[1]!r:.500}"
        )
    report.checks.append("seeded determinism")

    # 4. Solving actions earn a positive reward.
    if good_actions:
        trace, ep_env, _ = _run_episode(make_env, prompt, list(good_actions), seed, report)
        ep_env.close()
        total = sum(t[1] for t in trace)
        if not total > 0:
            raise _fail(f"the example's good_actions earned total reward {total}, expected > 0")
        report.checks.append("good actions earn reward")
    return report
