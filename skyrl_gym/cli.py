"""The ``skyrl`` command line.

Verbs come from the packages that own them: each one is an entry point in the group
``skyrl.cli`` whose value is a function ``add_command(subparsers) -> None`` that adds an
``argparse`` sub-parser and sets ``handler`` (a function of the parsed ``Namespace`` returning
an exit code) as its default. Adding a verb never imports the heavy parts of its package.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import sys
from collections.abc import Sequence

__all__ = ["main", "build_parser", "add_envs_command", "add_import_argument"]

CLI_GROUP = "skyrl.cli"


def add_envs_command(subparsers: argparse._SubParsersAction) -> None:
    """``skyrl envs``: list the registered envs, one line each."""
    p = subparsers.add_parser("envs", help="list the registered environments")
    p.add_argument("--json", action="store_true", help="print a JSON list instead of a table")
    add_import_argument(p)
    p.set_defaults(handler=_envs)


def add_import_argument(p: argparse.ArgumentParser, help: str | None = None) -> None:
    """``--import MODULE`` (repeatable), into ``args.imports``: modules to import before any env
    is looked up (see :func:`skyrl_gym.user_envs.import_modules`)."""
    p.add_argument(
        "--import",
        dest="imports",
        action="append",
        default=None,
        metavar="MODULE",
        help=help
        or "import MODULE first (repeatable): a dotted name importable from the current directory or "
        "sys.path, or a path to a .py file; a module that calls skyrl_gym.register at import adds its envs",
    )


def _envs(args: argparse.Namespace) -> int:
    from skyrl_gym.registration import list_envs
    from skyrl_gym.user_envs import import_modules

    import_modules(args.imports or ())
    specs = list_envs()
    if args.json:
        rows = [
            {
                "id": s.id,
                "entry_point": s.entry_point if isinstance(s.entry_point, str) else repr(s.entry_point),
                "source": s.source,
                "description": s.summary(),
            }
            for s in specs
        ]
        print(json.dumps(rows, indent=2))
        return 0
    if not specs:
        print("no environments registered")
        return 0
    width = max(len(s.id) for s in specs)
    for s in specs:
        print(f"{s.id:<{width}}  {s.summary()}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The parser with every installed verb."""
    parser = argparse.ArgumentParser(
        prog="skyrl", description="Reinforcement learning for multi-turn, tool-using LLM agents."
    )
    from skyrl_gym import __version__

    parser.add_argument("--version", action="version", version=f"skyrl {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    seen = set()
    for ep in sorted(importlib.metadata.entry_points(group=CLI_GROUP), key=lambda e: e.name):
        if ep.name in seen:
            continue
        seen.add(ep.name)
        try:
            ep.load()(subparsers)
        except ImportError as exc:  # a verb whose package is broken must not hide the others
            print(f"skyrl: command {ep.name!r} is unavailable: {exc}", file=sys.stderr)
    if "envs" not in seen:  # running from a checkout without an installed entry point
        add_envs_command(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``skyrl`` command; returns the exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    handler = getattr(args, "handler", None)
    if handler is None:
        parser.print_help()
        return 2
    from skyrl_gym.errors import SkyRLError

    try:
        return int(handler(args) or 0)
    except SkyRLError as exc:
        print(f"skyrl {args.command}: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"skyrl {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
