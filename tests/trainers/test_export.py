"""Checkpoints as model directories, and ``skyrl export``: plain transformers loads them and
computes the trained model's logits."""

from __future__ import annotations

import json

import pytest
import torch
import transformers

from skyrl_gym.cli import main as skyrl_main
from skyrl_gym.errors import ConfigError
from tests.trainers.test_step import make_batch
from trainers.checkpoint import TrainState, load_weights, rng_state, save_checkpoint
from trainers.config import TrainConfig
from trainers.export import export_checkpoint
from trainers.lora import apply_lora
from trainers.step import train_step


@pytest.fixture(scope="module")
def base_dir(tmp_path_factory):
    from skyrl_agent.models import tiny_random_model

    model, tok = tiny_random_model(hidden_size=32, num_layers=1)
    path = tmp_path_factory.mktemp("base")
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return path


def trained_run(base_dir, run_dir, lora_rank=0):
    """A run directory with one checkpoint of a model that took one real train step."""
    model = transformers.AutoModelForCausalLM.from_pretrained(base_dir)
    tok = transformers.AutoTokenizer.from_pretrained(base_dir)
    cfg = TrainConfig(model=str(base_dir), lora_rank=lora_rank, bf16=False, run_dir=str(run_dir))
    if lora_rank:
        model = apply_lora(model, lora_rank, cfg.model.lora_alpha, cfg.model.lora_target_modules, 0.0)
    opt = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=5.0)
    train_step(model, opt, make_batch(), cfg.replace(grad_clip=0.0))
    run_dir.mkdir(parents=True)
    (run_dir / "config.json").write_text(json.dumps(cfg.as_tables()))
    state = TrainState(step=1, sampler={}, rng=rng_state(), extra={})
    ckpt = save_checkpoint(run_dir, model=model, optimizer=opt, scheduler=None, state=state, tokenizer=tok)
    return model.eval(), ckpt


def logits(model, ids):
    with torch.no_grad():
        return model(input_ids=ids).logits


IDS = torch.tensor([[1, 5, 9, 13, 2, 7]])


def test_a_checkpoint_holds_a_model_directory_and_resumes_from_it(base_dir, tmp_path):
    model, ckpt = trained_run(base_dir, tmp_path / "run")
    assert (ckpt / "model" / "model.safetensors").exists() and not (ckpt / "model.pt").exists()
    assert (ckpt / "model" / "tokenizer_config.json").exists()
    direct = transformers.AutoModelForCausalLM.from_pretrained(ckpt / "model")  # as it is
    torch.testing.assert_close(logits(direct, IDS), logits(model, IDS))
    fresh = transformers.AutoModelForCausalLM.from_pretrained(base_dir)
    assert not torch.allclose(logits(fresh, IDS), logits(model, IDS))  # the step moved the weights
    load_weights(fresh, ckpt)  # what a resume does
    for (name, a), b in zip(model.state_dict().items(), fresh.state_dict().values(), strict=True):
        assert torch.equal(a, b), name


def test_skyrl_export_writes_what_plain_transformers_loads(base_dir, tmp_path, capsys):
    model, _ = trained_run(base_dir, tmp_path / "run")
    out = tmp_path / "exported"
    assert skyrl_main(["export", str(tmp_path / "run"), str(out)]) == 0
    assert "exported" in capsys.readouterr().out
    loaded = transformers.AutoModelForCausalLM.from_pretrained(out)
    tok = transformers.AutoTokenizer.from_pretrained(out)
    torch.testing.assert_close(logits(loaded, IDS), logits(model, IDS))
    assert tok.chat_template  # the template travels with the weights
    with pytest.raises(ConfigError, match="--overwrite"):
        export_checkpoint(tmp_path / "run", out)
    export_checkpoint(tmp_path / "run", out, overwrite=True, step=1)
    with pytest.raises(ConfigError, match="has steps \\[1\\]"):
        export_checkpoint(tmp_path / "run", tmp_path / "other", step=7)
    with pytest.raises(ConfigError, match="not a run directory"):
        export_checkpoint(tmp_path, tmp_path / "other")


def test_a_lora_run_exports_the_merged_model_and_its_adapter(base_dir, tmp_path):
    model, ckpt = trained_run(base_dir, tmp_path / "run", lora_rank=4)
    assert (ckpt / "adapter" / "adapter_model.safetensors").exists()  # the adapter alone, small
    out = export_checkpoint(tmp_path / "run", tmp_path / "merged")
    merged = transformers.AutoModelForCausalLM.from_pretrained(out)
    torch.testing.assert_close(logits(merged, IDS), logits(model, IDS), atol=1e-5, rtol=1e-5)
    assert (out / "adapter" / "adapter_config.json").exists()
    base = transformers.AutoModelForCausalLM.from_pretrained(base_dir)
    assert not torch.allclose(logits(base, IDS), logits(model, IDS))  # the adapters did change it
    resumed = apply_lora(
        transformers.AutoModelForCausalLM.from_pretrained(base_dir), 4, 32, ("all-linear",), 0.0
    )
    load_weights(resumed, ckpt)  # what a resume of a LoRA run does: base weights + the adapter
    torch.testing.assert_close(logits(resumed.eval(), IDS), logits(model, IDS))
    adapter_only = export_checkpoint(tmp_path / "run", tmp_path / "adapter", merge_lora=False)
    assert (adapter_only / "adapter_model.safetensors").exists() and not (
        adapter_only / "config.json"
    ).exists()
