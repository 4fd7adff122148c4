"""``skyrl view RUN_DIR_OR_FILE``: a static HTML page of episodes.

::

    skyrl view runs/sql.jsonl                  # writes runs/sql.html
    skyrl view runs/main --out /tmp/view.html  # every trajectory file of a run directory
    skyrl view runs/sql.parquet --serve        # also serve it on http://127.0.0.1:PORT/

The page has a summary (episodes, mean reward, masked episodes, stop reasons, a reward
histogram) and one foldable section per episode: its header (prompt id, group and sample,
reward, turn rewards, stop reason, error), the conversation by role, and the token ids as the
trainer sees them, colored by loss mask (sampled tokens vs. prompt and observation tokens), each
turn's reward marked at its last token, logprobs on hover. A path of a captured session (an
external harness's calls through ``skyrl serve``) also shows its branch, the branch it shares
the most with and where it leaves it (a marker in the tokens), and the session's dropped retries.
One self-contained file, no script.

Sources: ``.jsonl`` (``skyrl rollout`` output, the trainer's ``trajectories.jsonl`` whose lines
also carry a ``step``), ``.parquet``, or a directory searched for both.
"""

from __future__ import annotations

import argparse
import html
import json
import os
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from skyrl_agent.failures import count_failures, failure_key
from skyrl_agent.types import Trajectory

__all__ = [
    "Episode",
    "LoadedEpisode",
    "load_episodes",
    "render_html",
    "write_view",
    "make_server",
    "serve",
    "add_command",
]

_FIELDS = {f.name for f in fields(Trajectory)}


@dataclass
class LoadedEpisode:
    """A trajectory and where it came from (the trajectory read as turns is
    :class:`skyrl_agent.episodes.Episode`)."""

    trajectory: Trajectory
    """The episode."""
    source: str
    """File (and line) it was read from."""
    step: int | None = None
    """Training step, for lines of a trainer's ``trajectories.jsonl``."""


#: The name :class:`LoadedEpisode` had before :class:`skyrl_agent.episodes.Episode` existed.
Episode = LoadedEpisode


def _episode(d: dict[str, Any], source: str) -> LoadedEpisode:
    step = d.get("step")
    return LoadedEpisode(Trajectory.from_dict({k: v for k, v in d.items() if k in _FIELDS}), source, step)


def _read_file(path: Path) -> list[LoadedEpisode]:
    if path.suffix == ".parquet":
        from skyrl_agent.io import load_parquet

        return [LoadedEpisode(t, f"{path}[{i}]") for i, t in enumerate(load_parquet(path))]
    out = []
    with path.open(encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if line.strip():
                out.append(_episode(json.loads(line), f"{path}:{lineno}"))
    return out


def load_episodes(source: str | os.PathLike[str], limit: int | None = None) -> list[LoadedEpisode]:
    """Read trajectories from a ``.jsonl``/``.parquet`` file or every such file of a directory
    (files that hold something else, such as ``metrics.jsonl``, are skipped)."""
    from skyrl_gym.errors import ConfigError

    path = Path(source)
    if not path.exists():
        raise ConfigError(
            f"{path} does not exist; pass a trajectory file (.jsonl, .parquet) or a run directory"
        )
    if path.is_file():
        try:
            episodes = _read_file(path)
        except (ValueError, KeyError, TypeError) as exc:
            raise ConfigError(f"{path} does not hold trajectories: {exc}") from exc
    else:
        episodes = []
        for f in sorted([*path.rglob("*.jsonl"), *path.rglob("*.parquet")]):
            try:
                episodes += _read_file(f)
            except (ValueError, KeyError, TypeError):
                continue  # not a trajectory file
        if not episodes:
            raise ConfigError(f"no trajectory files (.jsonl, .parquet) under {path}")
    return episodes[:limit] if limit is not None else episodes


# --------------------------------------------------------------------------- rendering
_CSS = """
body{font:14px/1.45 system-ui,sans-serif;margin:1.5em;color:#222;background:#fafafa}
h1{font-size:1.3em}table.summary td{padding:2px 12px 2px 0}
details.ep{background:#fff;border:1px solid #ddd;border-radius:6px;margin:8px 0;padding:6px 10px}
details.ep.masked{border-color:#c33}summary{cursor:pointer}
.badge{display:inline-block;border-radius:4px;padding:0 6px;margin-left:6px;font-size:12px;background:#eee}
.badge.good{background:#d4f4d4}.badge.bad{background:#f8d4d4}
.msg{border-left:4px solid #bbb;margin:6px 0;padding:4px 8px;white-space:pre-wrap;font-family:ui-monospace,monospace;font-size:12px}
.msg.system{border-color:#999;background:#f4f4f4}.msg.user{border-color:#4a7fd4;background:#eef4ff}
.msg.assistant{border-color:#2a9d4a;background:#effaf1}.msg.tool{border-color:#d49a2a;background:#fff7e8}
.role{font-weight:bold;font-family:system-ui,sans-serif}
.tokens{white-space:pre-wrap;font-family:ui-monospace,monospace;font-size:12px;line-height:1.9}
.tok{border-radius:2px}.tok.prompt{color:#777}.tok.m0{background:#e3e8f2}.tok.m1{background:#c9efd0}
.reward{background:#f5c542;border-radius:3px;padding:0 3px;margin:0 2px;font-size:11px;font-weight:bold}
.legend span{margin-right:12px}
.fork{background:#b44ad4;color:#fff;border-radius:3px;padding:0 3px;margin:0 2px;font-size:11px}
"""


def _esc(x: Any) -> str:
    return html.escape(str(x), quote=True)


def _token_texts(ids: Sequence[int], tokenizer: Any) -> list[str]:
    if tokenizer is None:
        return [f"[{t}]" for t in ids]
    vocab = len(tokenizer)
    return [tokenizer.decode([t], skip_special_tokens=False) if 0 <= t < vocab else f"[{t}]" for t in ids]


def _fork_mark(t: Trajectory) -> tuple[int | None, str]:
    """Where a captured session's branch leaves the branch it shares the most with (a position
    in ``prompt_ids + response_ids``) and the marker shown there."""
    place = t.session
    if place is None or place.fork_at is None or place.forked_from is None:
        return None, ""
    at, other = place.fork_at, place.forked_from
    title = f"tokens before this are shared with branch {other}; from here on this branch differs"
    return at, f'<span class="fork" title="{_esc(title)}">fork: branch {_esc(other)}</span>'


def _tokens_html(t: Trajectory, tokenizer: Any) -> str:
    parts = ['<div class="tokens">']
    fork_at, fork = _fork_mark(t)
    for i, (tid, text) in enumerate(zip(t.prompt_ids, _token_texts(t.prompt_ids, tokenizer), strict=True)):
        if i == fork_at:
            parts.append(fork)
        parts.append(f'<span class="tok prompt" title="prompt id {tid}">{_esc(text)}</span>')
    texts = _token_texts(t.response_ids, tokenizer)
    earlier = sum(len(seg.turn_spans) for seg in t.segments)  # turns before a context rewrite
    if t.segments:
        parts.append(
            f'<p class="note">the context was rewritten {t.context_rewrites} time(s) ({_esc(t.context_strategy)}); '
            f"these are the tokens of the last stretch, from turn {earlier + 1}</p>"
        )
    ends = {end - 1: earlier + k for k, (_, end) in enumerate(t.turn_spans) if end > 0}
    for i, (tid, text) in enumerate(zip(t.response_ids, texts, strict=True)):
        if fork_at is not None and i + len(t.prompt_ids) == fork_at:
            parts.append(fork)
        mask = t.loss_mask[i]
        tip = f"id {tid}, loss mask {mask}"
        if t.rollout_logprobs is not None and mask:
            tip += f", logprob {t.rollout_logprobs[i]:.4f}"
        parts.append(f'<span class="tok m{mask}" title="{_esc(tip)}">{_esc(text)}</span>')
        if i in ends:
            k = ends[i]
            r = t.turn_rewards[k] if k < len(t.turn_rewards) else t.token_rewards[i]
            parts.append(f'<span class="reward" title="turn {k + 1} reward">r={r:g}</span>')
    parts.append("</div>")
    return "".join(parts)


def _messages_html(t: Trajectory) -> str:
    parts = []
    for m in t.messages:
        role = str(m.get("role", "?"))
        content = m.get("content")
        text = content if isinstance(content, str) else json.dumps(content, ensure_ascii=False)
        if m.get("tool_calls"):
            text = f"{text or ''}\n[tool_calls] {json.dumps(m['tool_calls'], ensure_ascii=False)}"
        cls = role if role in ("system", "user", "assistant", "tool") else "user"
        parts.append(f'<div class="msg {cls}"><span class="role">{_esc(role)}</span>\n{_esc(text)}</div>')
    return "".join(parts) or "<p><i>no messages recorded (keep_messages=False)</i></p>"


def _episode_html(n: int, ep: LoadedEpisode, tokenizer: Any) -> str:
    t = ep.trajectory
    good = not t.masked and t.reward > 0
    badges = [
        f'<span class="badge {"good" if good else "bad" if t.masked else ""}">reward {t.reward:g}</span>',
        f'<span class="badge">{_esc(t.stop_reason)}</span>',
        f'<span class="badge">{t.num_turns} turns</span>',
        f'<span class="badge">{t.num_generated_tokens} sampled tokens</span>',
    ]
    if t.masked:
        badges.append('<span class="badge bad">masked</span>')
    if ep.step is not None:
        badges.append(f'<span class="badge">step {ep.step}</span>')
    place = t.session
    if place is not None:  # a path of a captured session (skyrl_agent.server.sessions)
        final = " (final)" if place.final else ""
        badges.append(f'<span class="badge">branch {_esc(place.branch)}/{_esc(place.branches)}{final}</span>')
    head = (
        f"#{n} prompt {_esc(t.prompt_id)} (group {t.group_id}, sample {t.sample_index})"
        f"{' ' + _esc(t.env_id) if t.env_id else ''}"
    )
    rows = [
        ("turn rewards", ", ".join(f"{r:g}" for r in t.turn_rewards) or "-"),
        ("grade reward", "-" if t.grade_reward is None else f"{t.grade_reward:g}"),
        ("truncated turns", t.truncated_turns),
        (
            "tokens (prompt / response / trained)",
            f"{len(t.prompt_ids)} / {len(t.response_ids)} / {sum(t.loss_mask)}",
        ),
        ("llm / env seconds", f"{t.llm_seconds:.2f} / {t.env_seconds:.2f}"),
        ("env metrics", json.dumps(t.env_metrics, ensure_ascii=False)),
        ("source", ep.source),
    ]
    if place is not None:
        shared = (
            f"shares its first {place.fork_at} tokens with branch {place.forked_from}"
            if place.forked_from is not None
            else "the session's only branch"
        )
        rows.insert(
            0,
            ("session", f"{place.session_id or '-'}: {shared}; client retries dropped: {place.retries}"),
        )
    if t.error:
        rows.insert(0, ("error", t.error))
    if t.failure is not None:
        retry = "retriable" if t.failure.retriable else "not retriable"
        rows.insert(0, ("failure", f"{t.failure.stage} / {t.failure.kind} ({retry})"))
        badges.append(f'<span class="badge bad">{_esc(failure_key(t))}</span>')
    table = "".join(f"<tr><td>{_esc(k)}</td><td>{_esc(v)}</td></tr>" for k, v in rows)
    cls = "ep masked" if t.masked else "ep"
    return (
        f'<details class="{cls}" id="ep-{n}"><summary>{head}{"".join(badges)}</summary>'
        f'<table class="summary">{table}</table>{_turns_html(t)}<h4>Conversation</h4>{_messages_html(t)}'
        f"<h4>Tokens</h4>{_tokens_html(t, tokenizer)}</details>"
    )


def _turns_html(t: Trajectory) -> str:
    """A row per recorded turn: reward, how the env and the policy ended it, timings, metadata."""
    if not t.turns:
        return ""
    head = "<tr><th>turn</th><th>reward</th><th>env</th><th>policy</th><th>llm / env s</th><th>metadata</th></tr>"
    rows = []
    for i, turn in enumerate(t.turns):
        ended = "done" if turn.done else "-"
        if turn.truncated:
            ended += " (its limit)"
        meta = json.dumps(turn.metadata, ensure_ascii=False) if turn.metadata else "-"
        if turn.action is not None:
            meta = f"action read as {turn.action!r}; {meta}"
        rows.append(
            f"<tr><td>{i}</td><td>{turn.reward:g}</td><td>{_esc(ended)}</td>"
            f"<td>{_esc(turn.finish_reason or '-')}</td>"
            f"<td>{turn.llm_seconds:.2f} / {turn.env_seconds:.2f}</td><td>{_esc(meta[:400])}</td></tr>"
        )
    return f'<h4>Turns</h4><table class="summary turns">{head}{"".join(rows)}</table>'


def _histogram_svg(rewards: Sequence[float], bins: int = 10) -> str:
    if not rewards:
        return ""
    lo, hi = min(rewards), max(rewards)
    width = (hi - lo) / bins or 1.0
    counts = Counter(min(int((r - lo) / width), bins - 1) for r in rewards)
    top = max(counts.values())
    bars = []
    for b in range(bins):
        h = 80 * counts.get(b, 0) / top
        label = f"{lo + b * width:.2g}..{lo + (b + 1) * width:.2g}: {counts.get(b, 0)}"
        bars.append(
            f'<rect x="{b * 30 + 2}" y="{90 - h:.1f}" width="26" height="{h:.1f}" fill="#4a7fd4">'
            f"<title>{_esc(label)}</title></rect>"
        )
    return (
        f'<svg class="hist" width="{bins * 30 + 4}" height="110" role="img" aria-label="reward histogram">'
        f'{"".join(bars)}<text x="2" y="105" font-size="10">{lo:g}</text>'
        f'<text x="{bins * 30 - 30}" y="105" font-size="10">{hi:g}</text></svg>'
    )


def render_html(
    episodes: Sequence[LoadedEpisode], tokenizer: Any = None, title: str = "skyrl episodes"
) -> str:
    """The page for ``episodes``; tokens are decoded with ``tokenizer`` (ids shown without one)."""
    trajs = [e.trajectory for e in episodes]
    good = [t for t in trajs if not t.masked]
    reasons = Counter(str(t.stop_reason) for t in trajs)
    failures = count_failures(trajs)
    summary = [
        ("episodes", len(trajs)),
        ("mean reward (unmasked)", f"{sum(t.reward for t in good) / len(good):.4f}" if good else "-"),
        ("masked (infrastructure failures)", len(trajs) - len(good)),
        ("stop reasons", ", ".join(f"{k}={v}" for k, v in sorted(reasons.items()))),
        ("failures (stage/kind)", ", ".join(f"{k}={v}" for k, v in sorted(failures.items())) or "none"),
        ("mean turns", f"{sum(t.num_turns for t in trajs) / len(trajs):.2f}" if trajs else "-"),
    ]
    sessions = Counter(t.session.session_id or "-" for t in trajs if t.session is not None)
    if sessions:
        summary.append(
            ("captured sessions (branches)", ", ".join(f"{k} ({v})" for k, v in sorted(sessions.items())))
        )
    rows = "".join(f"<tr><td>{_esc(k)}</td><td>{_esc(v)}</td></tr>" for k, v in summary)
    legend = (
        '<p class="legend"><span class="tok prompt">prompt</span><span class="tok m1">sampled (loss mask 1)</span>'
        '<span class="tok m0">observation / template (loss mask 0)</span><span class="reward">r=turn reward</span></p>'
    )
    body = "".join(_episode_html(i, e, tokenizer) for i, e in enumerate(episodes))
    return (
        f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>{_esc(title)}</title>'
        f"<style>{_CSS}</style></head><body><h1>{_esc(title)}</h1>"
        f'<table class="summary" id="summary">{rows}</table>'
        f"<h4>Rewards of unmasked episodes</h4>{_histogram_svg([t.reward for t in good])}{legend}"
        f'<main id="episodes">{body}</main></body></html>'
    )


def write_view(
    source: str | os.PathLike[str],
    out: str | os.PathLike[str] | None = None,
    *,
    tokenizer: Any = None,
    limit: int | None = None,
) -> Path:
    """Render the trajectories of ``source`` to ``out`` (default: next to the file, or
    ``view.html`` inside the directory); returns the path written."""
    src = Path(source)
    episodes = load_episodes(src, limit)
    path = Path(out) if out is not None else (src / "view.html" if src.is_dir() else src.with_suffix(".html"))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render_html(episodes, tokenizer, title=f"skyrl episodes: {src.name}"), encoding="utf-8")
    return path


def make_server(path: Path, port: int = 0) -> Any:
    """An HTTP server of ``path`` bound to 127.0.0.1:``port`` (0: a free port); call its
    ``serve_forever()`` and ``shutdown()``."""
    import http.server

    page = path.read_bytes()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - the http.server name
            self.send_response(200)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(page)))
            self.end_headers()
            self.wfile.write(page)

        def log_message(self, *args: Any) -> None:
            pass

    return http.server.ThreadingHTTPServer(("127.0.0.1", port), Handler)


def serve(path: Path, port: int = 0) -> None:
    """Serve ``path`` on http://127.0.0.1:PORT/ until interrupted (Ctrl-C)."""
    with make_server(path, port) as httpd:
        print(f"serving {path} on http://127.0.0.1:{httpd.server_address[1]}/ (Ctrl-C stops)", flush=True)
        try:
            httpd.serve_forever()
        except KeyboardInterrupt:
            pass


# --------------------------------------------------------------------------- command line
def add_command(subparsers: argparse._SubParsersAction) -> None:
    """Add ``skyrl view`` (the entry point declared in pyproject under ``skyrl.cli``)."""
    p = subparsers.add_parser(
        "view",
        help="write a static HTML page of the episodes in a trajectory file or run directory",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("source", help="a .jsonl/.parquet trajectory file or a run directory")
    p.add_argument("--out", default=None, help="HTML file to write (default: next to the source)")
    p.add_argument(
        "--tokenizer",
        default="smollm2-135m",
        help="tokenizer to decode token ids: a model directory, 'smollm2-135m' (default) or 'none' (show ids)",
    )
    p.add_argument("--limit", type=int, default=500, help="most episodes on the page (default 500)")
    p.add_argument("--serve", action="store_true", help="also serve the page on 127.0.0.1 until Ctrl-C")
    p.add_argument("--port", type=int, default=0, help="port for --serve (default: a free one)")
    p.set_defaults(handler=_view)


def _view(args: argparse.Namespace) -> int:
    tokenizer = None
    if args.tokenizer != "none":
        from skyrl_agent.models import load_tokenizer

        tokenizer = load_tokenizer(args.tokenizer)
    path = write_view(args.source, args.out, tokenizer=tokenizer, limit=args.limit)
    print(f"wrote {path}")
    if args.serve:
        serve(path, args.port)
    return 0
