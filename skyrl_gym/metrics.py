"""Aggregation of per-episode env metrics (the published ``skyrl_gym.metrics``).

``default_aggregate_metrics`` averages every numeric field; an env class may override
``aggregate_metrics``, and :func:`aggregate_for_environment` calls the one of a registered id."""

from __future__ import annotations

from typing import Any

from skyrl_gym._aggregate import default_aggregate_metrics
from skyrl_gym.errors import RegistrationError
from skyrl_gym.registration import spec

__all__ = ["aggregate_for_environment", "default_aggregate_metrics"]


def aggregate_for_environment(env_name: str, metrics: list[dict[str, Any]]) -> dict[str, Any]:
    """Aggregate ``metrics`` (one dict per episode) with the ``aggregate_metrics`` of the env
    class registered as ``env_name``. An unknown id raises ``EnvNotFoundError`` with the closest
    registered id; an entry point without ``aggregate_metrics`` (a plain factory) falls back to
    :func:`default_aggregate_metrics`."""
    creator = spec(env_name).load()
    aggregate = getattr(creator, "aggregate_metrics", None)
    if aggregate is None:
        return default_aggregate_metrics(metrics)
    if not callable(aggregate):
        raise RegistrationError(f"env {env_name!r}: aggregate_metrics of {creator!r} is not callable")
    return aggregate(metrics)
