"""Write the API reference, one page per package, from the code's docstrings.

    python docs/gen_reference.py            # rewrite docs/reference/*.md
    python docs/gen_reference.py --check    # exit 1 (listing the pages) when a page is stale

Every public module of each package in :data:`PACKAGES` (no path component starting with ``_``)
gets a section: its docstring, then each public class and function *defined* in it (names in
``__all__`` when the module has one, else every public name whose ``__module__`` is the module),
with its signature and docstring; a class also lists its dataclass fields (with the docstring
written under each field) and its public methods and properties. Names a module only re-exports
are listed with a link to where they are documented. Docstrings are shown as they are written,
inside ``text`` fences, so their markup never renders as HTML nor runs as a doc block.

Adding a package to the reference is one entry in :data:`PACKAGES`; the docs test
(``tests/docs/test_reference.py``) fails when a committed page no longer matches this output.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import inspect
import pkgutil
import re
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "docs" / "reference"

#: Package -> one-line summary at the top of its page.
PACKAGES: dict[str, str] = {
    "skyrl_gym": "The environment SDK: the env contract, registry, tools, sandboxes and built-in envs (no torch).",
    "skyrl_agent": "The agent runtime: policies, chat rendering, the multi-turn loop, the rollout engine, the server.",
    "trainers": "The native GRPO/PPO trainer: advantages, losses, KL, the training step and loop.",
    "integrations": "Bridges into the ecosystem: TRL, a Tinker-compatible API.",
    "harbor_adapter": "Harbor task directories as envs.",
}

_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")


def public_modules(package: str) -> list[str]:
    """The package and its public submodules, sorted; importing each one must work."""
    pkg = importlib.import_module(package)
    names = [package]
    if hasattr(pkg, "__path__"):
        for info in pkgutil.walk_packages(pkg.__path__, prefix=f"{package}."):
            parts = info.name.split(".")
            if any(p.startswith("_") for p in parts):
                continue
            names.append(info.name)
    return sorted(names)


def _public_names(module: Any) -> list[str]:
    if hasattr(module, "__all__"):
        return sorted(set(module.__all__))
    return sorted(
        n
        for n, v in vars(module).items()
        if not n.startswith("_")
        and (inspect.isclass(v) or inspect.isfunction(v))
        and getattr(v, "__module__", None) == module.__name__
    )


def _signature(obj: Any) -> str:
    try:
        sig = str(inspect.signature(obj))
    except (TypeError, ValueError):
        return "(...)"
    return _ADDRESS.sub("", sig)


def _doc(obj: Any) -> list[str]:
    doc = inspect.getdoc(obj)
    if not doc:
        return []
    fence = "````" if "```" in doc else "```"
    return [f"{fence}text", doc, fence, ""]


def _own_doc(obj: Any) -> list[str]:
    """The docstring of ``obj`` unless it is inherited verbatim from a builtin or a base class."""
    doc = obj.__dict__.get("__doc__") if inspect.isclass(obj) else getattr(obj, "__doc__", None)
    return _doc(obj) if doc else []


def _field_docs(cls: type) -> dict[str, str]:
    from skyrl_gym.config import field_docs

    try:
        return field_docs(cls)
    except (SyntaxError, IndexError):
        return {}


def _class(name: str, cls: type, module: str) -> list[str]:
    bases = [b.__name__ for b in cls.__bases__ if b is not object]
    head = f"### class `{name}`" + (f" ({', '.join(bases)})" if bases else "")
    lines = [f'<a id="{module}.{name}"></a>', "", head, ""]
    if not issubclass(cls, BaseException) and "Enum" not in [b.__name__ for b in cls.__mro__]:
        lines += [f"`{name}{_signature(cls)}`", ""]
    lines += _own_doc(cls)
    if dataclasses.is_dataclass(cls):
        docs = _field_docs(cls)
        fields = [f for f in dataclasses.fields(cls) if not f.name.startswith("_")]
        if fields:
            lines += ["| field | type | default | |", "|---|---|---|---|"]
            for f in fields:
                if f.default is not dataclasses.MISSING:
                    default = _ADDRESS.sub("", repr(f.default))
                elif f.default_factory is not dataclasses.MISSING:
                    default = f"{getattr(f.default_factory, '__name__', 'factory')}()"
                else:
                    default = "required"
                ftype = f.type if isinstance(f.type, str) else getattr(f.type, "__name__", str(f.type))
                cells = [f"`{f.name}`", f"`{ftype}`", f"`{default}`", docs.get(f.name, "")]
                lines.append(
                    "| " + " | ".join(c.replace("|", "\\|").replace("\n", " ") for c in cells) + " |"
                )
            lines.append("")
    elif issubclass(cls, __import__("enum").Enum):
        lines += ["Members: " + ", ".join(f"`{m.name}`" for m in cls), ""]
    for attr, value in sorted(vars(cls).items()):
        if attr.startswith("_"):
            continue
        if isinstance(value, property):
            lines += [f"#### property `{name}.{attr}`", ""] + _doc(value)
        elif isinstance(value, (staticmethod, classmethod)):
            fn = value.__func__
            kind = "staticmethod" if isinstance(value, staticmethod) else "classmethod"
            lines += [f"#### {kind} `{name}.{attr}{_signature(fn)}`", ""] + _doc(fn)
        elif inspect.isfunction(value):
            lines += [f"#### `{name}.{attr}{_signature(value)}`", ""] + _doc(value)
    return lines


def _module(modname: str, defined_in: dict[int, str]) -> list[str]:
    module = importlib.import_module(modname)
    lines = [f"## `{modname}`", ""] + _doc(module)
    reexports = []
    for name in _public_names(module):
        obj = getattr(module, name, None)
        if obj is None or not (inspect.isclass(obj) or inspect.isfunction(obj)):
            continue
        home = getattr(obj, "__module__", "")
        if home != modname:
            target = defined_in.get(id(obj))
            reexports.append(f"[`{name}`](#{_anchor(target, name)})" if target else f"`{name}`")
            continue
        if inspect.isclass(obj):
            lines += _class(name, obj, modname)
        else:
            lines += [f'<a id="{modname}.{name}"></a>', "", f"### `{name}{_signature(obj)}`", ""]
            lines += _doc(obj)
    if reexports:
        lines += ["Also here: " + ", ".join(reexports) + ".", ""]
    return lines


def _anchor(module: str, name: str) -> str:
    return f"{module}.{name}"


def render(package: str) -> str:
    """The markdown page of ``package``."""
    modules = public_modules(package)
    defined_in: dict[int, str] = {}
    for modname in modules:
        module = importlib.import_module(modname)
        for name in _public_names(module):
            obj = getattr(module, name, None)
            if (inspect.isclass(obj) or inspect.isfunction(obj)) and obj.__module__ == modname:
                defined_in.setdefault(id(obj), modname)
    out = [
        f"# `{package}` reference",
        "",
        PACKAGES[package],
        "",
        "Generated by `python docs/gen_reference.py` from the docstrings; do not edit by hand.",
        "",
        "Modules: " + ", ".join(f"[`{m}`](#{m.replace('.', '')})" for m in modules) + ".",
        "",
    ]
    for modname in modules:
        out += _module(modname, defined_in)
    text = "\n".join(out).rstrip() + "\n"
    return re.sub(r"\n{3,}", "\n\n", text)


def pages() -> dict[Path, str]:
    """Every reference page, by path."""
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))
    return {OUT / f"{pkg}.md": render(pkg) for pkg in PACKAGES}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="only report stale pages")
    args = ap.parse_args(argv)
    stale = []
    for path, text in pages().items():
        if path.exists() and path.read_text(encoding="utf-8") == text:
            continue
        stale.append(path.relative_to(REPO).as_posix())
        if not args.check:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
    if args.check and stale:
        print("stale reference pages (run: python docs/gen_reference.py):", *stale, sep="\n  ")
        return 1
    print(f"{'stale' if args.check else 'written'}: {stale or 'none'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
