"""A mallocbench with its imports done, forking one fresh process per command-line run.

Importing the command line and what it uses (scipy, dask, plotly...) costs seconds per
process, and the tests run the CLI a few hundred times as a user would. Each run here is
still its own process, with its own pid, arguments, environment, working directory and
standard streams, run as `python -m mallocbench.cli` runs it; it is forked from this
server after the imports and before any mallocbench code ran, so no run sees another's
state. cli_runner.run_cli starts one per test session and talks to it over a socket.

Protocol (SOCK_SEQPACKET, one message each): the client sends a JSON request
{args, cwd, env} with the run's stdin, stdout and stderr descriptors; the run answers
{"pid": N}, then {"code": N} when it exits. A run killed before it answers leaves the
socket closed without a code.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib
import json
import os
import runpy
import select
import signal
import socket
import sys
import traceback

# What the commands import, also lazily: a run that needs one must not pay for it.
PRELOAD = (
    "mallocbench.cli",
    "mallocbench.commands.run",
    "mallocbench.analysis.summary",
    "mallocbench.report.html",
    "scipy.special",
    "dask",
    "distributed",
    "plotly.graph_objects",
    "psycopg",
    "pymysql",
    "jinja2",
    "rich.console",
    "optuna",
)


def main(path: str) -> None:
    for name in PRELOAD:
        # A module that moved is left to the run, which imports what it needs itself.
        with contextlib.suppress(ImportError):
            importlib.import_module(name)
    # What it imported stays; the CLI module itself runs afresh as __main__, as with -m.
    sys.modules.pop("mallocbench.cli", None)
    server = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    server.bind(path)
    server.listen(64)
    # Runs are reaped by the kernel; each run puts the default back for its own children.
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)
    # Ctrl-C of the test session reaches the runs (they share its process group) and
    # ends them as it would end python -m; this server ends when the session does.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    print("ready", flush=True)
    while True:
        ready, _, _ = select.select([server, sys.stdin], [], [])
        if sys.stdin in ready and not os.read(sys.stdin.fileno(), 1024):
            return  # the test session ended (its end of our stdin closed)
        if server not in ready:
            continue
        conn, _ = server.accept()
        if os.fork() == 0:
            server.close()
            _run(conn)  # raises SystemExit: this process ends as the run ends
        conn.close()


def _run(conn: socket.socket) -> None:
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    message, fds, _, _ = socket.recv_fds(conn, 1 << 20, 3)
    request = json.loads(message)
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    os.chdir(request["cwd"])
    sys.path[0] = os.getcwd()  # where -m puts it (this script's directory is no part of it)
    os.environ.clear()
    os.environ.update(request["env"])
    outcome = {"code": 1}

    def answer() -> None:
        # Registered first, so it runs last: after the run's own exit handlers.
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(OSError, ValueError):
                stream.flush()
        conn.send(json.dumps(outcome).encode())

    atexit.register(answer)
    conn.send(json.dumps({"pid": os.getpid()}).encode())
    sys.argv = ["mallocbench.cli", *request["args"]]
    try:
        runpy.run_module("mallocbench.cli", run_name="__main__", alter_sys=True)
        outcome["code"] = 0
    except SystemExit as exc:
        outcome["code"] = _exit_status(exc.code)
    except KeyboardInterrupt:
        traceback.print_exc()
        outcome["code"] = 128 + signal.SIGINT
    except BaseException:
        traceback.print_exc()
        outcome["code"] = 1
    raise SystemExit(outcome["code"])


def _exit_status(code: object) -> int:
    """What the interpreter makes of sys.exit(code)."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1


if __name__ == "__main__":
    main(sys.argv[1])
