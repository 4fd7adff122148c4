"""Small envs for the runtime tests (registered by the tests that need them)."""

from __future__ import annotations

import time
from typing import Any

from skyrl_agent.engine import PromptItem
from skyrl_gym import BaseTextEnv, BaseTextEnvStepOutput, EnvExample

ECHO_ID = "test-agent-echo"
"""The id the ``echo_env`` fixture (tests/agent/conftest.py) registers :class:`EchoEnv` under."""


def echo_items(n: int, **extras: Any) -> list[PromptItem]:
    """``n`` rows ``task i`` (prompt ids ``p0``...) of the registered echo env, with ``extras``."""
    return [
        PromptItem(ECHO_ID, ({"role": "user", "content": f"task {i}"},), {}, extras, f"p{i}")
        for i in range(n)
    ]


class EchoEnv(BaseTextEnv):
    """Replies `ok N` to each turn; reward 0.1 a turn, 1.0 when the turn says DONE (then done)."""

    closed = 0

    def __init__(self, env_config: Any = None, extras: dict | None = None) -> None:
        super().__init__(env_config, extras)
        extras = extras or {}
        self.max_turns = int(extras.get("max_turns", 10))
        self.crash_on = int(extras.get("crash_on", -1))
        self.sleep_s = float(extras.get("sleep_s", 0.0))
        self.obs_text = str(extras.get("obs_text", "ok {n}"))
        self.as_dict = bool(extras.get("as_dict", False))
        self.actions: list[str] = []

    @classmethod
    def example(cls) -> EnvExample:
        return EnvExample(
            prompt=({"role": "user", "content": "Say DONE when you are done."},), good_actions=("DONE",)
        )

    def step(self, action: str) -> Any:
        self.turns += 1
        self.actions.append(action)
        if self.turns == self.crash_on:
            raise ConnectionError("sandbox went away")
        if self.sleep_s:
            time.sleep(self.sleep_s)
        done = "DONE" in action or self.turns >= self.max_turns
        reward = 1.0 if "DONE" in action else 0.1
        obs = [{"role": "user", "content": self.obs_text.format(n=self.turns)}]
        if self.as_dict:
            return {"observations": obs, "reward": reward, "done": done, "metadata": {}}
        return BaseTextEnvStepOutput(observations=obs, reward=reward, done=done)

    def get_metrics(self) -> dict[str, Any]:
        return {"turns": self.turns, "done_said": any("DONE" in a for a in self.actions)}

    def close(self) -> None:
        EchoEnv.closed += 1


def per_episode_script(tokenizer: Any, replies: list[str]) -> Any:
    """A ScriptedPolicy script that answers turn k of every episode with ``replies[k]`` (the turn
    is read from the context), so concurrent episodes do not share one reply sequence."""

    def script(prompt_ids: Any, index: int) -> str:
        turn = tokenizer.decode(list(prompt_ids)).count("<|im_start|>assistant") - 1
        return replies[min(turn, len(replies) - 1)]

    return script


class CalcToolEnv(BaseTextEnv):
    """Tool use: call `calc` with <tool_call>{"name": "calc", "arguments": {"expr": ...}}</tool_call>,
    then answer with <answer>N</answer>. 0.2 for a valid call, 0.8 for the right answer."""

    def __init__(self, env_config: Any = None, extras: dict | None = None) -> None:
        super().__init__(env_config, extras)
        self.max_turns = 3
        self.target = int((extras or {}).get("target", 391))

    @classmethod
    def example(cls) -> EnvExample:
        return EnvExample(
            extras={"target": 391},
            prompt=(
                {"role": "system", "content": "You can call the calc tool. Answer as <answer>N</answer>."},
                {"role": "user", "content": "What is 17 * 23?"},
            ),
            good_actions=('<tool_call>{"name": "calc", "arguments": {"expr": "17*23"}}</tool_call>',),
        )

    def tool_specs(self) -> list[dict[str, Any]]:
        return [
            {
                "type": "function",
                "function": {
                    "name": "calc",
                    "description": "Evaluate an arithmetic expression with + - * /.",
                    "parameters": {
                        "type": "object",
                        "properties": {"expr": {"type": "string"}},
                        "required": ["expr"],
                    },
                },
            }
        ]

    def step(self, action: str) -> BaseTextEnvStepOutput:
        import json
        import re

        self.turns += 1
        answer = re.search(r"<answer>\s*(-?\d+)\s*</answer>", action)
        if answer:
            ok = int(answer.group(1)) == self.target
            return BaseTextEnvStepOutput([], 0.8 if ok else 0.0, True, {"answer": int(answer.group(1))})
        call = re.search(r"<tool_call>(.*?)</tool_call>", action, re.S)
        reward, meta = 0.0, {}
        if call is None:
            obs = "Call the calc tool or give <answer>N</answer>."
            meta["error"] = "format"
        else:
            try:
                expr = json.loads(call.group(1))["arguments"]["expr"]
                if not re.fullmatch(r"[\d\s+\-*/().]+", expr):
                    raise ValueError("only arithmetic is allowed")
                obs, reward = str(eval(expr, {"__builtins__": {}})), 0.2  # noqa: S307 - arithmetic only
            except Exception as exc:  # noqa: BLE001 - the model's mistake becomes an observation
                obs, meta["error"] = f"error: {exc}", "bad_call"
        done = self.turns >= self.max_turns
        return BaseTextEnvStepOutput([{"role": "tool", "content": obs}], reward, done, meta)


class SqlEnv(BaseTextEnv):
    """Text-to-SQL on a real in-memory SQLite database: write <sql>...</sql> to run a query (the
    result comes back inline as <observation>), finish with <solution>SQL</solution>."""

    def __init__(self, env_config: Any = None, extras: dict | None = None) -> None:
        import sqlite3

        super().__init__(env_config, extras)
        self.max_turns = 3
        self.db = sqlite3.connect(":memory:", check_same_thread=False)
        self.db.executescript(
            "CREATE TABLE city(name TEXT, country TEXT, population INTEGER);"
            "INSERT INTO city VALUES ('Paris','France',2100000),('Lyon','France',520000),('Rome','Italy',2800000);"
        )
        self.expected = self.db.execute("SELECT count(*) FROM city WHERE country='France'").fetchall()

    @classmethod
    def example(cls) -> EnvExample:
        return EnvExample(
            prompt=(
                {
                    "role": "user",
                    "content": "Table city(name, country, population). How many cities are in France? "
                    "Run queries as <sql>...</sql>; give the final query as <solution>...</solution>.",
                },
            ),
            good_actions=("<solution>SELECT count(*) FROM city WHERE country='France'</solution>",),
        )

    def _run(self, sql: str) -> tuple[list | None, str]:
        try:
            rows = self.db.execute(sql).fetchmany(5)
            return rows, str(rows)
        except Exception as exc:  # noqa: BLE001 - a bad query is an observation
            return None, f"error: {exc}"

    def step(self, action: str) -> BaseTextEnvStepOutput:
        import re

        self.turns += 1
        sol = re.search(r"<solution>(.*?)</solution>", action, re.S)
        if sol:
            rows, _ = self._run(sol.group(1))
            return BaseTextEnvStepOutput([], 1.0 if rows == self.expected else 0.0, True)
        q = re.search(r"<sql>(.*?)</sql>", action, re.S)
        _, text = self._run(q.group(1)) if q else (None, "no <sql> query found")
        done = self.turns >= self.max_turns
        return BaseTextEnvStepOutput(
            [{"role": "user", "content": f"\n<observation>{text}</observation>\n"}], 0.0, done
        )

    def close(self) -> None:
        self.db.close()
