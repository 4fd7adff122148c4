"""skyrl_agent: the agent runtime (policies, token-in token-out chat rendering, the agent loop,
the rollout engine).

Importing this package imports no torch; the local transformers policy lives in
``skyrl_agent.policies.hf`` and is imported on use.
"""

from skyrl_agent.chat import ChatRenderer, TokenizationReport, check_tokenization
from skyrl_agent.context import split_steps, training_samples
from skyrl_agent.engine import PromptItem, RolloutEngine, RolloutResult, RolloutStats, load_prompts
from skyrl_agent.episodes import Episode, EpisodeGroup, EpisodeTurn, Outcome, group_episodes
from skyrl_agent.failures import Failure, FailureStage
from skyrl_agent.io import from_dataset, load_jsonl, load_parquet, save_jsonl, save_parquet, to_dataset
from skyrl_agent.loop import EpisodeInfo, play_episode, run_episode
from skyrl_agent.tasks import load_tasks, save_tasks, tasks_to_dataset
from skyrl_agent.types import (
    ChatModel,
    FinishReason,
    GenerateOutput,
    GenerateRequest,
    ObservationStyle,
    Policy,
    RolloutConfig,
    SamplingParams,
    StopReason,
    Trajectory,
    Turn,
)

__all__ = [
    "ChatModel",
    "ChatRenderer",
    "Episode",
    "EpisodeGroup",
    "EpisodeInfo",
    "EpisodeTurn",
    "Failure",
    "FailureStage",
    "FinishReason",
    "GenerateOutput",
    "GenerateRequest",
    "ObservationStyle",
    "Outcome",
    "Policy",
    "PromptItem",
    "RolloutConfig",
    "RolloutEngine",
    "RolloutResult",
    "RolloutStats",
    "SamplingParams",
    "StopReason",
    "TokenizationReport",
    "Trajectory",
    "Turn",
    "check_tokenization",
    "from_dataset",
    "group_episodes",
    "load_jsonl",
    "load_parquet",
    "load_prompts",
    "load_tasks",
    "play_episode",
    "run_episode",
    "save_jsonl",
    "save_parquet",
    "save_tasks",
    "split_steps",
    "training_samples",
    "tasks_to_dataset",
    "to_dataset",
]
