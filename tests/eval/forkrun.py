"""Run `python <script>` in each of many folders, each in a process of its own, from one interpreter start:
`python -S forkrun.py SCRIPT TIMEOUT_S FOLDER...` forks a child per folder (four at a time); the child goes
to its folder, puts the folder first on sys.path and runs SCRIPT as __main__, as `python SCRIPT` there
would, its stdout and stderr going to `SCRIPT.out` and `SCRIPT.err` in the folder, and is killed after
TIMEOUT_S. Prints one JSON object: each folder's exit status (negative: killed by that signal).

A child starts from this small process (the standard library only, no site-packages), so what one script
does (its modules, its globals, a crash, an exit) cannot reach another's; what it skips is a fresh
interpreter's start, most of the cost of running 300 small scripts."""

from __future__ import annotations

import json
import os
import runpy
import signal
import sys
import traceback
import typing  # noqa: F401 - most HumanEval problems import it: once here, not in every child

AT_ONCE = 4


def child(folder: str, script: str, timeout_s: int) -> None:
    """In the forked child: never returns."""
    code = 1
    try:
        signal.alarm(timeout_s)  # SIGALRM's default action ends the process
        os.chdir(folder)
        for fd, name in ((1, script + ".out"), (2, script + ".err")):
            out = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            os.dup2(out, fd)
            os.close(out)
        sys.argv = [script]
        sys.path[0] = os.getcwd()
        try:
            runpy.run_path(script, run_name="__main__")
            code = 0
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        except BaseException:
            traceback.print_exc()
            code = 1
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        os._exit(code)


def main() -> None:
    script, timeout_s, folders = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
    running: dict[int, str] = {}
    status: dict[str, int] = {}
    pending = list(reversed(folders))
    while pending or running:
        while pending and len(running) < AT_ONCE:
            folder = pending.pop()
            sys.stdout.flush()
            sys.stderr.flush()
            pid = os.fork()
            if pid == 0:
                child(folder, script, timeout_s)
            running[pid] = folder
        pid, raw = os.wait()
        status[running.pop(pid)] = os.waitstatus_to_exitcode(raw)
    print(json.dumps(status))


if __name__ == "__main__":
    main()
