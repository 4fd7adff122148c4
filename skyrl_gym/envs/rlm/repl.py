"""A persistent Python REPL whose code runs in a sandboxed worker process, never in ours.

::

    with SandboxREPL(timeout_s=10) as repl:
        repl.load("some long context")            # `context` in the REPL
        repl.execute("n = len(context)")
        repl.execute("print(n)").stdout           # '17\\n': variables persist between cells
        repl.execute("while True: pass")          # timed_out: worker killed, a fresh one started

The worker (``_worker.py``, standard library only) is started with ``LocalSandbox.spawn``: its
own uid (as root), bubblewrap namespaces where they work (no network, only system directories
and its working directory visible), an address-space, process and CPU-time limit. It keeps one
namespace for the episode. Every request has a deadline; past it the worker is killed with
everything it started, a fresh one is started and loaded with the same context and tools, and
the result says so (``restarted``). The same happens when the model's code ends the worker
(``os._exit``, a crash, a resource limit). ``close()`` ends it; so does the death of this
process, even by ``kill -9`` (bubblewrap's ``--die-with-parent``, ``PR_SET_PDEATHSIG`` in the
worker, and a reader thread that ends the worker's process group when the request pipe closes).
Without bubblewrap, a process that the model's code moves out of that group (``setsid``)
survives a ``kill -9`` of the env; ``close()`` still ends it when the REPL runs as its own uid
(as root), as for any ``LocalSandbox`` command.

Tools the env gives the REPL run *here*, in the env's process: the worker holds a proxy that
sends the call over the pipe. What crosses from the worker is never unpickled: answers are JSON
and tool arguments are Python literals read with ``ast.literal_eval``, so model code that forges
a message can at worst get its worker replaced. Values sent to the worker (the context, tool
values, tool results) are pickles and must be built from builtin types (the worker imports
nothing of this project).
"""

from __future__ import annotations

import ast
import contextlib
import json
import os
import pickle
import selectors
import signal
import struct
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from skyrl_gym.envs.rlm.types import REPLResult, RLMConfig
from skyrl_gym.errors import ConfigError, SandboxError, SkyRLError
from skyrl_gym.sandbox.local import LocalSandbox
from skyrl_gym.sandbox.types import LocalSandboxConfig, MiB, SandboxLimits

__all__ = ["SandboxREPL", "lm_functions", "RESERVED_NAMES", "LM_FUNCTION_NAMES"]

#: The LM query functions a REPL gets when the env has an ``lm_callback``.
LM_FUNCTION_NAMES = ("llm_query", "llm_query_batched", "rlm_query", "rlm_query_batched")
#: Names a REPL tool may not take: the scaffold, the context and the LM query functions.
RESERVED_NAMES = frozenset({"FINAL_VAR", "SHOW_VARS", "context", *LM_FUNCTION_NAMES})

_HEADER = struct.Struct(">Q")
_MAX_FRAME = 256 * MiB  # a longer answer from the worker is a broken protocol
_MAX_CALL_CHARS = 64 * MiB  # the worker refuses to send longer tool arguments
_WORKER_SOURCE = (Path(__file__).with_name("_worker.py")).read_text(encoding="utf-8")
LOST_STATE_NOTE = (
    "The REPL process was replaced by a fresh one: every variable you created is gone "
    "(`context` and the REPL functions are loaded again).\n"
)


class _Timeout(Exception):
    """The worker did not answer by the deadline."""


class _Gone(Exception):
    """The worker's pipe closed: the process ended."""


class _Broken(Exception):
    """The worker sent something that is not a well-formed answer."""


def _clean(text: str) -> str:
    """``text`` with lone surrogates (which UTF-8 cannot hold) replaced."""
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return text.encode("utf-8", "replace").decode("utf-8")


class _Link:
    """The env's end of the pipes to one worker: pickles out, JSON in, every wait bounded."""

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
        self.proc = proc
        self.wfd, self.rfd, self.efd = proc.stdin.fileno(), proc.stdout.fileno(), proc.stderr.fileno()
        for fd in (self.wfd, self.rfd, self.efd):
            os.set_blocking(fd, False)
        self.buf = bytearray()
        self.stderr_tail = b""  # what the worker wrote before moving its fds (startup errors)
        self.eof = False

    def send(self, message: Mapping[str, Any], deadline: float) -> None:
        data = pickle.dumps(dict(message), protocol=4)
        view = memoryview(_HEADER.pack(len(data)) + data)
        with selectors.DefaultSelector() as sel:
            sel.register(self.wfd, selectors.EVENT_WRITE)
            while view:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise _Timeout
                if not sel.select(timeout=left):
                    continue
                try:
                    view = view[os.write(self.wfd, view[: 1 << 20]) :]
                except BlockingIOError:
                    continue
                except (BrokenPipeError, OSError) as exc:
                    raise _Gone from exc

    def recv(self, deadline: float) -> dict[str, Any]:
        with selectors.DefaultSelector() as sel:
            sel.register(self.rfd, selectors.EVENT_READ)
            if not self.eof:
                sel.register(self.efd, selectors.EVENT_READ)
            while True:
                message = self._frame()
                if message is not None:
                    return message
                left = deadline - time.monotonic()
                if left <= 0:
                    raise _Timeout
                for key, _ in sel.select(timeout=left):
                    try:
                        chunk = os.read(key.fd, 1 << 20)
                    except BlockingIOError:
                        continue
                    if key.fd == self.efd:
                        if chunk:
                            self.stderr_tail = (self.stderr_tail + chunk)[-4096:]
                        else:
                            sel.unregister(self.efd)
                            self.eof = True
                    elif chunk:
                        self.buf += chunk
                    else:
                        raise _Gone

    def _frame(self) -> dict[str, Any] | None:
        if len(self.buf) < _HEADER.size:
            return None
        (n,) = _HEADER.unpack_from(self.buf)
        if n > _MAX_FRAME:
            raise _Broken(f"a frame of {n} bytes")
        if len(self.buf) < _HEADER.size + n:
            return None
        data = bytes(self.buf[_HEADER.size : _HEADER.size + n])
        del self.buf[: _HEADER.size + n]
        try:
            message = json.loads(data.decode("ascii"))
        except (UnicodeDecodeError, ValueError, RecursionError) as exc:
            raise _Broken("a frame that is not JSON") from exc
        if not isinstance(message, dict) or not isinstance(message.get("kind"), str):
            raise _Broken("a message without a kind")
        return message


def _exit_description(proc: subprocess.Popen[bytes] | None) -> str:
    if proc is None:
        return "it was not running"
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=2)
    rc = proc.returncode
    if rc is None:
        return "it stopped answering"
    sig = -rc if rc < 0 else (rc - 128 if 128 < rc < 160 else None)  # bubblewrap reports 128 + N
    if sig:
        try:
            name = signal.Signals(sig).name
        except ValueError:
            name = f"signal {sig}"
        hint = {"SIGXCPU": ", its CPU-time limit", "SIGXFSZ": ", its file-size limit"}
        return f"killed by {name}{hint.get(name, '')}"
    return f"exit status {rc}"


def _result_of(message: Mapping[str, Any]) -> REPLResult:
    """A :class:`REPLResult` from the worker's ``result`` message; :class:`_Broken` if malformed."""
    strs = ("stdout", "stderr")
    ints = ("stdout_chars", "stderr_chars")
    if (
        not all(isinstance(message.get(k), str) for k in strs)
        or not all(isinstance(message.get(k), int) and message[k] >= 0 for k in ints)
        or not isinstance(message.get("error"), (str, type(None)))
        or not isinstance(message.get("final_answer"), (str, type(None)))
        or not isinstance(message.get("variables"), list)
        or not all(isinstance(v, str) for v in message["variables"])
    ):
        raise _Broken("a malformed result")
    stdout, stderr, error = message["stdout"], message["stderr"], message["error"]
    dropped = max(0, message["stdout_chars"] - len(stdout)) + max(0, message["stderr_chars"] - len(stderr))
    final = message["final_answer"]
    return REPLResult(
        stdout=_clean(stdout),
        stderr=_clean(stderr + (error or "")),
        variables=tuple(_clean(v) for v in message["variables"]),
        final_answer=_clean(final) if final is not None else None,
        dropped_chars=dropped,
        error_kind="exception" if error else None,
    )


def _parse_child_result(text: Any) -> Any:
    """A recursive call's answer as a Python value when it is a literal (``"[1, 2]"``), else as is."""
    if not isinstance(text, str):
        return text
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return text


def lm_functions(
    lm_callback: Callable[[list[str]], list[str]], subcall_fn: Callable[..., str] | None = None
) -> dict[str, Callable[..., Any]]:
    """The REPL's LM query functions, run in the env's process (published names and results).

    ``llm_query(prompt)`` and ``llm_query_batched(prompts)`` call ``lm_callback(prompts)``;
    ``rlm_query(prompt, context=None)`` and ``rlm_query_batched(prompts, context_list=None)``
    call ``subcall_fn(prompt, context=...)`` (a child episode; its answer is read as a Python
    literal when it is one), or fall back to ``llm_query`` without one. A failing callback
    gives the text ``"Error: LM query failed - ..."`` (``RLM query`` for subcalls) to the model.
    """

    def llm_query(prompt: str, model: str | None = None) -> str:
        try:
            return lm_callback([prompt])[0]
        except Exception as exc:  # noqa: BLE001 - the model sees the failure, as published
            return f"Error: LM query failed - {exc}"

    def llm_query_batched(prompts: Sequence[str], model: str | None = None) -> list[str]:
        prompts = list(prompts)
        try:
            return list(lm_callback(prompts))
        except Exception as exc:  # noqa: BLE001
            return [f"Error: LM query failed - {exc}"] * len(prompts)

    def one_subcall(prompt: str, context: Any) -> Any:
        assert subcall_fn is not None
        try:
            return _parse_child_result(subcall_fn(prompt, context=context))
        except Exception as exc:  # noqa: BLE001
            return f"Error: RLM query failed - {exc}"

    def rlm_query(prompt: str, model: str | None = None, context: Any = None) -> Any:
        if subcall_fn is None:
            return llm_query(prompt, model)
        return one_subcall(prompt, context)

    def rlm_query_batched(
        prompts: Sequence[str], model: str | None = None, context_list: Sequence[Any] | None = None
    ) -> list[Any]:
        prompts = list(prompts)
        if subcall_fn is None:
            return llm_query_batched(prompts, model)
        contexts = list(context_list) if context_list is not None else [None] * len(prompts)
        if len(contexts) != len(prompts):
            raise ValueError(f"context_list has {len(contexts)} items for {len(prompts)} prompts")
        if len(prompts) <= 1:
            return [one_subcall(p, c) for p, c in zip(prompts, contexts, strict=True)]
        with ThreadPoolExecutor(max_workers=2, thread_name_prefix="skyrl-rlm-subcall") as pool:
            return list(pool.map(one_subcall, prompts, contexts))

    return {
        "llm_query": llm_query,
        "llm_query_batched": llm_query_batched,
        "rlm_query": rlm_query,
        "rlm_query_batched": rlm_query_batched,
    }


class SandboxREPL:
    """A persistent Python REPL in a sandboxed worker process (see the module docstring).

    ``timeout_s`` is the deadline of each cell; ``cpu_budget_s`` the CPU time one worker may
    use over its life (default: ten cells' worth). ``start()`` starts the worker, ``load()``
    gives it the context and tools, ``execute()`` runs cells. Not thread-safe: one caller at a
    time (``close()`` may come from any thread). Infrastructure failures (the sandbox cannot
    start a worker) raise :class:`~skyrl_gym.errors.SandboxError`; the model's code never
    makes a method raise.
    """

    def __init__(
        self,
        *,
        timeout_s: float = 180.0,
        config: RLMConfig | None = None,
        cpu_budget_s: float | None = None,
    ) -> None:
        if not timeout_s > 0:
            raise ConfigError(f"timeout_s must be > 0, got {timeout_s!r}")
        self.config = config or RLMConfig()
        self.timeout_s = float(timeout_s)
        self.cpu_budget_s = float(cpu_budget_s) if cpu_budget_s is not None else 10 * self.timeout_s + 60
        self.sandbox: LocalSandbox | None = None
        self.proc: subprocess.Popen[bytes] | None = None
        self.restarts = 0
        """How many times a worker was replaced (timeouts, crashes)."""
        self._link: _Link | None = None
        self._setup: dict[str, Any] | None = None  # the setup request, sent again after a restart
        self._functions: dict[str, Callable[..., Any]] = {}
        self._closed = False
        self._close_lock = threading.Lock()

    # -- life cycle --------------------------------------------------------------------------
    def start(self) -> None:
        """Create the sandbox and start a worker (idempotent)."""
        if self._closed:
            raise SandboxError("the REPL is closed")
        if self.sandbox is None:
            cfg = self.config
            limits = SandboxLimits(
                memory_bytes=cfg.memory_mb * MiB,
                pids=cfg.pids,
                timeout_s=self.timeout_s,
                grace_s=0.0,
                output_bytes=64 * 1024,
                file_size_bytes=256 * MiB,
                tmp_bytes=256 * MiB,
            )
            self.sandbox = LocalSandbox(LocalSandboxConfig(limits=limits, isolation=cfg.isolation))
        if self.proc is None:
            self._spawn()

    def _spawn(self) -> None:
        assert self.sandbox is not None
        argv = [self.config.python, "-s", "-c", _WORKER_SOURCE]
        proc = self.sandbox.spawn(argv, cpu_budget_s=self.cpu_budget_s, env={"PYTHONHASHSEED": "0"})
        self.proc, self._link = proc, _Link(proc)
        try:
            ready = self._link.recv(time.monotonic() + self.config.startup_timeout_s)
        except (_Timeout, _Gone, _Broken) as exc:
            tail = self._link.stderr_tail.decode("utf-8", "replace").strip()
            how = _exit_description(proc) if not isinstance(exc, _Timeout) else "no answer in time"
            self._kill()
            raise SandboxError(
                f"the REPL worker ({self.config.python!r}) did not start in {self.sandbox!r}: {how}"
                + (f"; it said: {tail[-1000:]}" if tail else "")
                + ". Check RLMConfig.python names a Python 3 on the sandbox's PATH"
            ) from None
        if ready.get("kind") != "ready":
            self._kill()
            raise SandboxError(f"the REPL worker sent {ready.get('kind')!r} instead of 'ready'")

    def load(
        self,
        context: Any,
        *,
        functions: Mapping[str, Callable[..., Any]] | None = None,
        values: Mapping[str, Any] | None = None,
    ) -> None:
        """Give the REPL its ``context`` (also ``context_0``), tool ``functions`` (run in this
        process when the model calls them) and tool ``values`` (copied into the REPL).

        Raises :class:`~skyrl_gym.errors.ConfigError` for a reserved or invalid name or a
        value that cannot be sent to the worker."""
        functions, values = dict(functions or {}), dict(values or {})
        for name in [*functions, *values]:
            if not isinstance(name, str) or not name.isidentifier() or name.startswith("_"):
                raise ConfigError(f"REPL tool name {name!r} must be a public Python identifier")
        clash = (set(functions) | set(values)) & (RESERVED_NAMES - set(LM_FUNCTION_NAMES))
        clash |= set(functions) & set(values)
        if clash:
            raise ConfigError(
                f"REPL tools cannot use the names {sorted(clash)}; reserved: {sorted(RESERVED_NAMES)}"
            )
        for name, fn in functions.items():
            if not callable(fn):
                raise ConfigError(f"REPL function {name!r} is not callable")

        def blob(name: str, value: Any) -> bytes:
            try:
                return pickle.dumps(value, protocol=4)
            except Exception as exc:  # noqa: BLE001 - any pickling failure is the env author's
                raise ConfigError(
                    f"REPL value {name!r} cannot be sent to the REPL process ({exc}); "
                    "use builtin types (str, numbers, lists, dicts) or make it a function"
                ) from exc

        lm_names = [n for n in LM_FUNCTION_NAMES if n in functions]
        self._functions = functions
        self._setup = {
            "op": "setup",
            "context": blob("context", context),
            "values": {name: blob(name, v) for name, v in values.items()},
            "functions": [n for n in functions if n not in lm_names],
            "lm_functions": lm_names,
            "max_output": self.config.max_output_chars,
            "max_call_bytes": _MAX_CALL_CHARS,
        }
        self.start()
        self._send_setup()

    def _send_setup(self) -> None:
        assert self._setup is not None and self._link is not None
        try:
            answer = self._request(self._setup, time.monotonic() + self.config.startup_timeout_s)
        except (_Timeout, _Gone, _Broken) as exc:
            self._kill()
            raise SandboxError(
                f"the REPL worker failed while loading the context: {type(exc).__name__}"
            ) from None
        if answer.get("kind") == "fatal":
            self._kill()
            raise ConfigError(str(answer.get("error")))
        if answer.get("kind") != "ok":
            self._kill()
            raise SandboxError(f"the REPL worker answered {answer.get('kind')!r} to setup")

    def _kill(self) -> None:
        proc, self.proc, self._link = self.proc, None, None
        if proc is not None and self.sandbox is not None:
            self.sandbox.kill(proc)

    def _restart(self) -> None:
        if self._closed:
            raise SandboxError("the REPL was closed while it ran a cell")
        self.restarts += 1
        self._kill()
        self._spawn()
        if self._setup is not None:
            self._send_setup()

    def close(self) -> None:
        """End the worker and remove the sandbox. Idempotent; safe from another thread."""
        with self._close_lock:
            if self._closed:
                return
            self._closed = True
        sandbox, self.sandbox = self.sandbox, None
        self.proc = self._link = None
        if sandbox is not None:
            sandbox.close()  # ends the worker (and anything it started) and removes its files

    def __enter__(self) -> SandboxREPL:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- requests ----------------------------------------------------------------------------
    def _request(self, message: Mapping[str, Any], deadline: float) -> dict[str, Any]:
        """Send ``message`` and return the answer, serving the tool calls the worker makes."""
        link = self._link
        if link is None:
            raise _Gone
        link.send(message, deadline)
        while True:
            answer = link.recv(deadline)
            if answer["kind"] != "call":
                return answer
            link.send(self._serve_call(answer), deadline)

    def _serve_call(self, message: Mapping[str, Any]) -> dict[str, Any]:
        name, args = message.get("name"), message.get("args")
        fn = self._functions.get(name) if isinstance(name, str) else None
        if fn is None or not isinstance(args, str):
            raise _Broken("a call of an unknown function")
        try:
            pos, kw = ast.literal_eval(args)
            if not isinstance(pos, tuple) or not isinstance(kw, dict):
                raise ValueError("not an (args, kwargs) pair")
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError) as exc:
            return {
                "op": "reply",
                "ok": False,
                "error": f"the arguments of {name}() must be plain Python values (str, numbers, "
                f"lists, tuples, dicts, sets, bytes, None): {type(exc).__name__}",
            }
        try:
            value = fn(*pos, **kw)
        except SkyRLError:
            self._kill()  # an infrastructure failure of the tool: the episode ends here
            raise
        except Exception as exc:  # noqa: BLE001 - the model's call failed: it sees why
            return {"op": "reply", "ok": False, "error": f"{name}() failed: {type(exc).__name__}: {exc}"}
        try:
            pickle.dumps(value, protocol=4)
        except Exception as exc:  # noqa: BLE001
            return {
                "op": "reply",
                "ok": False,
                "error": f"{name}() returned a value that cannot be sent: {exc}",
            }
        return {"op": "reply", "ok": True, "value": value}

    def _ensure_worker(self) -> str:
        """Start a worker if the last one ended since the previous cell; the notice for the
        model then (else "")."""
        if self._closed:
            raise SandboxError("the REPL is closed")
        if self._setup is None:
            raise SandboxError("load() the REPL before executing code")
        if self.proc is not None and self.proc.poll() is None:
            return ""
        how = _exit_description(self.proc)
        self._restart()
        return f"The REPL process had ended since the last cell ({how}).\n{LOST_STATE_NOTE}"

    def execute(self, code: str) -> REPLResult:
        """Run one cell. Exceptions, timeouts and crashes come back in the result."""
        notice = self._ensure_worker()
        deadline = time.monotonic() + self.timeout_s
        try:
            answer = self._request({"op": "exec", "code": code}, deadline)
            if answer.get("kind") != "result":
                raise _Broken(f"{answer.get('kind')!r} instead of a result")
            result = _result_of(answer)
        except _Timeout:
            return self._replaced(notice + f"Timeout after {self.timeout_s:g} seconds\n", "timeout")
        except _Gone:
            how = _exit_description(self.proc)
            return self._replaced(
                notice + f"The REPL process ended while running this code ({how}).\n", "crashed"
            )
        except _Broken as exc:
            return self._replaced(notice + f"The REPL process sent a malformed answer ({exc}).\n", "protocol")
        if notice:
            return REPLResult(
                stdout=result.stdout,
                stderr=notice + result.stderr,
                variables=result.variables,
                final_answer=result.final_answer,
                dropped_chars=result.dropped_chars,
                error_kind=result.error_kind,
                restarted=True,
            )
        return result

    def _replaced(self, message: str, kind: str) -> REPLResult:
        """Replace the worker after a failed cell; the result tells the model what was lost."""
        self._restart()
        try:
            fresh = _result_of(self._request({"op": "exec", "code": ""}, time.monotonic() + self.timeout_s))
            variables = fresh.variables
        except (_Timeout, _Gone, _Broken):
            variables = ()
        return REPLResult(
            stdout="",
            stderr=message + LOST_STATE_NOTE,
            variables=variables,
            error_kind=kind,  # type: ignore[arg-type]
            restarted=True,
        )

    def final_var(self, name: str) -> str | None:
        """The text of variable ``name`` (stripped), or None when it is missing or empty (or
        the worker failed: then it is replaced)."""
        self._ensure_worker()
        try:
            answer = self._request({"op": "final_var", "name": name}, time.monotonic() + self.timeout_s)
        except (_Timeout, _Gone, _Broken):
            self._restart()
            return None
        value = answer.get("value") if answer.get("kind") == "answer" else None
        return _clean(value) if isinstance(value, str) and value else None
