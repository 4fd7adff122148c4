"""A Tinker-compatible API server on local hardware, driven by the official, unmodified ``tinker``
client (checked against ``tinker`` 0.38.0, see :data:`CHECKED_CLIENT_VERSION`).

Training models are the base model (bundled SmolLM2, a local directory, or a tiny random model
for tests) with LoRA adapters through peft, or a full fine-tune; ``forward_backward`` computes
Tinker's summed losses (``cross_entropy``, ``importance_sampling``, ``ppo``, ``cispo``, ``dro``,
``gspo``) with the native trainer's loss functions (:mod:`integrations.tinker.losses`); ``optim_step`` is AdamW with
the request's Adam parameters; sampling runs :class:`~skyrl_agent.policies.hf.HFPolicy` on a
snapshot of the weights; checkpoints are ``tinker://`` paths in a local directory.

Modules: :mod:`~integrations.tinker.types` (config, errors, records), :mod:`~integrations.tinker.losses`
(the loss mapping), :mod:`~integrations.tinker.episodes` (our episodes as a client's datums),
:mod:`~integrations.tinker.state` (sessions, models, jobs),
:mod:`~integrations.tinker.server` (running it), :mod:`~integrations.tinker.cli` (``skyrl tinker serve``).
The protocol is described in ``docs/decisions/0014-tinker-compatible-server.md``.
"""

from integrations.tinker.types import TINY_RANDOM_MODEL, ErrorCategory, TinkerRequestError, TinkerServerConfig

__all__ = [
    "CHECKED_CLIENT_VERSION",
    "TINY_RANDOM_MODEL",
    "ErrorCategory",
    "TinkerRequestError",
    "TinkerServerConfig",
    "TinkerServer",
]

#: The ``tinker`` client release this server's protocol was checked against (the conformance test
#: pins it; re-run it when bumping the client).
CHECKED_CLIENT_VERSION = "0.38.0"


def __getattr__(name: str) -> object:
    if name == "TinkerServer":  # imports torch and FastAPI: only when asked for
        from integrations.tinker.server import TinkerServer

        return TinkerServer
    raise AttributeError(f"module 'integrations.tinker' has no attribute {name!r}")
