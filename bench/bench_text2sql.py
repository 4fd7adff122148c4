"""text2sql step time: our env vs the published skyrl-gym env vs raw sqlite3, in one run.

    python bench/bench_text2sql.py [--actions 1000] [--published-venv DIR] [--skip-published] [--parity]

All three run the same 1,000 ``<sql>`` actions (small aggregate queries, joins and the bundled
gold queries, mixed over the four bundled databases):

* ours: ``skyrl_gym.make("text2sql")``, episodes of 4 exploring turns, each ``step`` timed;
* published: the PyPI ``skyrl-gym`` package's ``text2sql`` env, installed into a separate
  virtual environment under a temporary directory (both packages import as ``skyrl_gym``),
  driven the same way in a subprocess;
* raw: ``sqlite3`` running the same queries with ``execute().fetchall()`` on one open
  read-only connection per database (the physical limit), interleaved with our steps action by
  action so that load from other processes affects both alike.

It prints the total and per-step times and the ratios against raw. The goal: ours at most
1.5x raw. ``--parity`` also runs right, wrong and malformed trajectories for every bundled
question through both envs and counts the rewards that differ. Both envs see a copy of the databases in the published ``spider/database`` layout.
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import random
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import skyrl_gym  # noqa: E402
from skyrl_gym.envs.sql import bundled_db_dir, bundled_db_ids, bundled_questions  # noqa: E402

TURNS_PER_EPISODE = 4  # exploring turns; max_turns 5 so none of them ends the episode
SMALL_QUERY_S = 0.02

PUBLISHED_DRIVER = textwrap.dedent(
    """
    import json, sys, time
    from omegaconf import OmegaConf
    from skyrl_gym.envs.sql.env import SQLEnv

    spec = json.load(open(sys.argv[1]))
    cfg = OmegaConf.create({"db_path": spec["db_path"]})
    times = []
    observations = []
    for episode in spec["episodes"]:
        extras = {"db_id": episode["db_id"], "data": "spider", "max_turns": 5,
                  "reward_spec": {"method": "rule", "ground_truth": "SELECT 1"}}
        env = SQLEnv(cfg, extras)
        env.init([{"role": "user", "content": "q"}])
        for action in episode["actions"]:
            t0 = time.perf_counter()
            out = env.step(action)
            times.append(time.perf_counter() - t0)
            observations.append(out["observations"][0]["content"][:60] if out["observations"] else "")
        env.close()
    json.dump({"times": times, "observations": observations}, sys.stdout)
    """
)


PARITY_DRIVER = textwrap.dedent(
    """
    import json, sys
    from omegaconf import OmegaConf
    from skyrl_gym.envs.sql.env import SQLEnv

    spec = json.load(open(sys.argv[1]))
    cfg = OmegaConf.create({"db_path": spec["db_path"]})
    rewards = []
    for case in spec["cases"]:
        extras = {"db_id": case["db_id"], "data": "spider", "max_turns": 5,
                  "reward_spec": {"method": "rule", "ground_truth": case["gold"]}}
        env = SQLEnv(cfg, extras)
        env.init([{"role": "user", "content": "q"}])
        for action in case["actions"]:
            out = env.step(action)
            if out["done"]:
                break
        rewards.append(out["reward"])
    json.dump(rewards, sys.stdout)
    """
)


def parity_cases() -> list[dict]:
    """Trajectories for every bundled question: right, wrong and malformed in several ways."""
    think = "<think>ok</think>"
    cases = []
    for q in bundled_questions():
        gold = q["sql"]
        bare = gold.rstrip(";")
        variants = {
            "gold": [f"{think}<solution>{gold}</solution>"],
            "explore then gold": [f"{think}<sql>{gold}</sql>", f"{think}<solution>{gold}</solution>"],
            "wrong": [f"{think}<solution>SELECT 1</solution>"],
            "failing": [f"{think}<solution>SELECT * FROM nowhere</solution>"],
            "refused write": [f"{think}<solution>DELETE FROM {q['db_id']}</solution>"],
            "no think": [f"<solution>{gold}</solution>"],
            "no think after observation": [f"{think}<sql>SELECT 1</sql>", f"<solution>{gold}</solution>"],
            "tag inside solution": [f"{think}<solution><think>x</think>{gold}</solution>"],
            "two solutions": [f"{think}<solution>{gold}</solution><solution>{gold}</solution>"],
            "turn limit": [f"{think}<sql>SELECT 1</sql>"] * 5,
        }
        if "LIMIT" not in gold and "ORDER" not in gold:
            variants["duplicated rows"] = [f"{think}<solution>{bare} UNION ALL {bare}</solution>"]
        for name, actions in variants.items():
            cases.append({"id": q["id"], "case": name, "db_id": q["db_id"], "gold": gold, "actions": actions})
    return cases


def our_rewards(cases: list[dict], db_path: Path) -> list[float]:
    rewards = []
    for case in cases:
        extras = {"db_id": case["db_id"], "data": "spider", "reward_spec": {"ground_truth": case["gold"]}}
        env = skyrl_gym.make("text2sql", env_config={"db_path": str(db_path)}, extras=extras)
        env.init([{"role": "user", "content": "q"}])
        for action in case["actions"]:
            out = env.step(action)
            if out.done:
                break
        rewards.append(out.reward)
    return rewards


def published_rewards(py: Path, cases: list[dict], db_path: Path, workdir: Path) -> list[float]:
    spec_file = workdir / "parity.json"
    spec_file.write_text(json.dumps({"db_path": str(db_path), "cases": cases}))
    driver = workdir / "parity_driver.py"
    driver.write_text(PARITY_DRIVER)
    proc = subprocess.run(
        [str(py), str(driver), str(spec_file)], capture_output=True, text=True, timeout=1800, cwd=workdir
    )
    if proc.returncode != 0:
        raise RuntimeError(f"published parity driver failed:\n{proc.stderr[-2000:]}")
    return json.loads(proc.stdout)


def _queries(db_dir: Path) -> dict[str, list[str]]:
    """Small aggregate queries for each bundled database, plus its gold queries."""
    out: dict[str, list[str]] = {}
    for db_id in bundled_db_ids():
        conn = sqlite3.connect(f"file:{db_dir / db_id / (db_id + '.sqlite')}?mode=ro", uri=True)
        qs = []
        tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        for table in tables:
            qs.append(f"SELECT COUNT(*) FROM {table}")
            for _, col, ctype, *_ in conn.execute(f"PRAGMA table_info({table})"):
                if ctype in ("INTEGER", "REAL"):
                    qs.append(f"SELECT MIN({col}), MAX({col}), AVG({col}) FROM {table}")
                else:
                    qs.append(f"SELECT {col}, COUNT(*) FROM {table} GROUP BY {col} ORDER BY 2 DESC LIMIT 5")
                    qs.append(f"SELECT COUNT(DISTINCT {col}) FROM {table}")
        qs += [q["sql"] for q in bundled_questions() if q["db_id"] == db_id]
        # Keep the small ones: the few queries that take raw sqlite3 over 20 ms (a correlated
        # subquery takes ~180 ms; everything else is under 2 ms) would dominate every total and
        # measure SQLite, not the env.
        small = []
        for q in qs:
            best = math.inf
            for _ in range(3):
                t0 = time.perf_counter()
                conn.execute(q).fetchall()
                best = min(best, time.perf_counter() - t0)
            if best < SMALL_QUERY_S:
                small.append(q)
        conn.close()
        out[db_id] = small
    return out


def _episodes(queries: dict[str, list[str]], n_actions: int, seed: int = 0) -> list[dict]:
    rng = random.Random(seed)
    pool = [(db, q) for db, qs in queries.items() for q in qs]
    picked = [pool[rng.randrange(len(pool))] for _ in range(n_actions)]
    picked.sort(key=lambda item: item[0])  # group by database: an episode is on one database
    episodes = []
    for db_id in sorted(queries):
        mine = [q for db, q in picked if db == db_id]
        for i in range(0, len(mine), TURNS_PER_EPISODE):
            chunk = mine[i : i + TURNS_PER_EPISODE]
            actions = [f"<think>Let me look at the data.</think>\n<sql>{q}</sql>" for q in chunk]
            episodes.append({"db_id": db_id, "queries": chunk, "actions": actions})
    rng.shuffle(episodes)
    return episodes


def run_ours_and_raw(episodes: list[dict], db_path: Path) -> tuple[list[float], list[float]]:
    """Step times of our env and of raw sqlite3 on the same actions, interleaved action by
    action so that a busy machine slows both alike."""
    conns = {
        db_id: sqlite3.connect(
            f"file:{db_path / 'spider/database' / db_id / (db_id + '.sqlite')}?mode=ro", uri=True
        )
        for db_id in {ep["db_id"] for ep in episodes}
    }
    raw_times, our_times = [], []
    for ep in episodes:
        conn = conns[ep["db_id"]]
        extras = {"db_id": ep["db_id"], "data": "spider", "reward_spec": {"ground_truth": "SELECT 1"}}
        env = skyrl_gym.make("text2sql", env_config={"db_path": str(db_path)}, extras=extras)
        env.init([{"role": "user", "content": "q"}])
        for sql, action in zip(ep["queries"], ep["actions"], strict=True):
            # Alternate which runs first, so neither always finds the CPU caches warm.
            raw_first = len(raw_times) % 2 == 0
            if raw_first:
                t0 = time.perf_counter()
                conn.execute(sql).fetchall()
                t1 = time.perf_counter()
            t2 = time.perf_counter()
            out = env.step(action)
            t3 = time.perf_counter()
            if not raw_first:
                t0 = time.perf_counter()
                conn.execute(sql).fetchall()
                t1 = time.perf_counter()
            raw_times.append(t1 - t0)
            our_times.append(t3 - t2)
            assert not out.observations[0]["content"].startswith("\n\n<observation>Error"), out.observations
        env.close()
    for conn in conns.values():
        conn.close()
    return raw_times, our_times


def published_python(venv: Path | None, workdir: Path) -> tuple[Path | None, str]:
    """A Python with the published skyrl-gym installed, or (None, why not)."""
    if venv is not None and (venv / "bin" / "python").exists():
        return venv / "bin" / "python", ""
    venv = venv or workdir / "published-venv"
    try:
        subprocess.run(
            [sys.executable, "-m", "venv", str(venv)], check=True, capture_output=True, timeout=120
        )
        py = venv / "bin" / "python"
        proc = subprocess.run(
            [str(py), "-m", "pip", "install", "-q", "--disable-pip-version-check", "skyrl-gym"],
            capture_output=True,
            text=True,
            timeout=600,
        )
        if proc.returncode != 0:
            return None, f"pip install skyrl-gym failed: {proc.stderr.strip()[-600:]}"
        return py, ""
    except (OSError, subprocess.SubprocessError) as exc:
        return None, f"could not create the virtual environment: {exc}"


def run_published(py: Path, episodes: list[dict], db_path: Path, workdir: Path) -> tuple[list[float], int]:
    """Step times of the published env, and how many of its observations report an error."""
    spec_file = workdir / "episodes.json"
    spec_file.write_text(json.dumps({"db_path": str(db_path), "episodes": episodes}))
    driver = workdir / "driver.py"
    driver.write_text(PUBLISHED_DRIVER)
    proc = subprocess.run(
        [str(py), str(driver), str(spec_file)], capture_output=True, text=True, timeout=1800, cwd=workdir
    )
    if proc.returncode != 0:
        raise RuntimeError(f"published env driver failed:\n{proc.stderr[-2000:]}")
    out = json.loads(proc.stdout)
    failures = sum("error" in o.lower() or "timeout" in o.lower() for o in out["observations"])
    return out["times"], failures


def _summary(name: str, times: list[float], raw_total: float) -> str:
    total = sum(times)
    return (
        f"{name:10s} total {total * 1e3:9.1f} ms   mean {statistics.fmean(times) * 1e6:8.1f} us   "
        f"median {statistics.median(times) * 1e6:8.1f} us   x raw {total / raw_total:5.2f}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--actions", type=int, default=1000)
    parser.add_argument(
        "--published-venv",
        type=Path,
        default=None,
        help="reuse (or create) the published skyrl-gym venv here instead of a temp dir",
    )
    parser.add_argument("--skip-published", action="store_true")
    parser.add_argument("--repeats", type=int, default=3, help="runs of each; the fastest total counts")
    parser.add_argument(
        "--parity",
        action="store_true",
        help="also compare rewards with the published env on right, wrong and malformed trajectories",
    )
    args = parser.parse_args(argv)

    with tempfile.TemporaryDirectory(prefix="bench-text2sql-") as tmp:
        workdir = Path(tmp)
        db_path = workdir / "sql_data"
        src = bundled_db_dir()
        for db_id in bundled_db_ids():
            target = db_path / "spider" / "database" / db_id / f"{db_id}.sqlite"
            target.parent.mkdir(parents=True)
            shutil.copy(src / db_id / f"{db_id}.sqlite", target)
            os.chmod(target, 0o644)  # the published env opens databases read-write
        queries = _queries(src)
        episodes = _episodes(queries, args.actions)
        print(
            f"{sum(map(len, queries.values()))} distinct queries (templated aggregates and bundled gold "
            f"queries that take raw sqlite3 under {SMALL_QUERY_S * 1e3:g} ms)"
        )
        n = sum(len(ep["actions"]) for ep in episodes)
        print(
            f"{n} actions in {len(episodes)} episodes over {len(bundled_db_ids())} databases; "
            f"best of {args.repeats} runs each; python {sys.version.split()[0]}, sqlite {sqlite3.sqlite_version}"
        )

        run_ours_and_raw(episodes[:10], db_path)  # warm-up: build caches, import modules
        runs = []
        for _ in range(args.repeats):
            gc.collect()
            runs.append(run_ours_and_raw(episodes, db_path))
        raw = min((r for r, _ in runs), key=sum)
        ours = min((o for _, o in runs), key=sum)
        print(_summary("raw", raw, sum(raw)))
        print(_summary("ours", ours, sum(raw)))
        published = None
        if args.skip_published:
            print("published: skipped (--skip-published)")
        else:
            t0 = time.perf_counter()
            py, why = published_python(args.published_venv, workdir)
            if py is None:
                print(f"published: not measured: {why}")
            else:
                print(f"(published skyrl-gym ready in {time.perf_counter() - t0:.0f} s)")
                run_published(py, episodes[:10], db_path, workdir)
                runs = [run_published(py, episodes, db_path, workdir) for _ in range(args.repeats)]
                published = min((times for times, _ in runs), key=sum)
                print(_summary("published", published, sum(raw)))
                print(f"(published observations reporting an error: {runs[0][1]} of {len(published)})")
                if args.parity:
                    cases = parity_cases()
                    ours_r = our_rewards(cases, db_path)
                    theirs = published_rewards(py, cases, db_path, workdir)
                    differ = [
                        (c["id"], c["case"], a, b)
                        for c, a, b in zip(cases, ours_r, theirs, strict=True)
                        if a != b
                    ]
                    print(
                        f"reward parity: {len(cases)} trajectories, {len(differ)} rewards differ from the published env"
                    )
                    for item in differ[:10]:
                        print("  differs:", item)
        ratio = sum(ours) / sum(raw)
        print(f"ours / raw = {ratio:.2f} (goal <= 1.5: {'met' if ratio <= 1.5 else 'NOT met'})")
        if published is not None:
            print(f"published / ours = {sum(published) / sum(ours):.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
