"""The OpenAI-compatible surface of the Tinker-compatible server, under ``/oai/api/v1``.

Tinker serves ``/oai/api/v1/chat/completions``, ``/completions`` and ``/models`` beside its own
API, so that any OpenAI client can "poke at" a model while it trains: its ``model`` is a base
model's name (``smollm2-135m``), the path of a checkpoint saved for sampling
(``tinker://<model_id>/sampler_weights/<name>``; a full ``weights`` checkpoint works too), or
``<base model>;<checkpoint path>``. The chat and completion requests are answered by the same
code as ``skyrl serve`` (:func:`skyrl_agent.server.build_app`: validation, the chat template,
tools, streaming, logprobs, 4xx bodies in OpenAI's shape), one such app per model kept (the
``max_apps`` most recently used), whose policy hands every generation to the server's worker,
in the model's sampling lane, like a Tinker ``sample`` request: model work stays on one thread.
A request the surface cannot route (no JSON object, no ``model``, an unknown model) is a 4xx in
OpenAI's error shape naming the field.
"""

from __future__ import annotations

import asyncio
import copy
import json
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any

from integrations.tinker._futures import JobStopped, Scheduler
from integrations.tinker._models import BaseModels, SamplerModels, Snapshot
from integrations.tinker._ops import context_length, generate_checked
from integrations.tinker.types import TinkerPath, TinkerRequestError
from skyrl_agent.types import GenerateOutput, GenerateRequest

__all__ = ["OpenAISurface", "ScheduledPolicy", "PREFIX"]

PREFIX = "/oai/api/v1"
"""Where the surface is mounted (the base URL an OpenAI client is given, after the origin)."""

ROUTES = {"chat/completions": "/v1/chat/completions", "completions": "/v1/completions"}
"""The POST routes under :data:`PREFIX` and the ``skyrl serve`` route that answers each."""


def openai_error(
    status: int, message: str, param: str | None = None, code: str | None = None
) -> dict[str, Any]:
    """An error body in OpenAI's shape."""
    kind = "invalid_request_error" if status < 500 else "server_error"
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


class ScheduledPolicy:
    """A policy over one snapshot's weights whose every generation runs on the server's worker,
    in the snapshot's sampling lane (the thread and the order of a Tinker ``sample`` request),
    through its sampler's engine. A caller that stops waiting (a timeout, a client gone) stops
    the generation at its next check."""

    def __init__(
        self,
        samplers: SamplerModels,
        scheduler: Scheduler,
        snap: Snapshot,
        tokenizer: Any,
        eos_token_ids: frozenset[int],
    ) -> None:
        self.samplers, self.scheduler, self.snap = samplers, scheduler, snap
        self.tokenizer = tokenizer
        self.eos_token_ids = eos_token_ids

    async def generate(self, requests: Sequence[GenerateRequest]) -> list[GenerateOutput]:
        abandoned = threading.Event()

        def check() -> None:
            if abandoned.is_set():
                raise JobStopped("the OpenAI-compatible request was abandoned (timeout or client gone)")

        def job() -> list[GenerateOutput]:
            policy = self.samplers.policy(self.snap)  # may load a model: its own lane's turn
            return generate_checked(policy, list(requests), check)

        future = self.scheduler.call(job, lane=f"sample:{self.snap.key}")
        try:
            return await future
        except asyncio.CancelledError:
            abandoned.set()
            future.cancel()
            raise


class OpenAISurface:
    """Resolves a request's ``model`` to a ``skyrl serve`` app over a :class:`ScheduledPolicy`
    and hands it the request (module docstring)."""

    def __init__(
        self,
        base_models: BaseModels,
        samplers: SamplerModels,
        scheduler: Scheduler,
        path_snapshot: Callable[[str], Snapshot],
        *,
        model_names: Sequence[str],
        timeout_s: float,
        max_apps: int = 4,
    ) -> None:
        self.base_models, self.samplers, self.scheduler = base_models, samplers, scheduler
        self.path_snapshot = path_snapshot
        """The server's resolver of a ``tinker://`` path (its checkpoint read from disk)."""
        self.model_names = list(model_names)
        """The base models a request may name without a checkpoint (``GET /models``)."""
        self.timeout_s = timeout_s
        self.max_apps = max_apps
        self._apps: OrderedDict[str, tuple[Any, str]] = OrderedDict()

    def models_body(self) -> dict[str, Any]:
        """``GET /models``: the base models (checkpoints are named by their path, not listed)."""
        entries = [{"id": n, "object": "model", "created": 0, "owned_by": "skyrl"} for n in self.model_names]
        return {"object": "list", "data": entries}

    def _snapshot(self, model: str) -> Snapshot:
        """The weights ``model`` names (module docstring), or a 404/400 naming ``model``."""
        base, sep, path = model.partition(";")
        if not sep and model.startswith(TinkerPath.PREFIX):
            base, path = "", model
        if path:
            snap = self.path_snapshot(path)
            if base and base != snap.base_name:
                raise TinkerRequestError(
                    f"the checkpoint {path} was trained on {snap.base_name!r}, not {base!r}; name its "
                    "own base model before the ';' (or give the checkpoint path alone)",
                    status=400,
                )
            return snap
        self.base_models.get(model)  # an unknown name raises here, with the names that work
        return Snapshot.of_base(model)

    async def app_for(self, model: str) -> Any:
        """The ``skyrl serve`` app answering for ``model`` (built on first use)."""
        from skyrl_agent.server import ServerConfig, build_app

        try:
            snap = await asyncio.to_thread(self._snapshot, model)
            base = await asyncio.to_thread(self.base_models.get, snap.base_name)
        except TinkerRequestError as exc:  # no such model or checkpoint: 404; a malformed name: 400
            missing = exc.status == 404 or exc.message.startswith("unknown base model")
            status = 404 if missing else exc.status
            raise _Refused(status, exc.message, "model", "model_not_found" if missing else None) from None
        key = f"{model}\n{snap.key}"  # one app per name the client uses (its responses echo it)
        found = self._apps.get(key)
        if found is not None:
            self._apps.move_to_end(key)
            return found[0]
        # its own tokenizer: the app tokenizes on its thread while the sampler decodes on the
        # worker's, and a fast tokenizer's settings are not safe to share across threads
        tokenizer = copy.deepcopy(base.tokenizer)
        policy = ScheduledPolicy(self.samplers, self.scheduler, snap, tokenizer, _eos_ids(base))
        config = ServerConfig(
            model_name=model,
            max_model_len=context_length(base.model) or 2048,
            max_sessions=8,
            max_calls_per_session=64,
            request_timeout_s=self.timeout_s,
        )
        app = build_app(policy, config)
        self._apps[key] = (app, model)
        while len(self._apps) > self.max_apps:
            _, (old, _name) = self._apps.popitem(last=False)
            old.state.core.close()
        return app

    async def answer(self, route: str, body: bytes, scope: dict[str, Any], receive: Any, send: Any) -> None:
        """Answer a POST to ``PREFIX/route`` with ``body`` (ASGI ``scope``/``receive``/``send``
        of the request): routed by the body's ``model``."""
        try:
            target = ROUTES.get(route)
            if target is None:
                raise _Refused(404, f"POST {PREFIX}/{route} is not served; use {', '.join(ROUTES)}")
            try:
                data = json.loads(body)
            except (json.JSONDecodeError, UnicodeDecodeError):
                raise _Refused(400, "the request body must be a JSON object") from None
            if not isinstance(data, dict):
                raise _Refused(400, "the request body must be a JSON object")
            model = data.get("model")
            if not isinstance(model, str) or not model:
                raise _Refused(
                    400,
                    "model is required: a base model's name, a tinker:// sampler checkpoint path, or "
                    "'<base model>;<checkpoint path>'",
                    "model",
                )
            app = await self.app_for(model)
        except _Refused as exc:
            await _send_json(send, exc.status, openai_error(exc.status, exc.message, exc.param, exc.code))
            return
        replayed = False

        async def replay() -> dict[str, Any]:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()  # the client's disconnect, for a streamed answer

        sub = {**scope, "path": target, "raw_path": target.encode(), "root_path": ""}
        await app(sub, replay, send)

    def close(self) -> None:
        """Stop the apps' tokenizing threads. Idempotent."""
        while self._apps:
            _, (app, _name) = self._apps.popitem()
            app.state.core.close()


def _eos_ids(base: Any) -> frozenset[int]:
    """The ids that end generation for ``base`` (its tokenizer's and its generation config's, as
    the sampler's own :class:`~skyrl_agent.policies.hf.HFPolicy` takes them)."""
    eos = getattr(getattr(base.model, "generation_config", None), "eos_token_id", None)
    ids = set(eos if isinstance(eos, list) else [] if eos is None else [eos])
    if base.tokenizer.eos_token_id is not None:
        ids.add(base.tokenizer.eos_token_id)
    return frozenset(int(i) for i in ids)


class _Refused(Exception):
    def __init__(self, status: int, message: str, param: str | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.param, self.code = status, message, param, code


async def _send_json(send: Any, status: int, body: dict[str, Any]) -> None:
    data = json.dumps(body).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": data})
