"""The gsm8k env trained through the Tinker API: a client-side GRPO loop on the official ``tinker``
client, against a server such as ``skyrl tinker serve``.

    skyrl tinker serve --port 8000 &
    python examples/three_ways/tinker_grpo.py --base-url http://127.0.0.1:8000 --data runs/three_ways/rows/train.jsonl

Each step: snapshot the weights into a sampling client, sample a group of answers per prompt
(with their logprobs), score each answer with the env's reward, take group-relative advantages,
and send ``forward_backward(..., "importance_sampling")`` then ``optim_step``. The client holds
the data and the algorithm; the server holds the model.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
os.environ.setdefault("HF_HUB_OFFLINE", "1")


def score(row: dict, answer: str) -> float:
    """The gsm8k env's reward for ``answer`` to ``row`` (one turn: init, step)."""
    import skyrl_gym

    env = skyrl_gym.make("gsm8k", extras=row)
    env.init(row["prompt"])
    return float(env.step(answer).reward)


def main(argv: list[str] | None = None) -> list[dict]:
    """Train for ``--steps`` steps and return one record per step."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base-url", required=True, help="the Tinker server, e.g. http://127.0.0.1:8000")
    ap.add_argument("--model", default="smollm2-135m", help="a base model the server knows")
    ap.add_argument("--data", required=True, help="JSONL rows from examples/math/make_rows.py")
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--prompts", type=int, default=4, help="prompts per step")
    ap.add_argument("--group", type=int, default=4, help="samples per prompt (the GRPO group)")
    ap.add_argument("--max-tokens", type=int, default=96, help="most new tokens per answer")
    ap.add_argument("--lora-rank", type=int, default=16)
    ap.add_argument("--lr", type=float, default=1e-5)
    args = ap.parse_args(argv)

    import tinker
    from tinker import types

    with open(args.data, encoding="utf-8") as f:
        rows = [json.loads(line) for line in f if line.strip()]
    service = tinker.ServiceClient(base_url=args.base_url, api_key="tml-local")  # any tml- key
    training = service.create_lora_training_client(args.model, rank=args.lora_rank).result()
    tok = training.get_tokenizer()
    params = types.SamplingParams(max_tokens=args.max_tokens, temperature=1.0)
    history = []
    for step in range(args.steps):
        batch = [rows[(step * args.prompts + i) % len(rows)] for i in range(args.prompts)]
        sampler = training.save_weights_and_get_sampling_client().result()
        prompts = [
            tok.encode(tok.apply_chat_template(r["prompt"], tokenize=False, add_generation_prompt=True))
            for r in batch
        ]
        futures = [sampler.sample(types.ModelInput.from_ints(p), args.group, params) for p in prompts]
        data, rewards, signal = [], [], 0
        for row, prompt, future in zip(batch, prompts, futures, strict=True):
            seqs = future.result().sequences
            group = [score(row, tok.decode(s.tokens, skip_special_tokens=True)) for s in seqs]
            rewards += group
            mean = sum(group) / len(group)
            signal += any(r != mean for r in group)  # a group that scored alike teaches nothing
            for s, r in zip(seqs, group, strict=True):
                n, ids = len(prompt), prompt + list(s.tokens)
                data.append(
                    types.Datum(
                        model_input=types.ModelInput.from_ints(ids[:-1]),
                        loss_fn_inputs={  # per target token; the prompt's tokens weigh nothing
                            "target_tokens": ids[1:],
                            "logprobs": [0.0] * (n - 1) + list(s.logprobs),
                            "advantages": [0.0] * (n - 1) + [r - mean] * len(s.tokens),
                        },
                    )
                )
        fwd_bwd = training.forward_backward(data, "importance_sampling")
        training.optim_step(types.AdamParams(learning_rate=args.lr)).result()
        loss = fwd_bwd.result().metrics["loss:sum"]
        record = {
            "step": step + 1,
            "reward": sum(rewards) / len(rewards),
            "groups_with_signal": signal,
            "loss": loss,
        }
        history.append(record)
        print(
            f"step {step + 1}: env reward {record['reward']:.3f}  "
            f"{signal}/{len(batch)} groups with signal  loss {loss:.4f}"
        )
    service.close("success").result()
    return history


if __name__ == "__main__":
    main()
