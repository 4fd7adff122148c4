"""TrainConfig fields are `skyrl train` flags with their docstrings as help; the algorithm choices
and loss hyperparameters are the losses' own, and reach the loss calls."""

import argparse
import dataclasses
import typing

import pytest
import torch

from skyrl_gym.errors import ConfigError
from trainers.config import TrainConfig, config_from_flags, train_settings
from trainers.types import (
    AdvantageEstimator,
    KLConfig,
    KLEstimator,
    LossReduction,
    PolicyLossConfig,
    PolicyLossType,
)


def parse(argv):
    """The config ``skyrl train ARGV`` runs, and the ``train`` command's parser."""
    from skyrl_gym.cli import build_parser

    (commands,) = [a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    return config_from_flags(argv), commands.choices["train"]


def test_flags_map_onto_fields():
    cfg, parser = parse(
        "--lora-rank 8 --lora-alpha 16 --lora-target-modules q_proj v_proj --lora-dropout 0.05 --no-lora-merge "
        "--advantage gae --gae-lambda 0.95 --value-coef 0.25 --value-clip 0.1 --async-staleness 2 "
        "--dist-backend gloo --no-fused-head".split()
    )
    assert (
        cfg.model.lora_rank,
        cfg.model.lora_alpha,
        cfg.model.lora_target_modules,
        cfg.model.lora_dropout,
    ) == (
        8,
        16,
        ("q_proj", "v_proj"),
        0.05,
    )
    assert not cfg.model.lora_merge and not cfg.optimizer.fused_head
    assert (
        cfg.algorithm.advantage,
        cfg.algorithm.gae_lambda,
        cfg.algorithm.value_coef,
        cfg.algorithm.value_clip,
    ) == ("gae", 0.95, 0.25, 0.1)
    assert cfg.run.async_staleness == 2 and cfg.run.dist_backend == "gloo"
    help_text = " ".join(parser.format_help().split())
    assert "at most k updates behind" in help_text and "value head" in help_text


@pytest.mark.parametrize(
    "kwargs",
    [
        {"async_staleness": -1},
        {"sampler_cascade_min_tokens": -1},
        {"sampler_max_rows": 0},
        {"gae_lambda": 1.5},
        {"value_clip": -0.1},
        {"lora_target_modules": "q_proj"},
        # the losses' own checks run when the config is made, not at the first step
        {"dual_clip_c": 0.5},
        {"tis_cap": 0.0},
        {"gspo_eps_low": 1.0},
        {"cispo_eps_low": 1.5},
        {"norm_constant": 0.0},
        {"kl_clamp": -1.0},
        {"loss": "ppo"},
        {"advantage": "grpo++"},
    ],
)
def test_bad_values_are_config_errors(kwargs):
    with pytest.raises(ConfigError):
        TrainConfig(**kwargs)


def test_env_config_flag_reaches_the_rollout_items():
    from skyrl_agent.tasks import with_env_config
    from skyrl_agent.types import PromptItem
    from trainers.config import parse_env_config

    cfg = TrainConfig(env_config=("max_turns=3", "db_dir=/data/dbs", 'tags=["a"]'))
    settings = parse_env_config(cfg.data.env_config)
    assert settings == {"max_turns": 3, "db_dir": "/data/dbs", "tags": ["a"]}
    plain = PromptItem("calculator", ({"role": "user", "content": "hi"},), prompt_id="r0")
    own = PromptItem("calculator", plain.prompt, env_config={"max_turns": 5}, prompt_id="r1")
    a, b = with_env_config([plain, own], settings)
    assert a.env_config == settings
    # a row's own env_config wins key by key over the flag
    assert b.env_config == {**settings, "max_turns": 5}
    # ENV.KEY applies to that env's tasks only
    sql = PromptItem("text2sql", plain.prompt, prompt_id="r2")
    scoped = parse_env_config(("text2sql.db_path=/data", "max_turns=2"))
    c, d = with_env_config([plain, sql], scoped)
    assert c.env_config == {"max_turns": 2}
    assert d.env_config == {"max_turns": 2, "db_path": "/data"}


def test_malformed_env_config_is_refused_with_the_fix():
    with pytest.raises(ConfigError, match="KEY=VALUE"):
        TrainConfig(env_config=("max_turns",))
    with pytest.raises(ConfigError, match="tuple"):
        TrainConfig(env_config="max_turns=3")


MIRRORED_CHOICES = {
    "advantage": AdvantageEstimator,
    "loss": PolicyLossType,
    "reduction": LossReduction,
    "kl_estimator": KLEstimator,
}


@pytest.mark.parametrize("field", sorted(MIRRORED_CHOICES))
def test_choice_flags_are_the_enums_values(field):
    enum = MIRRORED_CHOICES[field]
    hint = train_settings()[field].hint
    assert {str(v) for v in typing.get_args(hint)} == {e.value for e in enum}
    _, parser = parse([])
    (action,) = [a for a in parser._actions if a.dest == field]
    assert [str(c) for c in action.choices] == [e.value for e in enum]
    for member in enum:  # every choice the CLI offers is one the trainer accepts
        cfg, _ = parse([f"--{field.replace('_', '-')}", member.value, "--group-size", "2"])
        assert cfg.as_settings()[field] == member.value


def test_observation_style_choices_are_the_runtimes():
    from skyrl_agent.types import ObservationStyle

    hint = train_settings()["observation_style"].hint
    assert set(typing.get_args(hint)) == set(typing.get_args(ObservationStyle))


def test_every_loss_hyperparameter_is_a_flag_with_the_losses_default():
    settings, defaults = train_settings(), TrainConfig().as_settings()
    for f in dataclasses.fields(PolicyLossConfig):
        assert f.name in settings, f"PolicyLossConfig.{f.name} has no TrainConfig setting"
        assert settings[f.name].part == "algorithm", f.name
        assert defaults[f.name] == f.default, f.name
    # the KL term's settings under a kl_ prefix (in_reward moves the KL into the rewards: not a
    # loss parameter, and the loop does not support it yet)
    for f in dataclasses.fields(KLConfig):
        if f.name != "in_reward":
            assert f"kl_{f.name}" in settings, f"KLConfig.{f.name} has no TrainConfig setting"
    assert TrainConfig().loss_config.norm_constant == 2 * 40.0  # max_turns x max_tokens_per_turn


def test_non_default_loss_flags_reach_the_loss_calls(monkeypatch):
    import trainers.step as step_module
    from tests.trainers.test_step import make_batch, tiny_lm
    from trainers.logprobs import token_logprobs

    cfg, _ = parse(
        "--eps-low 0.1 --eps-high 0.3 --dual-clip-c 3.5 --gspo-eps-low 0.001 --gspo-eps-high 0.002 --cispo-eps-low 0.5 "
        "--cispo-eps-high 0.4 --dro-beta 0.2 --truncated-is --tis-cap 1.5 --norm-constant 64 --kl-coef 0.1 "
        "--kl-estimator k2 --kl-clamp 5 --reduction seq_mean_token_sum_norm --no-bf16 --loss cispo".split()
    )
    seen = {}

    def spy(name, real):
        def wrapper(*args, **kwargs):
            seen.setdefault(name, []).append((args, kwargs))
            return real(*args, **kwargs)

        return wrapper

    monkeypatch.setattr(step_module, "policy_loss", spy("policy", step_module.policy_loss))
    monkeypatch.setattr(step_module, "kl_loss", spy("kl", step_module.kl_loss))
    model = tiny_lm()
    batch = make_batch()
    batch.rollout_logprobs_BT = token_logprobs(model, batch.input_ids_BT, batch.attention_mask_BT)[0].detach()
    ref = tiny_lm(seed=1)

    def ref_fn(ids, attn, prefix=0, mask=None):
        return token_logprobs(ref, ids, attn, prefix_len=prefix, mask_BT=mask)[0]

    step_module.train_step(
        model, torch.optim.SGD(model.parameters(), lr=0.0), batch, cfg, ref_logprobs_fn=ref_fn
    )
    args, kwargs = seen["policy"][0]
    assert args[0] == "cispo"
    assert args[5] == PolicyLossConfig(
        eps_low=0.1,
        eps_high=0.3,
        dual_clip_c=3.5,
        gspo_eps_low=0.001,
        gspo_eps_high=0.002,
        cispo_eps_low=0.5,
        cispo_eps_high=0.4,
        dro_beta=0.2,
        truncated_is=True,
        tis_cap=1.5,
        reduction="seq_mean_token_sum_norm",
        norm_constant=64.0,
    )
    # every hyperparameter was set off its default and arrived
    assert all(getattr(args[5], f.name) != f.default for f in dataclasses.fields(PolicyLossConfig))
    assert kwargs["rollout_logprobs_BT"] is not None  # the TIS weights have their input
    args, kwargs = seen["kl"][0]
    assert args[3] == KLConfig(estimator="k2", coef=0.1, clamp=5.0)
    # the norm constant reaches it through the batch's reduction weights: 1 / (B=5 * 64) per row
    assert args[4] == "seq_mean_token_sum_norm"
    torch.testing.assert_close(kwargs["weights_B"], torch.full((5,), 1 / (5 * 64.0), dtype=torch.float64))
    policy_kwargs = seen["policy"][0][1]
    torch.testing.assert_close(policy_kwargs["weights_B"], kwargs["weights_B"])


def test_sampler_cascade_flag_reaches_the_engine() -> None:
    """``--sampler-cascade-min-tokens`` sets cascade decode in the trainer's sampler (its bf16
    copy under autocast): on at 64 by default, 0 turns it off. ``--sampler-max-rows`` bounds its
    batch, never below one step's episodes."""
    from skyrl_agent.models import tiny_random_model
    from trainers.distributed import DistContext
    from trainers.models import _sampler

    model, tok = tiny_random_model()
    on_cfg, _ = parse(["--bf16"])
    off_cfg, _ = parse("--sampler-cascade-min-tokens 0 --bf16 --sampler-max-rows 8".split())
    on, off = _sampler(on_cfg, model, tok, DistContext()), _sampler(off_cfg, model, tok, DistContext())
    try:
        assert on.engine.config.cascade_min_tokens == 64 and on.engine.runner.cascade_on
        assert off.engine.config.cascade_min_tokens == 0 and not off.engine.runner.cascade_on
        assert on.engine.config.max_rows == 64
        assert off.engine.config.max_rows == off_cfg.run.prompts_per_step * off_cfg.rollout.n_samples == 64
    finally:
        on.close()
        off.close()
