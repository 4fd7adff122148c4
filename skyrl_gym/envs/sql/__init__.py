"""Text-to-SQL: the ``text2sql`` env, its hardened SQLite executor, reward and bundled data.

import skyrl_gym
from skyrl_gym.envs.sql import load_bundled_rows

row = load_bundled_rows("train")[0]
env = skyrl_gym.make("text2sql", extras=row)
messages, _ = env.init(row["prompt"])
out = env.step("<think>...</think><sql>SELECT COUNT(*) FROM books</sql>")

# the same question with the schema hidden: the model explores it with SQL
env = skyrl_gym.make("text2sql", env_config={"hide_schema": True}, extras=row)
messages, _ = env.init(row["prompt"])
out = env.step("<think>...</think><sql>SELECT name FROM sqlite_master WHERE type = 'table'</sql>")
"""

from skyrl_gym.envs.sql._bundled import bundled_db_dir, bundled_db_ids, bundled_questions
from skyrl_gym.envs.sql.env import (
    INVALID_ACTION_HINT,
    LAYOUTS,
    Text2SQLEnv,
    format_observation,
    resolve_db_file,
)
from skyrl_gym.envs.sql.executor import ReadOnlyDatabase, close_thread_connections, execute, format_result
from skyrl_gym.envs.sql.prompt import (
    HIDDEN_SCHEMA_NOTE,
    SYSTEM_PROMPT,
    build_prompt,
    database_schema,
    format_schema,
    hidden_schema_block,
    hide_schema_in_prompt,
    load_bundled_rows,
    make_row,
)
from skyrl_gym.envs.sql.reward import check_format, extract_solution, grade, rows_match
from skyrl_gym.envs.sql.types import ExecutorLimits, Grade, QueryResult, QueryStatus, Text2SQLConfig

__all__ = [
    "HIDDEN_SCHEMA_NOTE",
    "INVALID_ACTION_HINT",
    "LAYOUTS",
    "SYSTEM_PROMPT",
    "ExecutorLimits",
    "Grade",
    "QueryResult",
    "QueryStatus",
    "ReadOnlyDatabase",
    "Text2SQLConfig",
    "Text2SQLEnv",
    "build_prompt",
    "bundled_db_dir",
    "bundled_db_ids",
    "bundled_questions",
    "check_format",
    "close_thread_connections",
    "database_schema",
    "execute",
    "extract_solution",
    "format_observation",
    "format_result",
    "format_schema",
    "grade",
    "hidden_schema_block",
    "hide_schema_in_prompt",
    "load_bundled_rows",
    "make_row",
    "resolve_db_file",
    "rows_match",
]
