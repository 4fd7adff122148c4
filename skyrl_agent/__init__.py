"""skyrl_agent: the agent runtime (policies, token-in token-out chat rendering, the agent loop,
the rollout engine).

Importing this package imports no torch; the local transformers policy lives in
``skyrl_agent.policies.hf`` and is imported on use.
"""

from skyrl_agent.types import (
    FinishReason,
    GenerateOutput,
    GenerateRequest,
    ObservationStyle,
    Policy,
    RolloutConfig,
    SamplingParams,
    StopReason,
    Trajectory,
)

__all__ = [
    "FinishReason",
    "GenerateOutput",
    "GenerateRequest",
    "ObservationStyle",
    "Policy",
    "RolloutConfig",
    "SamplingParams",
    "StopReason",
    "Trajectory",
]
