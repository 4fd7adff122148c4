import math

import pytest
import torch

from skyrl_gym.errors import ConfigError
from trainers.config import TrainConfig
from trainers.models import lr_factor, lr_scheduler


def _rates(cfg: TrainConfig) -> list[float]:
    """The learning rate each of ``cfg.run.steps`` train steps uses, read from a real optimizer."""
    opt = torch.optim.AdamW([torch.nn.Parameter(torch.zeros(2))], lr=cfg.optimizer.lr)
    sched = lr_scheduler(opt, cfg.optimizer, cfg.run.steps)
    rates = []
    for _ in range(cfg.run.steps):
        rates.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    return rates


def test_constant_with_warmup_is_the_old_ramp():
    rates = _rates(TrainConfig(lr=1.0, steps=5, warmup_steps=2))
    assert rates == pytest.approx([1 / 3, 2 / 3, 1.0, 1.0, 1.0])
    assert _rates(TrainConfig(lr=1.0, steps=3)) == pytest.approx([1.0, 1.0, 1.0])


def test_linear_and_cosine_decay_after_warmup():
    lin = _rates(TrainConfig(lr=1.0, steps=6, warmup_steps=2, lr_schedule="linear"))
    assert lin == pytest.approx([1 / 3, 2 / 3, 1.0, 0.75, 0.5, 0.25])
    cos = _rates(TrainConfig(lr=2.0, steps=4, lr_schedule="cosine"))
    assert cos == pytest.approx([2.0 * 0.5 * (1 + math.cos(math.pi * k / 4)) for k in range(4)])
    assert cos[-1] > 0 and all(a > b for a, b in zip(cos, cos[1:], strict=False))


def test_unknown_schedule_is_named():
    with pytest.raises(ConfigError, match="lr_schedule 'step'"):
        lr_factor(3, warmup=0, steps=10, schedule="step")
    with pytest.raises(ConfigError, match="use constant, linear or cosine"):
        TrainConfig(lr_schedule="step")
