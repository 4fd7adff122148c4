"""The published skyrl-gym tool groups, on this project's executors.

``from skyrl_gym.tools import SQLCodeExecutorToolGroup, SearchToolGroup,
PythonCodeExecutorToolGroup`` works as with the published package, with the same constructor
arguments, tool names, group names and result strings. What runs underneath is ours:

* :class:`SQLCodeExecutorToolGroup` runs queries on the hardened read-only SQLite executor
  (:mod:`skyrl_gym.envs.sql.executor`): nothing can write the file, the deadline stops the
  statement inside SQLite, and the result is a ``|`` table (the published tool printed a pandas
  frame of a ``frozenset`` of rows, so without order or duplicates).
* :class:`SearchToolGroup` asks a Search-R1-style ``/retrieve`` server through
  :class:`~skyrl_gym.envs.search.RemoteRetriever` (one ``{"query", "topk", "return_scores"}``
  request per search, as published), or any other :class:`~skyrl_gym.envs.search.Retriever`
  given as ``retriever=`` (such as the local BM25 index). A server that still fails after the
  retries raises :class:`~skyrl_gym.envs.search.RetrievalError` (an infrastructure failure that
  the runtime records), where the published tool returned ``{"result": "Search error: ..."}``.
* :class:`PythonCodeExecutorToolGroup` runs code in a :class:`~skyrl_gym.sandbox.Sandbox`
  (a :class:`~skyrl_gym.sandbox.LocalSandbox` with limits, made on first use, unless one is
  given), never as a bare subprocess of the host.

The groups live here, beside the envs whose executors they use; ``skyrl_gym.envs`` offers them
at the published path ``skyrl_gym.tools`` (:func:`skyrl_gym.tools.provide`), loaded on first
use. The env modules are imported when a group is made, not when this module is.
"""

from __future__ import annotations

import posixpath
from typing import TYPE_CHECKING

from skyrl_gym.errors import ConfigError
from skyrl_gym.tools.core import ToolGroup, tool

if TYPE_CHECKING:
    from skyrl_gym.envs.search.types import ObservationFormat, Retriever
    from skyrl_gym.envs.sql.types import ExecutorLimits
    from skyrl_gym.sandbox.types import Sandbox

__all__ = ["SQLCodeExecutorToolGroup", "SearchToolGroup", "PythonCodeExecutorToolGroup"]

DEFAULT_SEARCH_URL = "http://127.0.0.1:8000/retrieve"
"""The published default of ``SearchToolGroup(search_url=...)``."""


class SQLCodeExecutorToolGroup(ToolGroup):
    """The published ``sql`` tool: run a query on ``<db_file_path>/<db_id>/<db_id>.sqlite``.

    Args:
        db_file_path: The directory that holds one ``<db_id>/<db_id>.sqlite`` per database.
        limits: Executor limits (rows and characters shown, heap); ``timeout`` of each call
            replaces ``limits.explore_timeout_s``.
    """

    def __init__(self, db_file_path: str, *, limits: ExecutorLimits | None = None) -> None:
        from skyrl_gym.envs.sql.types import ExecutorLimits

        self.db_path = str(db_file_path)
        self.limits = limits or ExecutorLimits()
        super().__init__(name="SQLCodeExecutorToolGroup")

    def db_file(self, db_id: str) -> str:
        """The SQLite file of database ``db_id``."""
        if not isinstance(db_id, str) or not db_id or "/" in db_id or "\\" in db_id or db_id in (".", ".."):
            raise ConfigError(f"db_id must be a database name such as 'concert_singer', got {db_id!r}")
        return posixpath.join(self.db_path, db_id, f"{db_id}.sqlite")

    @tool
    def sql(self, db_id: str, sql: str | None, turns_left: int, timeout: float = 5) -> str:
        """Run one read-only SQL query and return its result inside ``<observation>`` tags.

        Args:
            db_id: The database to query (a directory name under the group's db_file_path).
            sql: The query; None gives the published "invalid action" hint instead.
            turns_left: Turns the model has left, shown in a reminder after the result.
            timeout: Deadline of the query in seconds.
        """
        from skyrl_gym.envs.sql.env import INVALID_ACTION_HINT
        from skyrl_gym.envs.sql.executor import execute, format_result

        if sql is None:
            text = INVALID_ACTION_HINT
        else:
            result = execute(
                self.db_file(db_id),
                sql,
                limits=self.limits,
                timeout_s=float(timeout),
                count_up_to=self.limits.count_rows_up_to,
            )
            text = format_result(result, self.limits)
        reminder = f"<reminder>You have {turns_left} turns left to complete the task.</reminder>"
        return f"\n\n<observation>{text}\n{reminder}</observation>\n\n"


class SearchToolGroup(ToolGroup):
    """The published ``search`` tool: retrieve passages and return ``{"result": "Doc 1: ..."}``.

    The result is a JSON object whose ``result`` holds one ``Doc i: <contents>`` line per hit
    (``contents`` as the server sent it: the title line, then the text), ``""`` when nothing
    matched.

    Args:
        search_url: The server's ``/retrieve`` endpoint.
        topk: Passages per search.
        timeout: Deadline of one HTTP request in seconds (the client retries 5xx, 429,
            connection errors and timeouts with backoff within an overall deadline of
            ``max(60, timeout)`` seconds).
        log_requests: Log each attempt (logger ``skyrl_gym.envs.search.remote``, INFO).
        retriever: Use this retriever instead of a server (``search_url``, ``timeout`` and
            ``log_requests`` are then unused), e.g. ``skyrl_gym.envs.search.env.bm25_index()``.
        max_query_chars: Cut queries to this many characters (None: no cut, as published).
        max_passage_chars: Cut each passage to this many characters (None: no cut, as published).
        observation_format: ``"published"`` (the JSON object above) or ``"passages"`` (the
            search env's ``Doc 1(Title: T) text`` lines).
    """

    def __init__(
        self,
        search_url: str = DEFAULT_SEARCH_URL,
        topk: int = 3,
        timeout: float = 30,
        log_requests: bool = True,
        *,
        retriever: Retriever | None = None,
        max_query_chars: int | None = None,
        max_passage_chars: int | None = None,
        observation_format: ObservationFormat = "published",
    ) -> None:
        from skyrl_gym.envs.search.remote import RemoteRetriever
        from skyrl_gym.envs.search.types import RemoteRetrieverConfig

        if observation_format not in ("published", "passages"):
            raise ConfigError(
                f"observation_format must be 'published' or 'passages', got {observation_format!r}"
            )
        if not isinstance(topk, int) or isinstance(topk, bool) or topk < 1:
            raise ConfigError(f"topk must be an int >= 1, got {topk!r}")
        self.search_url = search_url
        self.topk = topk
        self.timeout = timeout
        self.log_requests = log_requests
        self.max_query_chars = max_query_chars
        self.max_passage_chars = max_passage_chars
        self.observation_format = observation_format
        if retriever is None:
            config = RemoteRetrieverConfig(
                url=search_url,
                timeout_s=float(timeout),
                deadline_s=max(RemoteRetrieverConfig.deadline_s, float(timeout)),
                request_format="query",
                log_requests=bool(log_requests),
            )
            retriever = RemoteRetriever(config)
        self.retriever: Retriever = retriever
        self.searches = 0
        """Searches run by this group."""
        super().__init__(name="SearchToolGroup")

    @tool
    def search(self, query: str) -> str:
        """Search the corpus and return the best passages.

        Args:
            query: What to look for, in a few words.
        """
        from skyrl_gym.envs.search.env import format_hits, format_published

        if query is None:
            return ""
        query = str(query).strip()
        if self.max_query_chars is not None:
            query = query[: self.max_query_chars]
        hits = self.retriever.search([query], self.topk)[0]  # RetrievalError: an infrastructure failure
        self.searches += 1
        if self.observation_format == "passages":
            return format_hits(hits, self.max_passage_chars)
        return format_published(hits, self.max_passage_chars)


class PythonCodeExecutorToolGroup(ToolGroup):
    """The published ``python`` tool: run a program, return its stdout or its error.

    The result is the stripped stdout, or ``"Error executing Python code: <stderr>"`` when the
    program wrote to stderr, or ``"Error executing Python code: Execution timed out after
    <timeout> seconds."`` (as published). A program killed by a limit with nothing on stderr
    gives ``"Error executing Python code: killed (<reason>)"``.

    Args:
        timeout: Deadline of one run in seconds.
        sandbox: Where programs run; None: a :class:`~skyrl_gym.sandbox.LocalSandbox` (1 GiB of
            memory, 64 processes) made on first use and closed by :meth:`close`.
        python: The interpreter inside the sandbox.
    """

    def __init__(
        self, timeout: float = 10.0, *, sandbox: Sandbox | None = None, python: str = "python3"
    ) -> None:
        if not (isinstance(timeout, (int, float)) and timeout > 0):
            raise ConfigError(f"timeout must be a positive number of seconds, got {timeout!r}")
        self.timeout = timeout
        self.python_exe = python
        self._sandbox = sandbox
        self._owns_sandbox = sandbox is None
        self.runs = 0
        """Programs run by this group."""
        super().__init__(name="PythonCodeExecutorToolGroup")

    @property
    def sandbox(self) -> Sandbox:
        """The sandbox programs run in (made on first use when none was given)."""
        if self._sandbox is None:
            from skyrl_gym.sandbox import make_sandbox
            from skyrl_gym.sandbox.types import GiB, MiB, SandboxLimits, SandboxSpec

            limits = SandboxLimits(
                timeout_s=float(self.timeout),
                grace_s=0.5,
                memory_bytes=1 * GiB,
                pids=64,
                output_bytes=256 * 1024,
                file_size_bytes=64 * MiB,
            )
            self._sandbox = make_sandbox(SandboxSpec("local", limits))
        return self._sandbox

    def close(self) -> None:
        """Close the sandbox this group made (a given one stays open). Idempotent."""
        if self._owns_sandbox and self._sandbox is not None:
            sandbox, self._sandbox = self._sandbox, None
            sandbox.close()

    @tool
    def python(self, code: str) -> str:
        """Run a Python 3 program and return what it printed.

        Args:
            code: The complete program; print() what you want to see. Nothing persists between
                calls except files in the working directory.
        """
        from skyrl_gym.sandbox.python_tool import run_python

        if not isinstance(code, str):
            return f"Error executing Python code: code must be a string, got {type(code).__name__}"
        result = run_python(self.sandbox, code, timeout=float(self.timeout), python=self.python_exe)
        self.runs += 1
        if result.timed_out:
            return f"Error executing Python code: Execution timed out after {self.timeout} seconds."
        stderr = result.stderr.strip()
        if stderr:
            return f"Error executing Python code: {stderr}"
        if result.oom_killed or result.signal is not None:
            return f"Error executing Python code: killed ({result.reason.value.replace('_', ' ')})"
        return result.stdout.strip()
