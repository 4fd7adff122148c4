"""Rollout engine throughput against the ideal, and the loop's own overhead per turn.

A policy of fixed latency (``--latency-ms``, default 20 ms a call, calls overlap as on a batching
server) plays an instant env for ``--turns`` turns an episode. With ``C`` episodes in flight the
ideal is ``C / latency`` turns a second; the benchmark prints the measured rate as a fraction of
it for each concurrency (goal: >= 0.9 at 256). The overhead line is the loop's own time per turn
(wall time minus policy and env time, one episode at a time, zero latency): rendering,
tokenizing observations, bookkeeping and thread hops.

The engine runs on one event loop, so at high concurrency it is bound by CPU time per turn:
``cpu us/turn`` is the process CPU time divided by turns, and ``cpu ceiling`` the fraction of the
ideal that one uncontended core could reach at that cost (``1 / (cpu per turn * ideal)``). On a
shared machine the measured fraction falls below the ceiling when other processes take the core.
``--env-calls`` compares env steps in the thread pool (the default, safe for slow envs) with
steps run inline on the event loop (for instant envs).

    python bench/bench_rollout.py                 # 1, 16, 64, 256
    python bench/bench_rollout.py --concurrency 1 256 --latency-ms 50
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from skyrl_agent.engine import PromptItem, RolloutEngine  # noqa: E402
from skyrl_agent.models import load_tokenizer  # noqa: E402
from skyrl_agent.policies.fake import ScriptedPolicy  # noqa: E402
from skyrl_agent.types import RolloutConfig  # noqa: E402
from skyrl_gym import BaseTextEnv, BaseTextEnvStepOutput  # noqa: E402


class InstantEnv(BaseTextEnv):
    """Answers every turn at once with a short observation; never done before max_turns."""

    def __init__(self, env_config: Any = None, extras: Any = None) -> None:
        super().__init__(env_config, extras)
        self.max_turns = int((extras or {}).get("turns", 16))
        self.task = (extras or {}).get("task")  # set: every observation text is new (no cache hit)

    def step(self, action: str) -> BaseTextEnvStepOutput:
        self.turns += 1
        where = f" (task {self.task})" if self.task is not None else ""
        return BaseTextEnvStepOutput(
            observations=[{"role": "user", "content": f"Observation {self.turns}{where}: 42 rows."}],
            reward=0.1,
            done=self.turns >= self.max_turns,
        )


def run(
    tokenizer: Any,
    concurrency: int,
    episodes: int,
    turns: int,
    latency_s: float,
    env_calls: str = "thread",
    unique: bool = False,
) -> tuple[float, Any]:
    policy = ScriptedPolicy(tokenizer, ["SELECT count(*) FROM t;"], latency_s=latency_s)
    cfg = RolloutConfig(
        max_turns=turns,
        concurrency=concurrency,
        env_threads=min(64, concurrency),
        max_context_tokens=1 << 20,
        env_calls=env_calls,
    )
    items = [
        PromptItem(
            "bench-instant",
            ({"role": "user", "content": f"Task {i}"},),
            {},
            {"turns": turns, **({"task": i} if unique else {})},
            str(i),
        )
        for i in range(episodes)
    ]
    engine = RolloutEngine(policy, cfg, progress=False)
    start, cpu = time.perf_counter(), time.process_time()
    result = engine.run_sync(items)
    wall = time.perf_counter() - start
    result.cpu_seconds = time.process_time() - cpu
    assert result.stats.masked == 0 and result.stats.total_turns == episodes * turns, result.stats
    return wall, result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--concurrency", type=int, nargs="+", default=[1, 16, 64, 256])
    ap.add_argument("--latency-ms", type=float, default=20.0)
    ap.add_argument("--turns", type=int, default=16)
    ap.add_argument("--episodes-per-slot", type=int, default=4)
    ap.add_argument("--env-calls", nargs="+", default=["thread", "inline"], choices=["thread", "inline"])
    ap.add_argument(
        "--unique-observations",
        action="store_true",
        help="make every observation text distinct, so the renderer's cache of short texts never hits "
        "(by default the instant env repeats 'Observation N: 42 rows.' across episodes)",
    )
    args = ap.parse_args()
    print(f"load average (1, 5, 15 min) at start: {os.getloadavg()}, cpus: {os.cpu_count()}")

    import skyrl_gym

    skyrl_gym.register("bench-instant", InstantEnv)
    tok = load_tokenizer()
    latency = args.latency_ms / 1000

    run(tok, 1, 2, args.turns, 0.0)  # warm-up (template compile, caches)
    for env_calls in args.env_calls:
        # the loop's own overhead: zero-latency policy, one episode at a time
        wall, res = run(tok, 1, 20, args.turns, 0.0, env_calls, args.unique_observations)
        turns = res.stats.total_turns
        llm = sum(t.llm_seconds for t in res.trajectories)
        env = sum(t.env_seconds for t in res.trajectories)
        overhead_us = (wall - llm - env) / turns * 1e6
        print(
            f"[env_calls={env_calls}] loop overhead per turn (excluding policy and env time): {overhead_us:.0f} us "
            f"(policy {llm / turns * 1e6:.0f} us, env {env / turns * 1e6:.0f} us per turn)"
        )
        print(
            f"{'env_calls':>9}  {'concurrency':>11}  {'episodes':>8}  {'turns/s':>9}  {'ideal':>9}  {'fraction':>8}"
            f"  {'cpu us/turn':>11}  {'cpu ceiling':>11}"
        )
        for c in args.concurrency:
            episodes = max(4, c * args.episodes_per_slot)
            wall, res = run(tok, c, episodes, args.turns, latency, env_calls, args.unique_observations)
            rate = res.stats.total_turns / wall
            ideal = c / latency
            cpu_us = res.cpu_seconds / res.stats.total_turns * 1e6
            ceiling = min(1.0, 1e6 / cpu_us / ideal)  # the fraction one free core could reach
            print(
                f"{env_calls:>9}  {c:>11}  {episodes:>8}  {rate:>9.1f}  {ideal:>9.1f}  {rate / ideal:>8.3f}"
                f"  {cpu_us:>11.0f}  {ceiling:>11.3f}"
            )
    print(f"load average (1, 5, 15 min) at end: {os.getloadavg()}")


if __name__ == "__main__":
    main()
