"""``skyrl harbor``: check Harbor task folders and turn them into rollout datasets.

::

    skyrl harbor check harbor_adapter/tasks            # oracle scores 1, do-nothing 0, per task
    skyrl harbor check my_tasks/ --json --jobs 2
    skyrl harbor prompts my_tasks/ --out tasks.jsonl   # rows for `skyrl rollout --prompts`
    skyrl harbor rollout my_tasks/ --out runs/harbor.jsonl --max-turns 8   # play them with a model
    skyrl harbor capture harbor_adapter/tasks/hello-file --trials 4 --out runs/t2.jsonl   # terminus-2

``check`` exits 0 only when every task passes.
"""

from __future__ import annotations

import argparse
import json
import sys

__all__ = ["add_command"]


def add_command(subparsers: argparse._SubParsersAction) -> None:
    """Add ``skyrl harbor`` (declared in pyproject under ``skyrl.cli``)."""
    p = subparsers.add_parser(
        "harbor",
        help="Harbor tasks: check a task folder, make rollout prompts",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    verbs = p.add_subparsers(dest="harbor_command", metavar="VERB")
    check = verbs.add_parser("check", help="the oracle must score 1 and a do-nothing agent 0 on every task")
    check.add_argument("tasks_dir", metavar="TASKS_DIR", help="a task folder, or a folder of them")
    check.add_argument("--json", action="store_true", help="print JSON instead of a table")
    check.add_argument("--jobs", type=int, default=1, help="tasks checked at once (default 1)")
    check.add_argument("--command-timeout", type=float, default=None, help="seconds per agent command")
    check.add_argument("--agent-timeout", type=float, default=None, help="override [agent].timeout_sec")
    check.add_argument("--verifier-timeout", type=float, default=None, help="override [verifier].timeout_sec")
    check.add_argument("--build-timeout", type=float, default=None, help="override build_timeout_sec")
    check.add_argument(
        "--verifier-mode",
        choices=("auto", "shared", "separate"),
        default="auto",
        help="where the verifier runs: the task's choice (auto: separate when it declares artifacts), or force one",
    )
    check.set_defaults(handler=_check)
    prompts = verbs.add_parser("prompts", help="write one rollout row (JSONL) per task")
    prompts.add_argument("tasks_dir", metavar="TASKS_DIR")
    prompts.add_argument("--out", default="-", help="output JSONL file (default: stdout)")
    prompts.add_argument("--max-turns", type=int, default=20, help="the env's max_turns")
    prompts.set_defaults(handler=_prompts)
    from skyrl_agent.cli import add_rollout_arguments

    rollout = verbs.add_parser(
        "rollout",
        help="play every task of a folder with a model and save the trajectories (skyrl rollout's flags)",
    )
    rollout.add_argument("tasks_dir", metavar="TASKS_DIR")
    add_rollout_arguments(rollout)
    rollout.set_defaults(handler=_rollout)
    capture = verbs.add_parser(
        "capture",
        help="run a Harbor agent harness (terminus-2) with `harbor run` against our model server and "
        "save each trial's captured, scored trajectories",
    )
    capture.add_argument("task_dir", metavar="TASK_DIR", help="one single-container task folder")
    capture.add_argument("--trials", type=int, default=1, help="trials, run one after another (default 1)")
    capture.add_argument("--out", required=True, help="output JSONL of trajectories (skyrl_agent.io format)")
    capture.add_argument("--agent", default="terminus-2", help="Harbor agent name or module:Class")
    capture.add_argument(
        "--ak", action="append", default=[], metavar="KEY=VALUE", help="agent keyword (JSON value or text)"
    )
    capture.add_argument("--paths", choices=("all", "final"), default="all", help="which session paths train")
    capture.add_argument("--trial-timeout", type=float, default=900.0, help="deadline of one trial, seconds")
    capture.add_argument(
        "--jobs-dir", default=None, help="Harbor's job folders (default ~/.cache/skyrl/harbor-jobs)"
    )
    capture.add_argument("--group-id", type=int, default=0, help="GRPO group of every trajectory")
    from skyrl_agent.server.cli import add_server_arguments

    add_server_arguments(capture)
    capture.set_defaults(handler=_capture, port=0)
    p.set_defaults(handler=lambda args: (p.print_help(), 2)[1])


def _check(args: argparse.Namespace) -> int:
    from harbor_adapter.check import check_tasks, format_table
    from harbor_adapter.types import TrialSettings

    overrides = {
        "command_timeout_s": args.command_timeout,
        "agent_timeout_s": args.agent_timeout,
        "verifier_timeout_s": args.verifier_timeout,
        "build_timeout_s": args.build_timeout,
        "verifier_mode": args.verifier_mode,
    }
    settings = TrialSettings(**{k: v for k, v in overrides.items() if v is not None})

    def progress(r):  # noqa: ANN001, ANN202
        if not args.json:
            print(f"[harbor] {r.task}: {'pass' if r.passed else 'FAIL'} ({r.seconds:.1f} s)", file=sys.stderr)

    results = check_tasks(args.tasks_dir, settings, jobs=args.jobs, on_result=progress)
    if args.json:
        print(json.dumps([r.to_dict() for r in results], indent=2))
    else:
        print(format_table(results))
    return 0 if results and all(r.passed for r in results) else 1


def _prompts(args: argparse.Namespace) -> int:
    from harbor_adapter.dataset import task_rows

    rows = task_rows(args.tasks_dir, max_turns=args.max_turns)
    text = "".join(json.dumps(row) + "\n" for row in rows)
    if args.out == "-":
        sys.stdout.write(text)
    else:
        with open(args.out, "w", encoding="utf-8") as f:
            f.write(text)
        print(f"wrote {len(rows)} rows to {args.out}", file=sys.stderr)
    return 0


def _rollout(args: argparse.Namespace) -> int:
    """The tasks' rows (the env's ``max_turns`` equal to the runtime's) and the step deadline
    that fits their builds and verifiers, played by ``skyrl rollout``'s machinery."""
    from harbor_adapter.dataset import ENV_ID, rollout_plan
    from skyrl_agent.cli import run_rollout

    items, overrides = rollout_plan(args.tasks_dir, max_turns=args.max_turns, limit=args.num_prompts)
    args.env = ENV_ID
    return run_rollout(args, items, overrides)


def _agent_kwarg(text: str) -> tuple[str, object]:
    from skyrl_gym.errors import ConfigError

    key, sep, value = text.partition("=")
    if not sep or not key:
        raise ConfigError(f"--ak {text!r}: write KEY=VALUE, e.g. --ak max_turns=8")
    try:
        return key, json.loads(value)
    except ValueError:
        return key, value


def _capture(args: argparse.Namespace) -> int:
    from harbor_adapter.harness import HarnessConfig, capture_trials
    from skyrl_agent.io import save_jsonl
    from skyrl_agent.server import ServerThread
    from skyrl_agent.server.cli import build_server

    cfg = HarnessConfig(
        agent=args.agent,
        agent_kwargs=dict(_agent_kwarg(a) for a in args.ak),
        paths=args.paths,
        timeout_s=args.trial_timeout,
    )
    policy, config = build_server(args)
    try:
        with ServerThread(policy, config, host=args.host, port=args.port) as server:
            print(
                f"[harbor] serving {config.model_name} at {server.url}; {args.trials} trial(s) of {args.agent}",
                file=sys.stderr,
            )
            trials = capture_trials(
                args.task_dir, server, n=args.trials, jobs_dir=args.jobs_dir, cfg=cfg, group_id=args.group_id
            )
    finally:
        policy.close()
    trajectories = [t for trial in trials for t in trial.trajectories]
    save_jsonl(trajectories, args.out)
    for trial in trials:
        verdict = "masked" if trial.masked else f"reward {trial.reward:g}"
        extra = f": {trial.error}" if trial.error else ""
        print(
            f"[harbor] {trial.name}: {verdict}, {trial.calls} calls, {len(trial.trajectories)} paths{extra}",
            file=sys.stderr,
        )
    kept = [t for t in trials if not t.masked]
    mean = sum(t.reward or 0.0 for t in kept) / len(kept) if kept else float("nan")
    print(
        f"[harbor] {len(kept)}/{len(trials)} trials scored, mean reward {mean:.3f}; wrote {len(trajectories)} trajectories to {args.out}",
        file=sys.stderr,
    )
    return 0 if kept else 1
