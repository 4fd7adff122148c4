"""The OpenAPI document's response side: models of what each endpoint answers (documentation
only; responses are not validated against them at run time) and :func:`finish_document`, which
makes the document say what the app does: request validation errors are 400 (not FastAPI's 422),
every error is OpenAI's ``{"error": {...}}``."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict

__all__ = [
    "CHAT_RESPONSES",
    "COMPLETION_RESPONSES",
    "RESPONSES",
    "ErrorResponse",
    "finish_document",
    "responses",
]


class _Open(BaseModel):
    model_config = ConfigDict(extra="allow")


class ErrorDetail(_Open):
    message: str
    type: str
    param: str | None
    code: str | None


class ErrorResponse(_Open):
    """Every error: OpenAI's shape."""

    error: ErrorDetail


class Health(_Open):
    status: str


class ModelCard(_Open):
    id: str
    object: str
    created: int
    owned_by: str
    max_model_len: int


class ModelList(_Open):
    object: str
    data: list[ModelCard]


class Usage(_Open):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


class ChatMessage(_Open):
    role: str
    content: str | None
    tool_calls: list[dict[str, Any]] | None = None


class ChatChoice(_Open):
    index: int
    message: ChatMessage
    finish_reason: str
    logprobs: dict[str, Any] | None
    token_ids: list[int] | None = None


class ChatCompletion(_Open):
    id: str
    object: str
    created: int
    model: str
    choices: list[ChatChoice]
    usage: Usage
    prompt_token_ids: list[int] | None = None


class CompletionChoice(_Open):
    index: int
    text: str
    finish_reason: str
    logprobs: dict[str, Any] | None
    token_ids: list[int] | None = None
    prompt_token_ids: list[int] | None = None


class Completion(_Open):
    id: str
    object: str
    created: int
    model: str
    choices: list[CompletionChoice]
    usage: Usage


class SessionSummary(_Open):
    id: str
    calls: int


class SessionList(_Open):
    object: str
    data: list[SessionSummary]


class Session(_Open):
    id: str
    calls: list[dict[str, Any]]
    trajectories: list[dict[str, Any]]


class Deleted(_Open):
    deleted: int


_ERRORS = {
    400: "The request is invalid; the message names the field and the fix.",
    401: "A wrong or missing API key.",
    404: "No such model or session.",
    408: "The request body did not arrive in time.",
    413: "The request body is larger than the server takes.",
    500: "A server bug.",
    504: "The generation passed the server's deadline.",
}
#: A streamed answer, one server-sent event at a time: ``data:`` a JSON chunk, the last ``[DONE]``.
_STREAM = {
    "text/event-stream": {
        "schema": {
            "type": "object",
            "required": ["data"],
            "properties": {"data": {"type": "string"}, "event": {"type": "string"}},
            "description": "One event: data is a JSON chunk (OpenAI's stream format), the last [DONE]",
        }
    }
}


def responses(ok: type[BaseModel], *errors: int, stream: bool = False) -> dict[int | str, Any]:
    """FastAPI ``responses=`` for an endpoint answering ``ok`` (200) and ``errors``."""
    out: dict[int | str, Any] = {200: {"model": ok, "description": "Success"}}
    if stream:
        out[200]["content"] = dict(_STREAM)
    for status in errors:
        out[status] = {"model": ErrorResponse, "description": _ERRORS[status]}
    return out


CHAT_RESPONSES = responses(ChatCompletion, 400, 404, 408, 413, 500, 504, stream=True)
COMPLETION_RESPONSES = responses(Completion, 400, 404, 408, 413, 500, 504, stream=True)
RESPONSES = {
    "health": responses(Health, 500),
    "models": responses(ModelList, 500),
    "sessions": responses(SessionList, 500),
    "session": responses(Session, 404, 500),
    "deleted": responses(Deleted, 500),
}


def _examples(model: str) -> dict[str, dict[str, Any]]:
    return {
        "/v1/chat/completions": {
            "model": model,
            "messages": [{"role": "user", "content": "Hello!"}],
            "max_tokens": 8,
        },
        "/v1/completions": {"model": model, "prompt": "Once upon a time", "max_tokens": 8},
    }


def finish_document(schema: dict[str, Any], *, api_key: bool, model: str) -> dict[str, Any]:
    """Replace FastAPI's 422 by the 400 the app answers (in OpenAI's error shape), drop the
    validation-error schemas, give each generation endpoint an example request for ``model``,
    and declare the bearer key and its 401 when the server wants one."""
    error_ref = {"$ref": "#/components/schemas/ErrorResponse"}
    components = schema.setdefault("components", {})
    examples = _examples(model)
    for path, operations in schema.get("paths", {}).items():
        for operation in operations.values():
            body = operation.get("requestBody", {}).get("content", {}).get("application/json")
            if body is not None and path in examples:
                body["example"] = examples[path]
            answers = operation.setdefault("responses", {})
            if answers.pop("422", None) is not None and "400" not in answers:
                answers["400"] = {
                    "description": _ERRORS[400],
                    "content": {"application/json": {"schema": error_ref}},
                }
            if api_key and path.startswith(("/v1", "/s/")):
                operation["security"] = [{"bearer": []}]
                answers["401"] = {
                    "description": _ERRORS[401],
                    "content": {"application/json": {"schema": error_ref}},
                }
    schemas = components.get("schemas", {})
    for name in ("HTTPValidationError", "ValidationError"):
        schemas.pop(name, None)
    if api_key:
        components["securitySchemes"] = {"bearer": {"type": "http", "scheme": "bearer"}}
    return schema
