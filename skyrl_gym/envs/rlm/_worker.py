"""The REPL worker: the process in the sandbox that runs the model's code.

Not imported by the env: its source is handed to ``python -c`` inside a ``LocalSandbox``, so it
uses the standard library only and runs on whatever Python 3 the sandbox has. It keeps one
namespace for the whole episode and serves requests from the env over its stdin and stdout.

Frames are an 8-byte big-endian length and a payload. The env sends pickles (the env is
trusted); the worker answers in JSON, because the env must never unpickle bytes that the
model's code could forge. Requests (``op``): ``setup`` (a fresh namespace with the context,
the tool values and a proxy for each tool function), ``exec`` (run a cell), ``final_var`` (the
text of a variable), ``reply`` (the result of a tool call the worker asked for). Answers
(``kind``): ``ready``, ``ok``, ``fatal``, ``result``, ``answer`` and ``call`` (run a tool in
the env process and send its ``reply``).

Right after start the worker moves its pipes to fresh descriptors: fd 0 reads ``/dev/null``,
and fds 1 and 2 write to a file whose text is added to the next cell's output (so the output
of child processes is seen too).

It dies with the env, also after ``kill -9``. The process first forks: the parent is a guard
that runs no model code and, through ``PR_SET_PDEATHSIG``, ends the whole process group when the
env's process (thread) ends; the child is the REPL, which the kernel kills when the guard ends,
and whose reader thread ends the group when the request pipe closes. (Under bubblewrap the pid
namespace also ends with the env.)
"""

from __future__ import annotations

import builtins
import io
import json
import linecache
import os
import pickle
import queue
import signal
import struct
import sys
import threading
import traceback

_HEADER = struct.Struct(">Q")
_OWN_FILE = "<string>"  # this module runs under ``python -c``
_SHOWN_TYPES = (str, int, float, bool, list, dict, tuple)
_FD_OUTPUT = ".skyrl_repl_fd_output"


def _die() -> None:
    """End the REPL, its guard and everything they started (the guard's process group)."""
    try:
        if os.getpgrp() == os.getppid():  # the guard leads the group: end all of it
            os.killpg(os.getpgrp(), signal.SIGKILL)
    finally:
        os._exit(1)


def _pdeathsig(sig: int) -> None:
    """Have the kernel send ``sig`` when the parent (thread) of this process ends."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, sig)  # PR_SET_PDEATHSIG
    except Exception:  # noqa: BLE001 - not Linux: the reader thread still ends the worker
        pass


def _guard(repl_pid: int, parent: int) -> None:
    """The first process: it runs no model code. When the env's process dies it ends the
    whole process group (the REPL and whatever the REPL started); it exits as the REPL did."""
    os.close(0)
    os.close(1)  # the REPL holds the pipes: the env sees their end when the REPL ends

    def end_all(signum: object, frame: object) -> None:
        if os.getpgrp() == os.getpid():
            os.killpg(0, signal.SIGKILL)
        os.kill(repl_pid, signal.SIGKILL)
        os._exit(1)

    signal.signal(signal.SIGUSR1, end_all)
    _pdeathsig(signal.SIGUSR1)
    if os.getppid() != parent:  # the env died before the line above
        end_all(None, None)
    _, status = os.waitpid(repl_pid, 0)
    if os.WIFSIGNALED(status):
        signal.signal(os.WTERMSIG(status), signal.SIG_DFL)
        os.kill(os.getpid(), os.WTERMSIG(status))
    os._exit(os.WEXITSTATUS(status) if os.WIFEXITED(status) else 1)


class Channel:
    """Frames in (a reader thread queues them) and out (under a lock)."""

    def __init__(self, rfd: int, wfd: int) -> None:
        self.rfd, self.wfd = rfd, wfd
        self.inbox = queue.SimpleQueue()
        self.lock = threading.Lock()
        threading.Thread(target=self._read_loop, name="skyrl-repl-reader", daemon=True).start()

    def _read_exact(self, n: int) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            chunk = os.read(self.rfd, min(n - len(buf), 1 << 20))
            if not chunk:
                raise EOFError
            buf += chunk
        return bytes(buf)

    def _read_loop(self) -> None:
        try:
            while True:
                (n,) = _HEADER.unpack(self._read_exact(_HEADER.size))
                data = self._read_exact(n)
                try:
                    self.inbox.put(pickle.loads(data))
                except Exception as exc:  # noqa: BLE001 - a value this Python cannot load
                    self.inbox.put({"op": "unreadable", "error": f"{type(exc).__name__}: {exc}"})
        except BaseException:  # noqa: BLE001 - the env went away: end at once
            _die()

    def recv(self) -> dict:
        return self.inbox.get()

    def send(self, message: dict) -> None:
        data = json.dumps(message).encode("ascii")
        with self.lock:
            view = memoryview(_HEADER.pack(len(data)) + data)
            while view:
                view = view[os.write(self.wfd, view) :]


class Capture(io.TextIOBase):
    """A text stream that keeps the first ``cap`` characters and counts the rest."""

    encoding = "utf-8"
    errors = "strict"

    def __init__(self, cap: int) -> None:
        super().__init__()
        self.cap, self.parts, self.kept, self.total = cap, [], 0, 0

    def writable(self) -> bool:
        return True

    def write(self, s: str) -> int:
        if not isinstance(s, str):
            raise TypeError(f"write() argument must be str, not {type(s).__name__}")
        self.total += len(s)
        room = self.cap - self.kept
        if room > 0:
            piece = s[:room]
            self.parts.append(piece)
            self.kept += len(piece)
        return len(s)

    def text(self) -> str:
        return "".join(self.parts)


class Worker:
    """The namespace and the requests that use it."""

    def __init__(self, channel: Channel, fd_out: int) -> None:
        self.channel, self.fd_out = channel, fd_out
        self.ns = {}
        self.scaffold = {}  # reserved names -> values, put back after every cell
        self.context = None
        self.final = None
        self.cells = 0
        self.max_output = 20_000
        self.max_call_bytes = 64 << 20
        self.call_lock = threading.Lock()

    # -- the namespace ---------------------------------------------------------------------
    def setup(self, msg: dict) -> dict:
        ns = {"__name__": "__main__", "__builtins__": builtins}
        scaffold = {"FINAL_VAR": self.final_var, "SHOW_VARS": self.show_vars}
        for name in msg["functions"]:
            scaffold[name] = self._proxy(name)
        for name in msg["lm_functions"]:
            scaffold[name] = self._proxy(name)
        context = pickle.loads(msg["context"])
        ns.update(scaffold)
        ns["context_0"] = context
        ns["context"] = context
        for name, blob in msg["values"].items():
            try:
                ns[name] = pickle.loads(blob)
            except Exception as exc:  # noqa: BLE001 - reported to the env, which raises
                return {"kind": "fatal", "error": f"REPL value {name!r} cannot be loaded: {exc}"}
        self.ns, self.scaffold, self.context = ns, scaffold, context
        self.max_output = int(msg["max_output"])
        self.max_call_bytes = int(msg["max_call_bytes"])
        return {"kind": "ok"}

    def _restore(self) -> None:
        self.ns.update(self.scaffold)
        self.ns["context"] = self.context

    def _user_names(self) -> list:
        return [k for k in self.ns if not k.startswith("_") and k not in self.scaffold]

    def _proxy(self, name: str) -> object:
        def call(*args: object, **kwargs: object) -> object:
            payload = repr((args, kwargs))
            if len(payload) > self.max_call_bytes:
                raise ValueError(
                    f"the arguments of {name}() are {len(payload)} characters long; "
                    f"at most {self.max_call_bytes} can be sent"
                )
            with self.call_lock:  # one call at a time, so each reply reaches its caller
                self.channel.send({"kind": "call", "name": name, "args": payload})
                reply = self.channel.recv()
            if reply.get("op") == "reply" and reply.get("ok"):
                return reply["value"]
            raise RuntimeError(reply.get("error") or f"{name}() failed")

        call.__name__ = call.__qualname__ = name
        return call

    # -- the scaffold functions ------------------------------------------------------------
    def final_var(self, variable_name: object) -> str:
        """Mark a variable's value (or a value given directly) as the final answer."""
        if not isinstance(variable_name, str):
            self.final = str(variable_name)
            return self.final
        name = variable_name.strip().strip("\"'")
        if name in self.ns:
            self.final = str(self.ns[name])
            return self.final
        available = self._user_names()
        if available:
            msg = (
                f"Error: Variable '{name}' not found. Available variables: {available}. "
                "You must create and assign a variable BEFORE calling FINAL_VAR on it."
            )
        else:
            msg = (
                f"Error: Variable '{name}' not found. No variables have been created yet. "
                "You must create and assign a variable in a ```repl``` block BEFORE calling FINAL_VAR on it."
            )
        print(msg)
        return msg

    def show_vars(self) -> str:
        """The variables of the REPL and their types."""
        available = {k: type(self.ns[k]).__name__ for k in self._user_names()}
        if not available:
            return "No variables created yet. Use ```repl``` blocks to create variables."
        return f"Available variables: {available}"

    # -- requests ---------------------------------------------------------------------------
    def run_cell(self, code: str) -> dict:
        self.cells += 1
        filename = f"<repl-{self.cells}>"
        linecache.cache[filename] = (len(code), None, code.splitlines(True), filename)
        out, err = Capture(self.max_output), Capture(self.max_output)
        self.final = None
        error = None
        saved = sys.stdout, sys.stderr
        sys.stdout, sys.stderr = out, err
        try:
            exec(compile(code, filename, "exec"), self.ns)
        except BaseException as exc:  # noqa: BLE001 - SystemExit and KeyboardInterrupt too
            error = _format_exception(exc)
        finally:
            sys.stdout, sys.stderr = saved
            self._restore()
        self._collect_fd_output(out)
        names, room = [], 2 * self.max_output  # the env shows at most max_output characters
        for k in self._user_names():
            if isinstance(self.ns[k], _SHOWN_TYPES) and room > 0:
                names.append(k)
                room -= len(k) + 4
        return {
            "kind": "result",
            "stdout": out.text(),
            "stdout_chars": out.total,
            "stderr": err.text(),
            "stderr_chars": err.total,
            "error": error,
            "variables": names,
            "final_answer": self.final,
        }

    def _collect_fd_output(self, out: Capture) -> None:
        """Add what was written to fds 1 and 2 (child processes, C code) since the last cell."""
        try:
            sys.stdout.flush()
            sys.stderr.flush()
            size = os.fstat(self.fd_out).st_size
            if size:
                data = os.pread(self.fd_out, min(size, 4 * self.max_output), 0)
                text = data.decode("utf-8", "replace")
                out.write(text)
                out.total += size - len(data)
                os.ftruncate(self.fd_out, 0)
        except (OSError, ValueError):
            pass

    def text_of(self, name: str) -> dict:
        if name not in self.ns:
            return {"kind": "answer", "value": None}
        try:
            text = str(self.ns[name]).strip()
        except BaseException:  # noqa: BLE001 - a __str__ that fails: no answer
            text = ""
        return {"kind": "answer", "value": text or None}

    def serve(self) -> None:
        while True:
            msg = self.channel.recv()
            op = msg.get("op")
            if op == "setup":
                answer = self.setup(msg)
            elif op == "exec":
                answer = self.run_cell(msg["code"])
            elif op == "final_var":
                answer = self.text_of(msg["name"])
            elif op == "unreadable":
                answer = {"kind": "fatal", "error": msg["error"]}
            else:
                answer = {"kind": "fatal", "error": f"unknown request {op!r}"}
            self.channel.send(answer)


def _format_exception(exc: BaseException) -> str:
    """The traceback of ``exc`` without this module's frames."""
    te = traceback.TracebackException.from_exception(exc)
    seen = set()
    node = te
    while node is not None and id(node) not in seen:
        seen.add(id(node))
        node.stack = traceback.StackSummary.from_list([f for f in node.stack if f.filename != _OWN_FILE])
        node = node.__cause__ or node.__context__
    return "".join(te.format())


def main() -> None:
    parent = os.getppid()
    repl_pid = os.fork()  # before any thread exists
    if repl_pid:
        _guard(repl_pid, parent)
    _pdeathsig(signal.SIGKILL)  # the REPL dies with its guard
    rfd, wfd = os.dup(0), os.dup(1)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    fd_out = os.open(_FD_OUTPUT, os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o600)
    os.dup2(fd_out, 1)
    os.dup2(fd_out, 2)
    channel = Channel(rfd, wfd)
    channel.send({"kind": "ready", "python": sys.version.split()[0]})
    Worker(channel, fd_out).serve()


if __name__ == "__main__":
    main()
