"""What a model's SQL text touches, for the env's per-turn metadata: whether it reads the schema
(``sqlite_master``, ``PRAGMA table_info``...) and whether it names a table of the database.

Both are read from the identifiers of the text, after comments and string literals are taken
out, so ``SELECT 'sqlite_master'`` reads no schema and ``WHERE note = 'books'`` names no table.
Identifiers compare without case, as SQLite compares them.
"""

from __future__ import annotations

import re
from collections.abc import Collection

__all__ = ["identifiers", "reads_schema", "names_table"]

# Comments and string literals ('it''s'), taken out before identifiers are read.
_NOISE = re.compile(r"--[^\n]*|/\*.*?(?:\*/|$)|'(?:[^']|'')*(?:'|$)", re.DOTALL)
# "quoted", `quoted`, [quoted] and bare identifiers (keywords included).
_IDENTIFIER = re.compile(r'"((?:[^"]|"")*)"|`((?:[^`]|``)*)`|\[([^\]]*)\]|([A-Za-z_][A-Za-z0-9_$]*)')
#: Tables and table-valued functions that hold the schema.
SCHEMA_SOURCES = frozenset(
    {
        "sqlite_master",
        "sqlite_schema",
        "sqlite_temp_master",
        "sqlite_temp_schema",
        "pragma_table_info",
        "pragma_table_xinfo",
        "pragma_table_list",
    }
)
#: Pragmas that list tables or columns (``PRAGMA table_info(t)``).
SCHEMA_PRAGMAS = frozenset({"table_info", "table_xinfo", "table_list"})


def identifiers(sql: str) -> list[str]:
    """The identifiers and keywords of ``sql`` in order, lower-cased, quotes removed."""
    text = _NOISE.sub(" ", sql)
    return [next(g for g in m.groups() if g is not None).lower() for m in _IDENTIFIER.finditer(text)]


def reads_schema(sql: str) -> bool:
    """Whether ``sql`` reads the schema: it names ``sqlite_master`` (or ``sqlite_schema``, or a
    ``pragma_table_info`` function), or it is a ``PRAGMA table_info``/``table_xinfo``/``table_list``."""
    names = identifiers(sql)
    if not names:
        return False
    if names[0] == "pragma" and SCHEMA_PRAGMAS.intersection(names[1:3]):
        return True
    return not SCHEMA_SOURCES.isdisjoint(names)


def names_table(sql: str, tables: Collection[str]) -> bool:
    """Whether ``sql`` names one of ``tables`` (lower-cased names) outside strings and comments."""
    return not set(identifiers(sql)).isdisjoint(tables)
