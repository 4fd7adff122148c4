"""Train registered ``skyrl_gym`` envs inside TRL's ``GRPOTrainer``, without changing TRL.

TRL (1.x) lets a ``rollout_func(prompts, trainer) -> dict`` replace its own generation. Ours
plays each prompt as a full multi-turn episode with :class:`~skyrl_agent.engine.RolloutEngine`
and an :class:`~skyrl_agent.policies.hf.HFPolicy` over the very module TRL is training (the
policy holds a reference to it, so every step samples from the current weights), and returns::

    prompt_ids      list[list[int]]    the chat-rendered first messages (our renderer)
    completion_ids  list[list[int]]    every turn and every observation after the prompt
    logprobs        list[list[float]]  sampler logprobs (0.0 on observation tokens)
    env_mask        list[list[int]]    1 on sampled tokens, 0 on observation tokens
    env_reward      list[float | None] the env's episode reward (None: infrastructure failure)
    env_turns, env_stop_reason         per-episode extras, for reward functions and logs

TRL trains on ``prompt_ids + completion_ids`` exactly as returned (it decodes text only to hand
it to reward functions), multiplies its completion mask by ``env_mask`` in the loss, so
observation tokens carry no loss, and forwards every extra key to reward functions as keyword
arguments: :func:`env_reward` reads the env's reward from there. A failed episode (env crash,
sandbox timeout) gets reward ``None``, which TRL leaves out of the group baseline and whose
advantage it sets to 0, and an all-zero ``env_mask``: it is never scored as reward 0.

Usage::

    rows = load_bundled_rows("train")                     # prompt + the env's extras per row
    trainer = GRPOTrainer(
        model=model, processing_class=tok, train_dataset=Dataset.from_list(rows),
        reward_funcs=[env_reward], rollout_func=make_rollout_func(rows, rollout_config=cfg),
        args=GRPOConfig(...),
    )

TRL passes the rollout function only the prompts, not the dataset rows, so the rows are given to
:func:`make_rollout_func` too and each prompt is matched back to its row (its env id, env config
and extras) by the prompt's messages. TRL's ``environment_factory`` does not fit our text envs:
it drives an env's methods as tools through the tokenizer's tool-call parser (it refuses a chat
template without tool calling, such as SmolLM2's) and re-renders the conversation each turn,
while our envs parse the model's raw text and our loop appends observation ids token-in
token-out; the ``rollout_func`` path keeps both.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from skyrl_agent.engine import PromptItem, RolloutEngine
from skyrl_agent.types import RolloutConfig, Trajectory
from skyrl_gym.errors import ConfigError
from trainers.rows import training_rows

__all__ = ["TRLRollout", "make_rollout_func", "env_reward", "prompt_key", "rollout_to_trl"]

#: Row fields that are not passed to the env as extras.
_NOT_EXTRAS = frozenset({"prompt", "env_config"})


def prompt_key(prompt: Any) -> str:
    """A canonical string of a prompt (a message list or a string) for matching it to its row.

    Keys whose value is None are dropped (``datasets`` fills absent message keys with None)."""
    if isinstance(prompt, str):
        return json.dumps(prompt, ensure_ascii=False)
    if not isinstance(prompt, Sequence):
        raise ConfigError(
            f"a prompt must be a list of chat messages or a string, got {type(prompt).__name__}"
        )
    messages = [{k: v for k, v in dict(m).items() if v is not None} for m in prompt]
    return json.dumps(messages, sort_keys=True, ensure_ascii=False, default=str)


def _messages(prompt: Any) -> tuple[dict[str, Any], ...]:
    if isinstance(prompt, str):
        return ({"role": "user", "content": prompt},)
    return tuple({k: v for k, v in dict(m).items() if v is not None} for m in prompt)


def rollout_to_trl(
    trajectories: Sequence[Trajectory], fallback_prompt_ids: Sequence[list[int]], eos_id: int
) -> dict[str, list[Any]]:
    """Our trajectories in TRL's ``rollout_func`` output format (see the module docstring): each
    episode's one training row (:func:`trainers.rows.training_rows`); an episode whose context was
    rewritten trains as several rows, which TRL cannot take, and is a ``ConfigError``.

    ``fallback_prompt_ids[i]`` is used for an episode that failed before its prompt was
    rendered (env set-up failure); such an episode gets one end-of-sequence token with mask 0,
    since TRL cannot handle an empty completion."""
    out: dict[str, list[Any]] = {
        "prompt_ids": [],
        "completion_ids": [],
        "logprobs": [],
        "env_mask": [],
        "env_reward": [],
        "env_turns": [],
        "env_stop_reason": [],
    }
    rows = training_rows(trajectories)
    if not rows.whole:
        episode = next(e for e in range(rows.episodes) if rows.episode.count(e) > 1)
        raise ConfigError(
            f"episode {episode} trains as {rows.episode.count(episode)} rows (its context was rewritten: "
            f"context_strategy={trajectories[episode].context_strategy!r}), and TRL's rollout_func takes one "
            "completion per prompt: play TRL's episodes with context_strategy='stop' (the default), or train "
            "rewritten histories with `skyrl train`"
        )
    for traj, fallback in zip(trajectories, fallback_prompt_ids, strict=True):
        if traj.response_ids:
            prompt_ids, completion_ids, mask = (
                list(traj.prompt_ids),
                list(traj.response_ids),
                list(traj.loss_mask),
            )
            logprobs = (
                list(traj.rollout_logprobs)
                if traj.rollout_logprobs is not None
                else [0.0] * len(completion_ids)
            )
        else:  # nothing was generated: a placeholder that trains nothing
            prompt_ids = list(traj.prompt_ids) or list(fallback)
            completion_ids, mask, logprobs = [eos_id], [0], [0.0]
        if traj.masked:
            mask = [0] * len(completion_ids)
        out["prompt_ids"].append(prompt_ids)
        out["completion_ids"].append(completion_ids)
        out["logprobs"].append(logprobs)
        out["env_mask"].append(mask)
        out["env_reward"].append(None if traj.masked else float(traj.reward))
        out["env_turns"].append(traj.num_turns)
        out["env_stop_reason"].append(str(traj.stop_reason))
    return out


def _run(engine: RolloutEngine, items: list[PromptItem]) -> Any:
    """``engine.run_sync(items)``, from a worker thread when an event loop already runs here
    (a notebook), since ``asyncio.run`` cannot nest."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return engine.run_sync(items)
    with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="skyrl-trl-rollout") as pool:
        return pool.submit(engine.run_sync, items).result()


class TRLRollout:
    """A TRL ``rollout_func``: our multi-turn episodes on the model TRL is training.

    Args:
        rows: the dataset rows (the same ones as TRL's ``train_dataset``); each has ``prompt``
            and the env's extras, optionally ``env_class``/``env_id`` and ``env_config``.
        env_id: registered env id for every row (else each row's ``env_class``/``env_id``).
        rollout_config: budgets and sampling of our loop. ``n_samples`` is ignored: TRL's
            sampler already repeats each prompt ``num_generations`` times.
        env_config: env config for every row (a row's own ``env_config`` wins).
        autocast_bf16: sample under bf16 autocast.
        max_batch_size: most episodes in one model call of the policy.
    """

    def __init__(
        self,
        rows: Iterable[Mapping[str, Any]],
        *,
        env_id: str | None = None,
        rollout_config: RolloutConfig | None = None,
        env_config: Mapping[str, Any] | None = None,
        autocast_bf16: bool = False,
        max_batch_size: int = 32,
    ) -> None:
        self.config = rollout_config or RolloutConfig()
        if self.config.context_strategy != "stop" or self.config.step_wise:
            raise ConfigError(
                f"TRL's rollout_func takes one completion per prompt, and context_strategy="
                f"{self.config.context_strategy!r} / step_wise={self.config.step_wise} make several training "
                "rows of an episode: use context_strategy='stop' and step_wise=False with TRL, or `skyrl train`"
            )
        self.autocast_bf16 = autocast_bf16
        self.max_batch_size = max_batch_size
        self.items: dict[str, PromptItem] = {}
        for i, row in enumerate(rows):
            if "prompt" not in row:
                raise ConfigError(f"row {i} has no 'prompt' column; TRL needs one (chat messages)")
            row_env = env_id or row.get("env_id") or row.get("env_class")
            if not row_env:
                raise ConfigError(f"row {i} names no env; pass env_id=... or add an 'env_class' column")
            cfg = {**dict(env_config or {}), **dict(row.get("env_config") or {})}
            extras = {k: v for k, v in row.items() if k not in _NOT_EXTRAS}
            item = PromptItem(str(row_env), _messages(row["prompt"]), cfg, extras, str(row.get("id", i)))
            key = prompt_key(row["prompt"])
            old = self.items.get(key)
            if old is not None and (old.env_id, dict(old.extras), dict(old.env_config)) != (
                item.env_id,
                dict(item.extras),
                dict(item.env_config),
            ):
                raise ConfigError(
                    f"rows {old.prompt_id} and {item.prompt_id} have the same prompt but different envs or "
                    "extras; TRL passes only the prompt to a rollout function, so make the prompts unique"
                )
            self.items.setdefault(key, item)
        if not self.items:
            raise ConfigError("make_rollout_func needs at least one dataset row")
        self.calls = 0
        self.last_trajectories: list[Trajectory] = []
        self._policy: Any = None

    def _policy_for(self, model: Any, tokenizer: Any) -> Any:
        from skyrl_agent.policies.hf import HFPolicy

        if self._policy is None or self._policy.model is not model:
            if self._policy is not None:
                self._policy.close()
            self._policy = HFPolicy(
                model,
                tokenizer,
                max_batch_size=self.max_batch_size,
                autocast_bf16=self.autocast_bf16,
                seed=self.config.seed,
            )
        return self._policy

    def __call__(self, prompts: Sequence[Any], trainer: Any) -> dict[str, list[Any]]:
        """Play one episode per prompt (in order) with ``trainer``'s current model."""
        items = []
        for p in prompts:
            item = self.items.get(prompt_key(p))
            if item is None:
                raise ConfigError(
                    "a prompt from TRL matches no row given to make_rollout_func; pass the same rows "
                    f"as the train dataset (prompt starts {prompt_key(p)[:120]!r})"
                )
            items.append(item)
        model = trainer.accelerator.unwrap_model(trainer.model)
        tokenizer = getattr(trainer.processing_class, "tokenizer", None) or trainer.processing_class
        policy = self._policy_for(model, tokenizer)
        # A fresh seed per call (TRL repeats prompts across steps); one episode per prompt.
        cfg = dataclasses.replace(self.config, n_samples=1, seed=self.config.seed + 1_000_003 * self.calls)
        self.calls += 1
        engine = RolloutEngine(policy, cfg, progress=False)
        was_training = model.training
        model.eval()
        try:
            result = _run(engine, items)
        finally:
            model.train(was_training)
        self.last_trajectories = result.trajectories
        fallback = [
            [] if t.prompt_ids else engine.renderer.encode_prompt(list(i.prompt))
            for t, i in zip(result.trajectories, items, strict=True)
        ]
        eos = tokenizer.eos_token_id if tokenizer.eos_token_id is not None else 0
        return rollout_to_trl(result.trajectories, fallback, int(eos))

    def close(self) -> None:
        """Stop the policy's worker thread. Idempotent."""
        if self._policy is not None:
            self._policy.close()
            self._policy = None


def make_rollout_func(
    rows: Iterable[Mapping[str, Any]],
    *,
    env_id: str | None = None,
    rollout_config: RolloutConfig | None = None,
    env_config: Mapping[str, Any] | None = None,
    autocast_bf16: bool = False,
    max_batch_size: int = 32,
) -> TRLRollout:
    """A ``rollout_func`` for ``GRPOTrainer(rollout_func=...)`` that plays ``rows``' envs.

    See :class:`TRLRollout` for the arguments and the module docstring for what it returns."""
    return TRLRollout(
        rows,
        env_id=env_id,
        rollout_config=rollout_config,
        env_config=env_config,
        autocast_bf16=autocast_bf16,
        max_batch_size=max_batch_size,
    )


def env_reward(
    prompts: Sequence[Any],
    completions: Sequence[Any],
    env_reward: Sequence[float | None] | None = None,
    **kwargs: Any,
) -> list[float | None]:
    """TRL reward function: the env's episode reward, forwarded by :class:`TRLRollout`.

    Logged by TRL as ``rewards/env_reward/mean``. ``None`` (a failed episode) tells TRL to leave
    the sample out of the group baseline."""
    if env_reward is None:
        raise ConfigError(
            "env_reward found no 'env_reward' field: use it together with rollout_func=make_rollout_func(...)"
        )
    return [None if r is None else float(r) for r in env_reward]
