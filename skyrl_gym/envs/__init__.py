"""Built-in environments, registered by id when ``skyrl_gym`` is imported.

Entry points are strings, so no env module is imported until the env is made.
"""

from skyrl_gym.registration import register


def _register_builtins() -> None:
    builtins: list[tuple[str, str, str]] = [
        # (id, entry point, one-line description)
        (
            "text2sql",
            "skyrl_gym.envs.sql.env:Text2SQLEnv",
            "Text-to-SQL in several turns (SkyRL-SQL) on a read-only SQLite sandbox",
        ),
    ]
    for env_id, entry_point, description in builtins:
        register(env_id, entry_point, description=description, source="builtin")


_register_builtins()
