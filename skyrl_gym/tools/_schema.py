"""From a Python signature to a JSON schema and a validator (pydantic does the type work).

``build_signature`` turns a function's parameters into a pydantic model: one field per parameter,
its type from the annotation, its description from the docstring (Google, NumPy or reST style),
its default from the signature. The model gives the JSON schema shown to the model and validates
(and coerces) the arguments the model sends. Fields are stored under neutral names with the
parameter name as alias, so parameters named ``json``, ``schema`` or ``model_id`` cannot clash
with pydantic's own attributes.
"""

from __future__ import annotations

import inspect
import json
import types
import typing
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import docstring_parser
import pydantic
from pydantic import BaseModel, ConfigDict, Field
from pydantic_core import PydanticUndefined

from skyrl_gym.errors import ToolDefinitionError
from skyrl_gym.tools.types import ToolContext, ToolSchemaWarning

__all__ = ["ToolSignature", "ArgumentsError", "build_signature", "describe_parameters"]


class ArgumentsError(ValueError):
    """The model's arguments do not fit the tool's schema; the message is written for the model."""


@dataclass(frozen=True)
class ToolSignature:
    """Everything needed to describe a tool to the model and to call it with validated arguments."""

    description: str
    """The tool's description (docstring text without the argument section)."""
    parameters: dict[str, Any]
    """The JSON schema of the arguments object."""
    model: type[BaseModel]
    """The pydantic model that validates the arguments."""
    fields: tuple[tuple[str, str, inspect._ParameterKind], ...]
    """(parameter name, model field name, kind) for each schema parameter, in signature order."""
    context_param: str | None
    """The parameter that receives the :class:`ToolContext`, if any."""
    context_kind: inspect._ParameterKind | None
    """Its kind (positional-only context parameters are passed positionally)."""
    var_kwargs: bool
    """True when the function takes ``**kwargs`` (extra arguments are then passed through)."""
    plain_str: frozenset[str]
    """Parameters annotated exactly ``str`` (raw-text values are never read as JSON for these)."""

    def validate(self, arguments: Any, *, text_values: bool = False) -> tuple[list[Any], dict[str, Any]]:
        """Validate ``arguments`` (the model's JSON object) and return ``(args, kwargs)`` for the
        function (without the context parameter). Raises :class:`ArgumentsError`."""
        if not isinstance(arguments, Mapping):
            raise ArgumentsError(
                f"arguments must be a JSON object with parameter names as keys, got {_json_type(arguments)}"
            )
        data = dict(arguments)
        try:
            validated = self.model.model_validate(data)
        except pydantic.ValidationError as first:
            if not text_values:
                raise ArgumentsError(format_validation_error(first)) from None
            decoded = {k: self._decode_text(k, v) for k, v in data.items()}
            try:
                validated = self.model.model_validate(decoded)
            except pydantic.ValidationError:
                raise ArgumentsError(format_validation_error(first)) from None
        args: list[Any] = []
        kwargs: dict[str, Any] = {}
        for name, field_name, kind in self.fields:
            value = getattr(validated, field_name)
            if kind is inspect.Parameter.POSITIONAL_ONLY:
                args.append(value)
            else:
                kwargs[name] = value
        if self.var_kwargs and validated.model_extra:
            kwargs.update(validated.model_extra)
        return args, kwargs

    def _decode_text(self, key: str, value: Any) -> Any:
        if not isinstance(value, str) or key in self.plain_str:
            return value
        try:
            return json.loads(value)
        except (ValueError, RecursionError):
            return value


def _json_type(value: Any) -> str:
    if isinstance(value, str):
        return "a string"
    if isinstance(value, (list, tuple)):
        return "an array"
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    return type(value).__name__


def _short(value: Any, limit: int = 80) -> str:
    try:
        text = repr(value)
    except Exception:  # a value whose repr fails must not break the error message
        text = f"<{type(value).__name__}>"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def format_validation_error(exc: pydantic.ValidationError) -> str:
    """A short, model-readable account of what is wrong with the arguments."""
    parts: list[str] = []
    for err in exc.errors(include_url=False):
        loc = ".".join(str(p) for p in err.get("loc", ()))
        kind = err.get("type", "")
        if kind == "missing":
            parts.append(f"missing required argument {loc!r}")
        elif kind == "extra_forbidden":
            parts.append(f"unexpected argument {loc!r}")
        else:
            msg = err.get("msg", "invalid value")
            parts.append(f"{loc!r}: {msg} (got {_short(err.get('input'))})" if loc else msg)
        if len(parts) >= 8:
            parts.append("...")
            break
    return "; ".join(parts)


def describe_parameters(schema: Mapping[str, Any]) -> str:
    """``"a (integer, required), b (string, optional)"``: a one-line view of an arguments schema."""
    props = schema.get("properties") or {}
    required = set(schema.get("required") or ())
    if not props:
        return "no arguments"
    items = [
        f"{name} ({_type_str(prop)}, {'required' if name in required else 'optional'})"
        for name, prop in props.items()
    ]
    return ", ".join(items)


def _type_str(prop: Any) -> str:
    if not isinstance(prop, Mapping):
        return "any"
    if "enum" in prop:
        return "one of " + ", ".join(json.dumps(v) for v in prop["enum"])
    if "const" in prop:
        return f"exactly {json.dumps(prop['const'])}"
    if "$ref" in prop:
        return str(prop["$ref"]).rsplit("/", 1)[-1]
    if "anyOf" in prop:
        return " or ".join(_type_str(p) for p in prop["anyOf"])
    kind = prop.get("type")
    if kind == "array":
        return f"array of {_type_str(prop.get('items'))}" if prop.get("items") else "array"
    return str(kind) if kind else "any"


# ------------------------------------------------------------------------------ schema cleaning
_SCHEMA_MAPS = ("properties", "$defs", "definitions", "patternProperties", "dependentSchemas")
_SCHEMA_ONE = ("items", "additionalProperties", "not", "contains", "propertyNames", "if", "then", "else")
_SCHEMA_LISTS = ("anyOf", "oneOf", "allOf", "prefixItems")


def clean_schema(schema: Any) -> Any:
    """Drop pydantic's ``title`` keywords (noise for the model); leave data (defaults, enums) alone."""
    if not isinstance(schema, dict):
        return schema
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key == "title" and isinstance(value, str):
            continue
        if key in _SCHEMA_MAPS and isinstance(value, dict):
            out[key] = {name: clean_schema(sub) for name, sub in value.items()}
        elif key in _SCHEMA_ONE:
            out[key] = clean_schema(value)
        elif key in _SCHEMA_LISTS and isinstance(value, list):
            out[key] = [clean_schema(sub) for sub in value]
        else:
            out[key] = value
    return out


# ------------------------------------------------------------------------------ building
def _is_context_type(annotation: Any) -> bool:
    """True for ``ToolContext``, ``ToolContext[X]``, subclasses, and ``Optional`` of those."""
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _is_context_type(typing.get_args(annotation)[0])
    if origin is not None and inspect.isclass(origin) and issubclass(origin, ToolContext):
        return True
    if inspect.isclass(annotation) and issubclass(annotation, ToolContext):
        return True
    args = typing.get_args(annotation)
    if args and origin in (typing.Union, types.UnionType):
        rest = [a for a in args if a is not type(None)]
        return len(rest) == 1 and _is_context_type(rest[0])
    return False


def _resolve_hints(func: Callable[..., Any], tool_name: str) -> dict[str, Any]:
    try:
        return typing.get_type_hints(func, include_extras=True)
    except Exception:
        pass
    # Some annotation did not resolve: find which, so the error names it.
    hints: dict[str, Any] = {}
    globalns = getattr(func, "__globals__", {})
    for name, param in inspect.signature(func).parameters.items():
        ann = param.annotation
        if ann is inspect.Parameter.empty:
            continue
        if isinstance(ann, str):
            try:
                ann = eval(ann, globalns)  # noqa: S307 - evaluating the developer's own annotation
            except Exception as exc:
                raise ToolDefinitionError(
                    f"tool {tool_name!r}: the annotation {param.annotation!r} of parameter {name!r} "
                    f"cannot be resolved ({type(exc).__name__}: {exc}); define the type at module level "
                    "(or import it there) so the schema can be built"
                ) from None
        hints[name] = ann
    return hints


def _warn_or_raise(func: Callable[..., Any], strict: bool, message: str, fix: str) -> None:
    if strict:
        raise ToolDefinitionError(f"{message}; {fix}")
    code = getattr(func, "__code__", None)
    if code is None:
        warnings.warn(f"{message}; {fix}", ToolSchemaWarning, stacklevel=4)
        return
    warnings.warn_explicit(
        f"{message}; {fix}, or pass strict=True to make this an error",
        ToolSchemaWarning,
        filename=code.co_filename,
        lineno=code.co_firstlineno,
        module=getattr(func, "__module__", None) or "skyrl_gym.tools",
        registry=getattr(func, "__globals__", {}).setdefault("__warningregistry__", {}),
    )


def _docstring_text(doc: docstring_parser.Docstring) -> str:
    parts = [p for p in (doc.short_description, doc.long_description) if p]
    return "\n\n".join(parts).strip()


def build_signature(
    func: Callable[..., Any],
    *,
    tool_name: str,
    skip_first: bool,
    strict: bool,
    description: str | None = None,
) -> ToolSignature:
    """Build the schema and validator of ``func``. Raises :class:`ToolDefinitionError`."""
    try:
        sig = inspect.signature(func)
    except (TypeError, ValueError) as exc:
        raise ToolDefinitionError(
            f"tool {tool_name!r}: cannot read the signature of {func!r}: {exc}"
        ) from None
    params = list(sig.parameters.values())
    if skip_first:
        if not params or params[0].kind not in (
            inspect.Parameter.POSITIONAL_ONLY,
            inspect.Parameter.POSITIONAL_OR_KEYWORD,
        ):
            raise ToolDefinitionError(
                f"tool {tool_name!r} is defined in a class body but takes no 'self' parameter; "
                "add 'self' or make it a @staticmethod below @tool"
            )
        params = params[1:]
    hints = _resolve_hints(func, tool_name)
    doc = docstring_parser.parse(inspect.getdoc(func) or "")
    arg_docs = {p.arg_name: (p.description or "").strip() for p in doc.params}

    fields: list[tuple[str, str, inspect._ParameterKind]] = []
    model_fields: dict[str, Any] = {}
    context_param: str | None = None
    context_kind: inspect._ParameterKind | None = None
    var_kwargs = False
    plain_str: set[str] = set()
    for param in params:
        name = param.name
        if param.kind is inspect.Parameter.VAR_POSITIONAL:
            _warn_or_raise(
                func,
                strict,
                f"tool {tool_name!r}: *{name} cannot be filled from a JSON object and is left out of the schema",
                "use named parameters",
            )
            continue
        if param.kind is inspect.Parameter.VAR_KEYWORD:
            _warn_or_raise(
                func,
                strict,
                f"tool {tool_name!r}: **{name} accepts any extra argument without validation",
                "use named, annotated parameters",
            )
            var_kwargs = True
            continue
        annotation = hints.get(name, inspect.Parameter.empty)
        if annotation is not inspect.Parameter.empty and _is_context_type(annotation):
            if param.kind is inspect.Parameter.POSITIONAL_ONLY:
                raise ToolDefinitionError(
                    f"tool {tool_name!r}: the ToolContext parameter {name!r} is positional-only; "
                    "make it a normal or keyword-only parameter"
                )
            if context_param is not None:
                raise ToolDefinitionError(
                    f"tool {tool_name!r}: parameters {context_param!r} and {name!r} are both ToolContext; keep one"
                )
            context_param, context_kind = name, param.kind
            continue
        if annotation is inspect.Parameter.empty:
            _warn_or_raise(
                func,
                strict,
                f"tool {tool_name!r}: parameter {name!r} has no type annotation, so the model sees it as "
                "'any JSON value' and its arguments are not validated",
                f"annotate it, e.g. '{name}: str'",
            )
            annotation = Any
        if annotation is str:
            plain_str.add(name)
        field_name = f"p{len(fields)}"
        default = PydanticUndefined if param.default is inspect.Parameter.empty else param.default
        kwargs: dict[str, Any] = {"alias": name}
        if arg_docs.get(name):
            kwargs["description"] = arg_docs[name]
        model_fields[field_name] = (annotation, Field(default, **kwargs))
        fields.append((name, field_name, param.kind))

    config = ConfigDict(extra="allow" if var_kwargs else "forbid", populate_by_name=False)
    try:
        model = pydantic.create_model(f"{tool_name}_arguments", __config__=config, **model_fields)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", pydantic.json_schema.PydanticJsonSchemaWarning)
            schema = clean_schema(model.model_json_schema(by_alias=True))
    except ToolDefinitionError:
        raise
    except Exception as exc:
        raise ToolDefinitionError(
            f"tool {tool_name!r}: cannot build a JSON schema from its parameters "
            f"({type(exc).__name__}: {exc}); use JSON-friendly types (int, float, str, bool, list, dict, "
            "Literal, Enum, dataclasses or pydantic models)"
        ) from None
    schema.setdefault("properties", {})
    text = description if description is not None else _docstring_text(doc)
    return ToolSignature(
        description=text,
        parameters=schema,
        model=model,
        fields=tuple(fields),
        context_param=context_param,
        context_kind=context_kind,
        var_kwargs=var_kwargs,
        plain_str=frozenset(plain_str),
    )
