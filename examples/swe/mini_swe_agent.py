"""mini-swe-agent on SWE tasks against our server, captured, graded, and one GRPO step on it.

    python examples/swe/mini_swe_agent.py --model bundled --tasks 2 --group 4 --out runs/swe/mini

The model is served in this process by the OpenAI-compatible server (the app of ``skyrl
serve``, on a free 127.0.0.1 port); mini-swe-agent (its ``DefaultAgent``, its
``swebench_backticks`` prompts, LiteLLM) talks to it, its commands run in each task's sandbox
(Docker by default), the SWE grader scores each patch, and the server's record of each episode's
calls (token ids, sampler logprobs) becomes trajectories. ``--group`` episodes per task form a
GRPO group; one update trains the same model on them, unless ``--no-train``. Writes
``episodes.jsonl`` (one line per episode: status, reward, patch, the agent's messages) and
``trajectories.jsonl`` (``Trajectory.to_dict``) to ``--out``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--model", default="bundled", help="model directory, or 'bundled' (SmolLM2-135M-Instruct)"
    )
    ap.add_argument("--tasks", type=int, default=2, help="how many bundled tasks (in order)")
    ap.add_argument("--instance", action="append", metavar="ID", help="these bundled tasks instead")
    ap.add_argument("--group", type=int, default=2, help="episodes per task (one GRPO group)")
    ap.add_argument("--sandbox", choices=("docker", "local"), default="docker")
    ap.add_argument("--step-limit", type=int, default=8, help="model calls per episode")
    ap.add_argument("--max-tokens", type=int, default=256, help="completion tokens per call")
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--lr", type=float, default=1e-6)
    ap.add_argument("--no-train", dest="train", action="store_false", help="collect and grade only")
    ap.add_argument("--out", required=True, help="folder for episodes.jsonl and trajectories.jsonl")
    args = ap.parse_args(argv)

    import torch

    from integrations.mini_swe_agent import MiniSweConfig, run_episode
    from skyrl_agent.models import load_model_and_tokenizer
    from skyrl_agent.policies.hf import HFPolicy
    from skyrl_agent.server.runner import ServerThread
    from skyrl_agent.server.types import ServerConfig
    from skyrl_gym.envs.swe import bundled_instances
    from trainers.config import TrainConfig
    from trainers.episodes import train_on_episodes

    torch.manual_seed(0)
    instances = bundled_instances()
    if args.instance:
        instances = [i for i in instances if i.instance_id in set(args.instance)]
        if len(instances) != len(set(args.instance)):
            print(f"error: not all of {args.instance} are bundled tasks", file=sys.stderr)
            return 1
    else:
        instances = instances[: args.tasks]
    model, tok = load_model_and_tokenizer(args.model)
    sampler = HFPolicy(model, tok, seed=0)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    episodes = []
    start = time.monotonic()
    try:
        with ServerThread(sampler, ServerConfig(model_name="policy", max_model_len=8192)) as server:
            cfg = MiniSweConfig(
                base_url=server.url,
                model="policy",
                step_limit=args.step_limit,
                max_tokens=args.max_tokens,
                temperature=args.temperature,
            )
            for g, inst in enumerate(instances):
                for k in range(args.group):
                    ep = run_episode(inst, cfg, env_config={"sandbox": args.sandbox}, group_id=g)
                    episodes.append(ep)
                    tokens = sum(sum(t.loss_mask) for t in ep.trajectories)
                    print(
                        f"[{time.monotonic() - start:6.0f}s] {inst.instance_id} #{k}: {ep.exit_status}, "
                        f"reward {ep.reward:g}{' (masked: ' + ep.error + ')' if ep.masked else ''}, "
                        f"{len(ep.trajectories)} trajectories, {tokens} sampled tokens",
                        flush=True,
                    )
    finally:
        sampler.close()
    with open(out / "episodes.jsonl", "w", encoding="utf-8") as f:
        for ep in episodes:
            row = {
                "instance_id": ep.instance_id,
                "exit_status": ep.exit_status,
                "reward": ep.reward,
                "masked": ep.masked,
                "error": ep.error,
                "patch_source": ep.patch_source,
                "patch": ep.patch,
                "report": ep.report.to_dict() if ep.report else None,
                "messages": ep.messages,
            }
            f.write(json.dumps(row, default=str) + "\n")
    with open(out / "trajectories.jsonl", "w", encoding="utf-8") as f:
        for ep in episodes:
            for t in ep.trajectories:
                f.write(json.dumps(t.to_dict()) + "\n")
    rewards = [ep.reward for ep in episodes if not ep.masked]
    print(f"{len(episodes)} episodes, mean reward {sum(rewards) / max(1, len(rewards)):.3f}, files in {out}")
    if args.train:
        trainable = [ep.trajectories for ep in episodes if not ep.masked and ep.trajectories]
        if not trainable:
            print("nothing to train on (every episode masked or without a call)")
            return 0
        model.train()
        opt = torch.optim.AdamW(model.parameters(), lr=args.lr)
        stats = train_on_episodes(
            model, opt, trainable, TrainConfig(bf16=False, micro_batch_size=2), pad_id=tok.pad_token_id
        )
        print(f"GRPO step: loss {stats.loss:.4f}, grad norm {stats.grad_norm:.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
