"""Run one page's blocks in order, in this process, in one namespace: ``python _runner.py SPEC``.

SPEC is a JSON file ``{"page": ..., "blocks": [{"lang", "code", "line", "timeout"}, ...]}``
written by the docs test, which starts this script in a scratch directory. Python blocks are
``exec``'d one after another in one namespace (so a page reads like one script); ``bash run``
blocks run in ``bash -euo pipefail`` in the same directory. A block past its ``timeout`` raises
``TimeoutError``. Prints ``[docs] ok <page>:<line> <seconds>`` after each block, the last line
the test looks for being ``[docs] page done``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time


def _alarm(signum, frame):
    raise TimeoutError("the block ran past its timeout")


def main(spec_path: str) -> int:
    spec = json.loads(open(spec_path, encoding="utf-8").read())
    sys.path[0] = os.getcwd()  # like `python -c` from the scratch directory
    namespace = {"__name__": "__main__"}
    signal.signal(signal.SIGALRM, _alarm)
    for block in spec["blocks"]:
        where = f"{spec['page']}:{block['line']}"
        print(f"[docs] run {where} ({block['lang']})", flush=True)
        t0 = time.perf_counter()
        if block["lang"] == "python":
            code = compile(block["code"], where, "exec")
            signal.alarm(max(1, int(block["timeout"])))
            try:
                exec(code, namespace)
            finally:
                signal.alarm(0)
        else:
            proc = subprocess.run(
                ["bash", "-euo", "pipefail", "-c", block["code"]], timeout=block["timeout"], check=False
            )
            if proc.returncode != 0:
                print(f"[docs] FAILED {where}: bash exited with {proc.returncode}", flush=True)
                return 1
        sys.stdout.flush()
        print(f"[docs] ok {where} {time.perf_counter() - t0:.1f}s", flush=True)
    print("[docs] page done", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
