"""Masked tensor helpers and argument checks shared by the algorithm modules."""

from __future__ import annotations

import torch

from skyrl_gym.errors import ConfigError

__all__ = ["as_mask", "check_shape", "masked_mean", "masked_var", "masked_whiten", "masked_stats"]


def as_mask(mask_BT: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """``mask_BT`` (bool, int or float; 1 = trained token) as a 0/1 tensor of ``like``'s float dtype."""
    dtype = like.dtype if like.is_floating_point() else torch.float32
    return (mask_BT != 0).to(dtype=dtype, device=like.device)


def check_shape(name: str, tensor: torch.Tensor | None, shape: tuple[int, ...]) -> None:
    """Raise :class:`ConfigError` when ``tensor`` does not have ``shape``."""
    if tensor is None:
        return
    if not isinstance(tensor, torch.Tensor):
        raise ConfigError(f"{name} must be a torch.Tensor, got {type(tensor).__name__}")
    if tuple(tensor.shape) != tuple(shape):
        raise ConfigError(
            f"{name} has shape {tuple(tensor.shape)} but {tuple(shape)} was expected "
            "(B sequences x T tokens; see trainers.types for the layout)"
        )


def masked_mean(x: torch.Tensor, mask: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """Mean of ``x`` over positions where ``mask`` is 1 (0 where nothing is masked in)."""
    if dim is None:
        return (x * mask).sum() / mask.sum().clamp(min=1)
    return (x * mask).sum(dim) / mask.sum(dim).clamp(min=1)


def masked_var(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Unbiased (Bessel-corrected) variance of ``x`` over masked-in positions; 0 for fewer than 2."""
    count = mask.sum()
    mean = masked_mean(x, mask)
    sq = (((x - mean) * mask) ** 2).sum()
    return torch.where(count > 1, sq / (count - 1).clamp(min=1), torch.zeros_like(sq))


def masked_whiten(x: torch.Tensor, mask: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """``(x - mean) / (std + eps)`` over masked-in positions; masked-out positions become 0."""
    mean = masked_mean(x, mask)
    std = masked_var(x, mask).sqrt()
    return (x - mean) / (std + eps) * mask


def masked_stats(x: torch.Tensor, mask: torch.Tensor) -> tuple[float, float, float, float]:
    """``(mean, std, min, max)`` of ``x`` over masked-in positions as floats (zeros if empty)."""
    with torch.no_grad():
        selected = x[mask != 0]
        if selected.numel() == 0:
            return 0.0, 0.0, 0.0, 0.0
        std = selected.std().item() if selected.numel() > 1 else 0.0
        return selected.mean().item(), std, selected.min().item(), selected.max().item()
