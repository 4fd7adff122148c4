"""The gsm8k env trained by TRL's ``GRPOTrainer``: our agent loop plays each prompt as an episode
(``integrations.trl.make_rollout_func``) and the env's reward is TRL's reward.

    python examples/three_ways/trl_grpo.py --model runs/three_ways/tiny-model --data runs/three_ways/rows/train.jsonl

Prints the env reward and the loss of each step.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
os.environ.setdefault("HF_HUB_OFFLINE", "1")


def main(argv: list[str] | None = None) -> list[dict]:
    """Train for ``--steps`` steps and return TRL's per-step logs."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2-135m", help="a model directory or 'smollm2-135m'")
    ap.add_argument("--data", required=True, help="JSONL rows from examples/math/make_rows.py")
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--prompts", type=int, default=4, help="prompts per step")
    ap.add_argument("--group", type=int, default=4, help="samples per prompt (the GRPO group)")
    ap.add_argument("--max-tokens", type=int, default=96, help="most new tokens per answer")
    ap.add_argument("--lr", type=float, default=1e-5)
    ap.add_argument("--out", default=None, help="TRL output directory (default: a temporary one)")
    args = ap.parse_args(argv)

    import torch
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    from integrations.trl import env_reward, make_rollout_func
    from skyrl_agent.models import load_model_and_tokenizer
    from skyrl_agent.types import RolloutConfig, SamplingParams

    torch.manual_seed(0)
    model, tok = load_model_and_tokenizer(args.model)
    with open(args.data, encoding="utf-8") as f:
        rows = [json.loads(line) for line in f if line.strip()]
    rollout = make_rollout_func(
        rows,  # TRL gives a rollout function only the prompts: the rows supply each env's extras
        env_id="gsm8k",
        rollout_config=RolloutConfig(
            max_turns=1, max_tokens_per_turn=args.max_tokens, sampling=SamplingParams(temperature=1.0)
        ),
    )
    with tempfile.TemporaryDirectory() as tmp:
        trainer = GRPOTrainer(
            model=model,
            processing_class=tok,
            reward_funcs=[env_reward],  # logged as rewards/env_reward/mean
            train_dataset=Dataset.from_list(rows),
            rollout_func=rollout,
            args=GRPOConfig(
                output_dir=args.out or tmp,
                max_steps=args.steps,
                per_device_train_batch_size=args.prompts * args.group,
                num_generations=args.group,
                learning_rate=args.lr,
                logging_steps=1,
                report_to=[],
                use_cpu=True,
                save_strategy="no",
                max_completion_length=args.max_tokens + 64,
            ),
        )
        trainer.train()
        rollout.close()
    logs = [h for h in trainer.state.log_history if "rewards/env_reward/mean" in h]
    for i, h in enumerate(logs, 1):
        print(f"step {i}: env reward {h['rewards/env_reward/mean']:.3f}  loss {h['loss']:.4f}")
    return logs


if __name__ == "__main__":
    main()
