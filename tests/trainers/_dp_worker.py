"""Run by ``torchrun`` in tests/trainers/test_distributed.py: two data-parallel train steps on gloo.

Every rank trains its shard of a fixed batch; each writes its final weights and stats to OUT_DIR."""

import json
import sys

import torch

from tests.trainers.test_step import make_batch, tiny_lm
from trainers.config import TrainConfig
from trainers.distributed import exit_rank, full_state_dict, init_distributed, shard_model_fsdp2
from trainers.step import train_step


def run(out_dir: str, world_size_expected: int, mode: str) -> None:
    torch.set_num_threads(1)
    backend = "nccl" if mode == "nccl" else "gloo"
    dist = init_distributed(backend, fsdp=mode in ("fsdp", "nccl"))
    assert dist.world_size == world_size_expected and dist.backend == backend
    model = tiny_lm()
    if dist.fsdp:  # FSDP2 (on gloo: the GPU code path, run on CPU)
        shard_model_fsdp2(model, dist)
    dist.broadcast_parameters(model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    cfg = TrainConfig(
        micro_batch_size=2, bf16=False, updates_per_step=2, grad_clip=0.5, fused_head=not dist.fsdp
    )
    stats = [train_step(model, opt, make_batch(seed=s), cfg, dist=dist).as_dict() for s in (1, 2)]
    weights = {k: v.detach().cpu().clone() for k, v in full_state_dict(model, dist).items()}
    torch.save(weights, f"{out_dir}/rank{dist.rank}.pt")
    with open(f"{out_dir}/rank{dist.rank}.json", "w") as fh:
        json.dump({"stats": stats, "in_sync": dist.parameters_in_sync(model)}, fh)
    dist.close()


if __name__ == "__main__":
    run(sys.argv[1], int(sys.argv[2]), sys.argv[3])
    exit_rank(0)
