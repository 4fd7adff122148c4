"""Train on the multi-turn text-to-SQL env inside TRL's GRPOTrainer (our loop, TRL's trainer).

TRL's ``rollout_func`` hook hands generation to our agent loop: each prompt is played as a full
episode against the ``text2sql`` env (query the database with ``<sql>``, answer with
``<solution>``), token in, token out; TRL trains on our token ids with the env's observation
tokens masked out of the loss, and ``env_reward`` gives it the env's reward.

    python examples/trl_text2sql.py                       # SmolLM2-135M, 2 steps of 8 episodes (minutes on a CPU)
    python examples/trl_text2sql.py --model tiny --steps 1  # a random tiny model: a smoke run
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")


def main(argv: list[str] | None = None) -> dict[str, float]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2-135m", help="a model path, 'smollm2-135m' or 'tiny'")
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--prompts", type=int, default=4, help="bundled training questions to use")
    ap.add_argument("--group", type=int, default=4, help="episodes per question (GRPO group)")
    ap.add_argument("--max-turns", type=int, default=3)
    ap.add_argument("--max-tokens-per-turn", type=int, default=96)
    ap.add_argument("--out", default=None, help="TRL output directory (default: a temporary one)")
    args = ap.parse_args(argv)

    import torch
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    from integrations.trl import env_reward, make_rollout_func
    from skyrl_agent.models import load_model_and_tokenizer, tiny_random_model
    from skyrl_agent.types import RolloutConfig, SamplingParams
    from skyrl_gym.envs.sql.prompt import load_bundled_rows

    torch.manual_seed(0)
    if args.model == "tiny":
        model, tok = tiny_random_model(hidden_size=32, num_layers=1)
    else:
        model, tok = load_model_and_tokenizer(args.model)
    rows = load_bundled_rows("train", max_turns=args.max_turns)[: args.prompts]

    rollout = make_rollout_func(
        rows,  # TRL gives a rollout function only the prompts: the rows supply each env's extras
        env_config={"max_turns": args.max_turns},
        rollout_config=RolloutConfig(
            max_turns=args.max_turns,
            max_tokens_per_turn=args.max_tokens_per_turn,
            sampling=SamplingParams(temperature=1.0, stop=("</sql>", "</solution>")),
            env_calls="inline",
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
                per_device_train_batch_size=args.group * 2,
                num_generations=args.group,
                learning_rate=1e-6,
                logging_steps=1,
                report_to=[],
                use_cpu=True,
                save_strategy="no",
                gradient_checkpointing=False,
                max_completion_length=args.max_turns * (args.max_tokens_per_turn + 400),
            ),
        )
        trainer.train()
        rollout.close()
    logs = [h for h in trainer.state.log_history if "rewards/env_reward/mean" in h]
    for i, h in enumerate(logs):
        print(f"step {i + 1}: env reward {h['rewards/env_reward/mean']:+.3f}  loss {h['loss']:.4f}")
    return logs[-1]


if __name__ == "__main__":
    main()
