"""``skyrl sandbox``: build the base images, reap leftovers, list what runs."""

from __future__ import annotations

import argparse
import json

__all__ = ["add_command"]


def add_command(subparsers: argparse._SubParsersAction) -> None:
    """Add ``skyrl sandbox {build-images,reap,ls}``."""
    p = subparsers.add_parser("sandbox", help="sandbox images and cleanup")
    sub = p.add_subparsers(dest="sandbox_command", metavar="SUBCOMMAND", required=True)

    b = sub.add_parser(
        "build-images", help="build the Debian base images offline (debootstrap + docker import)"
    )
    b.add_argument("names", nargs="*", help="recipes to build (default: all): minimal, python")
    b.add_argument("--mirror", help="Debian mirror (default: $SKYRL_DEBIAN_MIRROR or deb.debian.org)")
    b.add_argument("--force", action="store_true", help="rebuild even when the content-hash tag exists")
    b.set_defaults(handler=_build_images)

    r = sub.add_parser(
        "reap", help="remove sandbox containers whose owner died or whose time-to-live ran out"
    )
    r.add_argument(
        "--all", action="store_true", help="remove every labelled sandbox container, live owners too"
    )
    r.set_defaults(handler=_reap)

    ls = sub.add_parser("ls", help="list labelled sandbox containers")
    ls.add_argument("--json", action="store_true")
    ls.set_defaults(handler=_ls)


def _build_images(args: argparse.Namespace) -> int:
    from skyrl_gym.sandbox.images import build_images

    build_images(args.names or None, mirror=args.mirror, force=args.force)
    return 0


def _reap(args: argparse.Namespace) -> int:
    from skyrl_gym.sandbox.reaper import reap

    report = reap(everything=args.all)
    print(
        f"removed {len(report.containers)} container(s), {len(report.networks)} network(s), "
        f"{len(report.volumes)} volume(s)"
    )
    for name in report.containers + report.networks + report.volumes:
        print(f"  {name}")
    return 0


def _ls(args: argparse.Namespace) -> int:
    from skyrl_gym.sandbox.dockerlib import docker_client
    from skyrl_gym.sandbox.reaper import L_PID, list_labelled, owner_alive

    rows = []
    for c in list_labelled(docker_client())["containers"]:
        alive = owner_alive(c.labels)
        rows.append(
            {
                "name": c.name,
                "status": c.status,
                "image": c.attrs.get("Config", {}).get("Image", ""),
                "profile": c.labels.get("skyrl.profile", ""),
                "owner_pid": c.labels.get(L_PID, ""),
                "owner": "alive" if alive else "dead" if alive is False else "other host",
            }
        )
    if args.json:
        print(json.dumps(rows, indent=2))
    elif not rows:
        print("no sandbox containers")
    else:
        for r in rows:
            print(
                f"{r['name']}  {r['status']}  {r['profile']}  pid {r['owner_pid']} ({r['owner']})  {r['image']}"
            )
    return 0
