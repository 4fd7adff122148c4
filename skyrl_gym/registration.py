"""The env registry: ``register``, ``make``, ``spec``, ``deregister``, ``list_envs``.

Ids map to entry points, given either as a callable or as a ``"package.module:Class"`` string
that is imported only when the env is first made. Third-party packages add envs without any
import through the entry-point group ``skyrl_gym.envs``::

    [project.entry-points."skyrl_gym.envs"]
    my_task = "my_pkg.env:MyTaskEnv"

An id that is itself an entry point, ``"my_pkg.envs:MyEnv"``, needs no registration: the
first lookup imports the class, checks that it is a ``BaseTextEnv`` subclass and registers it
under that string (:mod:`skyrl_gym.user_envs`; what ``skyrl train --env my_pkg.envs:MyEnv``
and a dataset row with that ``env_class`` rely on).

The registry is per process: code that builds envs in worker processes (Ray, multiprocessing)
must register there too, or use a plugin entry point or an entry-point id, which every process
sees.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import re
import threading
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from skyrl_gym.config import ConfigView
from skyrl_gym.core import Env
from skyrl_gym.errors import EnvNotFoundError, RegistrationError, did_you_mean

__all__ = [
    "EnvSpec",
    "register",
    "deregister",
    "make",
    "spec",
    "list_envs",
    "pprint_registry",
    "registry",
    "register_entry_point",
    "load_env_creator",
    "PLUGIN_GROUP",
]

PLUGIN_GROUP = "skyrl_gym.envs"
#: Every registered env ``id`` is also the Gymnasium id ``skyrl/<id>`` (``skyrl_gym.gym_bridge``).
GYM_NAMESPACE = "skyrl"
_ID_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.\-]*$")
_ENTRY_RE = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$")


@dataclass
class EnvSpec:
    """How to build one registered env."""

    id: str
    """The id passed to ``make``."""
    entry_point: str | Callable[..., Env]
    """A callable returning the env, or ``"package.module:Attr"``, imported lazily."""
    kwargs: dict[str, Any] = field(default_factory=dict)
    """Default keyword arguments for the entry point; ``make``'s own kwargs override them."""
    description: str | None = None
    """One line for listings; defaults to the first line of the env class's docstring."""
    source: str = "builtin"
    """Where the registration came from: ``builtin``, ``user`` or ``plugin:<dist>``."""

    def load(self) -> Callable[..., Env]:
        """Import and return the entry point."""
        if callable(self.entry_point):
            return self.entry_point
        module_name, _, attr = self.entry_point.partition(":")
        try:
            obj: Any = importlib.import_module(module_name)
        except ImportError as exc:
            raise RegistrationError(
                f"env {self.id!r}: cannot import {module_name!r} for entry point "
                f"{self.entry_point!r} ({exc}); is the package installed?"
            ) from exc
        for part in attr.split("."):
            try:
                obj = getattr(obj, part)
            except AttributeError as exc:
                raise RegistrationError(
                    f"env {self.id!r}: module {module_name!r} has no attribute {attr!r} "
                    f"(entry point {self.entry_point!r})"
                ) from exc
        return obj

    def make(self, **kwargs: Any) -> Env:
        """Build the env with ``self.kwargs`` updated by ``kwargs``."""
        return make(self, **kwargs)

    def summary(self) -> str:
        """One line describing the env: its description, else its docstring's first line.

        Imports the entry point's module; if that fails, the line says why."""
        if self.description:
            return self.description
        try:
            doc = (getattr(self.load(), "__doc__", None) or "").strip()
        except RegistrationError as exc:
            return f"(unavailable: {exc})"
        if doc:
            return doc.splitlines()[0]
        return str(self.entry_point) if isinstance(self.entry_point, str) else self.entry_point.__name__


registry: dict[str, EnvSpec] = {}
"""Every registered :class:`EnvSpec` by id (the published ``skyrl_gym.registry``). Read it;
change it only through :func:`register` and :func:`deregister`."""


def load_env_creator(name: str) -> Callable[..., Env]:
    """Import the entry point ``"package.module:Attr"`` and return it (the env class or factory)."""
    if not isinstance(name, str) or not _ENTRY_RE.match(name):
        raise RegistrationError(f"entry point must look like 'package.module:Class', got {name!r}")
    return EnvSpec(id=name, entry_point=name).load()


_lock = threading.RLock()
_plugins_loaded = False
_plugins_loading = False


def register(
    id: str,
    entry_point: str | Callable[..., Env],
    kwargs: Mapping[str, Any] | None = None,
    *,
    description: str | None = None,
    source: str = "user",
) -> EnvSpec:
    """Register an env under ``id``. Raises :class:`RegistrationError` if the id is taken.

    ``id`` is letters, digits, ``_``, ``-`` and ``.``, or an entry-point string equal to
    ``entry_point`` (how :func:`register_entry_point` registers a
    ``"module:Class"`` id; such an id gets no Gymnasium mirror, since ``gymnasium.make`` reads
    the ``:`` as a module to import)."""
    entry_point_id = isinstance(id, str) and bool(_ENTRY_RE.match(id)) and entry_point == id
    if not isinstance(id, str) or not (_ID_RE.match(id) or entry_point_id):
        raise RegistrationError(
            f"invalid env id {id!r}: use letters, digits, '_', '-' and '.', e.g. 'my_task-v1'"
        )
    if isinstance(entry_point, str):
        if not _ENTRY_RE.match(entry_point):
            raise RegistrationError(
                f"entry point {entry_point!r} for env {id!r} must look like 'package.module:ClassName'"
            )
    elif not callable(entry_point):
        raise RegistrationError(f"entry point for env {id!r} must be a callable or a 'module:Class' string")
    with _lock:
        if id in registry:
            raise RegistrationError(
                f"env id {id!r} is already registered (entry point {registry[id].entry_point!r}); "
                "choose another id or call skyrl_gym.deregister first"
            )
        env_spec = EnvSpec(id, entry_point, dict(kwargs or {}), description, source)
        registry[id] = env_spec
    if not entry_point_id:
        register_gymnasium_id(id)
    return env_spec


def deregister(id: str) -> None:
    """Remove ``id`` from the registry; raises :class:`EnvNotFoundError` if it is not there."""
    _load_plugins()
    with _lock:
        if id not in registry:
            raise _not_found(id)
        del registry[id]
    deregister_gymnasium_id(id)


def register_gymnasium_id(env_id: str) -> None:
    """Make ``gymnasium.make("skyrl/<env_id>")`` build a ``skyrl_gym.gym_bridge.GymnasiumTextEnv``
    (named by its entry-point string: the bridge is imported only when Gymnasium builds one)."""
    import gymnasium

    gym_id = f"{GYM_NAMESPACE}/{env_id}"
    if gym_id in gymnasium.registry:
        return
    gymnasium.register(
        id=gym_id,
        entry_point="skyrl_gym.gym_bridge:GymnasiumTextEnv",
        kwargs={"env_id": env_id},
        disable_env_checker=False,
    )


def deregister_gymnasium_id(env_id: str) -> None:
    """Remove the Gymnasium id mirrored from ``env_id``, if present."""
    import gymnasium

    gymnasium.registry.pop(f"{GYM_NAMESPACE}/{env_id}", None)


def spec(id: str) -> EnvSpec:
    """The :class:`EnvSpec` registered under ``id``, with a "did you mean" on typos.

    An unregistered ``"package.module:Class"`` id is imported and registered under that string
    (:func:`register_entry_point`; a ``ConfigError`` says what is wrong when
    it is not an importable ``BaseTextEnv`` subclass)."""
    _load_plugins()
    found = registry.get(id) if isinstance(id, str) else None
    if found is not None:
        return found
    if isinstance(id, str) and _ENTRY_RE.match(id):
        return register_entry_point(id)
    raise _not_found(id)


def register_entry_point(entry_point: str) -> EnvSpec:
    """The spec of the entry-point id ``entry_point``: registered under that string on first use,
    after :func:`skyrl_gym.user_envs.load_env_class` has checked it (what :func:`spec` calls for
    an unregistered ``"module:Class"`` id)."""
    from skyrl_gym.user_envs import load_env_class

    with _lock:  # one import and one registration, however many threads ask
        found = registry.get(entry_point)
        if found is not None:
            return found
        load_env_class(entry_point)
        return register(entry_point, entry_point, source="entry point")


def _not_found(id: str) -> EnvNotFoundError:
    """The error for an unknown id: the closest registered id (or all of them), then the two
    ways to reach an env of one's own without installing a package."""
    known = sorted(registry)
    hint = did_you_mean(str(id), known) or f" Registered envs: {', '.join(known) or 'none'}."
    return EnvNotFoundError(
        f"no env registered as {id!r}.{hint} For an env class of your own, name it as "
        "'package.module:Class' (--env package.module:Class; the module importable from the current "
        "directory), or import the module that registers it (--import package.module, or "
        "--import path/to/file.py, for a module that calls skyrl_gym.register at import)."
    )


def list_envs() -> list[EnvSpec]:
    """All registered specs, sorted by id."""
    _load_plugins()
    with _lock:
        return [registry[k] for k in sorted(registry)]


def pprint_registry() -> None:
    """Print one line per registered env."""
    for env_spec in list_envs():
        print(f"{env_spec.id:24s} {env_spec.summary()}")


def make(id: str | EnvSpec, **kwargs: Any) -> Env:
    """Build a registered env: ``make("text2sql", env_config=cfg, extras=row)``.

    The spec's default kwargs are updated with ``kwargs``. A plain-dict ``env_config`` is wrapped
    in a :class:`~skyrl_gym.config.ConfigView`, so envs may read it as ``env_config.db_path``
    (published envs do) or ``env_config["db_path"]``.
    """
    env_spec = id if isinstance(id, EnvSpec) else spec(id)
    merged = {**env_spec.kwargs, **kwargs}
    if "env_config" in merged:
        merged["env_config"] = ConfigView.wrap(merged["env_config"])
    creator = env_spec.load()
    env = creator(**merged)
    if not isinstance(env, Env):
        raise RegistrationError(
            f"entry point of env {env_spec.id!r} returned {type(env).__name__}, not an Env; "
            "subclass skyrl_gym.BaseTextEnv"
        )
    env.spec = env_spec
    env._make_kwargs = merged  # type: ignore[attr-defined]  # lets check_env build a twin
    return env


def _load_plugins() -> None:
    """Register the envs that installed packages declare under ``skyrl_gym.envs`` (once)."""
    global _plugins_loaded, _plugins_loading
    if _plugins_loaded:
        return
    with _lock:  # other threads wait here until every plugin is registered
        if _plugins_loaded or _plugins_loading:  # done, or this thread is inside the loop below
            return
        _plugins_loading = True
        try:
            _register_plugins()
        finally:
            _plugins_loading = False
        _plugins_loaded = True


def _register_plugins() -> None:
    """Register each entry point of the plugin group (called under the lock, once)."""
    for ep in importlib.metadata.entry_points(group=PLUGIN_GROUP):
        if ep.name in registry:
            if registry[ep.name].entry_point != ep.value:
                warnings.warn(
                    f"plugin env {ep.name!r} ({ep.value}) clashes with an env already registered "
                    f"({registry[ep.name].entry_point}); the plugin is ignored",
                    stacklevel=4,
                )
            continue
        try:
            dist = ep.dist.name if ep.dist is not None else "unknown"
            register(ep.name, ep.value, source=f"plugin:{dist}")
        except RegistrationError as exc:
            warnings.warn(f"plugin env {ep.name!r} was not registered: {exc}", stacklevel=4)
