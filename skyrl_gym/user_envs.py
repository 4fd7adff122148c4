"""Envs from the user's own code, reached without a package or a plugin entry point.

Two ways, on every ``skyrl`` verb that takes an env (``train``, ``eval``, ``rollout``; ``envs``
takes ``--import``)::

    skyrl train --env my_pkg.envs:MyEnv --data rows.parquet      # the class itself
    skyrl train --import my_pkg.envs --env my_task --data rows.parquet  # a module that registers

* An **entry-point id**, ``"module:Class"``: :func:`skyrl_gym.spec` imports an unregistered id of
  that form, checks that it names a :class:`~skyrl_gym.core.BaseTextEnv` subclass
  (:func:`load_env_class`) and registers it under that very string
  (:func:`skyrl_gym.registration.register_entry_point`). A dataset row whose ``env_class`` is the
  same string uses the same class, in any process that reads the row.
* **Imports** (:func:`import_modules`): dotted module names or paths to ``.py`` files, imported
  before the env is looked up, so a module that calls ``skyrl_gym.register(...)`` at import
  registers its envs under their own ids.

Modules are looked for on ``sys.path`` and in the current directory, which is appended to
``sys.path`` when it is not there yet (a console script such as ``skyrl`` puts its own directory
first, not the one it runs in). Appended, not prepended: a file in the current directory never
shadows an installed module of the same name. A ``.py`` path is imported under its file name
(``envs/reverse.py`` is the module ``reverse``), and its folder is appended to ``sys.path`` so
that its sibling modules import too. Every mistake (a module that is not found or fails to
import, an attribute that is missing or is not an env class) is a
:class:`~skyrl_gym.errors.ConfigError` that says what was found and how to fix it.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import os
import re
import sys
from collections.abc import Iterable
from pathlib import Path
from types import ModuleType

from skyrl_gym.core import BaseTextEnv
from skyrl_gym.errors import ConfigError, SkyRLError

__all__ = ["is_entry_point", "load_env_class", "import_modules"]

_ENTRY = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$")
_MODULE = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$")


def is_entry_point(env_id: str) -> bool:
    """Whether ``env_id`` has the form ``"package.module:Class"``."""
    return isinstance(env_id, str) and bool(_ENTRY.match(env_id))


def load_env_class(entry_point: str) -> type[BaseTextEnv]:
    """Import ``"package.module:Class"`` and return the class; a :class:`ConfigError` when the
    module cannot be imported or the attribute is missing or not a ``BaseTextEnv`` subclass."""
    if not is_entry_point(entry_point):
        raise ConfigError(
            f"env {entry_point!r} is not an entry point: write it as 'package.module:Class', "
            "e.g. --env my_pkg.envs:MyEnv"
        )
    module_name, _, attr = entry_point.partition(":")
    obj: object = _import(module_name, f"env {entry_point!r}")
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise ConfigError(
                f"env {entry_point!r}: module {module_name!r} ({_where(obj, module_name)}) has no attribute "
                f"{attr!r}; {_env_classes(obj)}"
            )
        obj = getattr(obj, part)
    if not (isinstance(obj, type) and issubclass(obj, BaseTextEnv)):
        raise ConfigError(
            f"env {entry_point!r} is {_describe(obj)}, not a BaseTextEnv subclass: point --env at a class "
            "that subclasses skyrl_gym.BaseTextEnv (or the published skyrl_gym.envs.base_text_env."
            "BaseTextEnv); for a factory function, register it with skyrl_gym.register in its module and "
            "pass --import MODULE --env ID"
        )
    return obj


def import_modules(modules: Iterable[str]) -> list[ModuleType]:
    """Import each of ``modules`` (``--import``): a dotted name, or a path to a ``.py`` file.

    Importing a module twice runs it once (a module that registers at import is safe to name
    again), so every process of a run may call this with the same list."""
    if isinstance(modules, str):
        raise ConfigError(f"imports must be a list of module names, got the string {modules!r}")
    out = []
    for item in modules:
        name = str(item).strip()
        if name.endswith(".py") or "/" in name or os.sep in name:
            out.append(_import_file(name))
        elif _MODULE.match(name):
            out.append(_import(name, f"--import {name!r}"))
        else:
            raise ConfigError(
                f"--import {name!r}: give a dotted module name (my_pkg.envs) or a path to a .py file "
                "(envs/my_env.py)"
            )
    return out


def _add_cwd_to_path() -> None:
    cwd = os.getcwd()
    if cwd not in sys.path and "" not in sys.path:
        sys.path.append(cwd)


def _import(module_name: str, what: str) -> ModuleType:
    _add_cwd_to_path()
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        missing = exc.name or ""
        if missing and (module_name == missing or module_name.startswith(missing + ".")):
            top = module_name.split(".")[0]
            raise ConfigError(
                f"{what}: no module named {missing!r} on sys.path or in {os.getcwd()}: run from the "
                f"directory that holds {top}.py or {top}/, install the package that has it, or pass "
                "--import path/to/file.py"
            ) from exc
        raise ConfigError(f"{what}: importing {module_name!r} failed: {exc}") from exc
    except SkyRLError:
        raise
    except Exception as exc:  # a bug in the module itself: say which module and what went wrong
        raise ConfigError(f"{what}: importing {module_name!r} failed: {type(exc).__name__}: {exc}") from exc


def _import_file(name: str) -> ModuleType:
    path = Path(name).expanduser().resolve()
    if not path.is_file():
        raise ConfigError(f"--import {name!r}: no such file ({path})")
    if path.suffix != ".py" or not path.stem.isidentifier():
        raise ConfigError(
            f"--import {name!r}: a file to import must be a .py file whose name is a valid module "
            "name (letters, digits and '_')"
        )
    module_name = path.stem
    loaded = sys.modules.get(module_name)
    if loaded is not None:
        if getattr(loaded, "__file__", None) and Path(loaded.__file__).resolve() == path:
            return loaded
        raise ConfigError(
            f"--import {name!r}: a module named {module_name!r} is already imported "
            f"({_where(loaded, module_name)}); rename the file"
        )
    if str(path.parent) not in sys.path:
        sys.path.append(str(path.parent))  # its siblings import, and 'stem:Class' resolves
    module_spec = importlib.util.spec_from_file_location(module_name, path)
    if module_spec is None or module_spec.loader is None:
        raise ConfigError(f"--import {name!r}: cannot load {path} as a Python module")
    module = importlib.util.module_from_spec(module_spec)
    sys.modules[module_name] = module
    try:
        module_spec.loader.exec_module(module)
    except SkyRLError:
        sys.modules.pop(module_name, None)
        raise
    except Exception as exc:
        sys.modules.pop(module_name, None)
        raise ConfigError(f"--import {name!r}: importing {path} failed: {type(exc).__name__}: {exc}") from exc
    return module


def _where(obj: object, default: str) -> str:
    return str(getattr(obj, "__file__", None) or default)


def _env_classes(module: object) -> str:
    """The BaseTextEnv subclasses defined in ``module``, as a hint."""
    names = sorted(
        name
        for name, value in vars(module).items()
        if inspect.isclass(value)
        and issubclass(value, BaseTextEnv)
        and value.__module__ == getattr(module, "__name__", None)
    )
    return f"its env classes: {', '.join(names)}" if names else "it defines no BaseTextEnv subclass"


def _describe(obj: object) -> str:
    if inspect.isclass(obj):
        return f"the class {obj.__module__}.{obj.__qualname__}"
    if inspect.ismodule(obj):
        return f"the module {obj.__name__}"
    if callable(obj):
        return f"the {type(obj).__name__} {getattr(obj, '__qualname__', repr(obj))}"
    return f"a {type(obj).__name__} ({obj!r:.60})"
