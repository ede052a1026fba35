"""How every stage command ends when something is wrong: one line naming the file and the problem, exit 1.

A bad input found inside a Beam worker reaches the driver as a ``RuntimeError`` whose text holds the worker's
tracebacks, and the SDK workers log each of them again, so the useful line used to come last out of ~300.
``main`` prints only that line and sends the workers' output to a log file; ``--verbose`` shows everything.
Imports neither Beam nor torch, so the training commands use it too. Usage::

    if __name__ == "__main__":
        main(run, "instances", beam=True)
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import sys
import tempfile
import traceback
from collections.abc import Callable, Iterator
from typing import Any, TextIO

__all__ = ["VERBOSE_FLAG", "console", "error_line", "main"]

VERBOSE_FLAG = "--verbose"
_console: TextIO | None = None  # the terminal's stderr while ``main`` sends file descriptor 2 to the log
# The last "SomeError: message" line of a worker's traceback text is the error that was raised first.
_RAISED = re.compile(r"^(?:[\w.]+\.)?(\w+(?:Error|Exception|Exit|Interrupt)): (.+)$")
_BEAM_STEP = re.compile(r" \[while running '[^']*'\]$")


def error_line(err: BaseException) -> str:
    """Returns the one line that says what went wrong, with Beam's wrapping of worker errors taken off."""
    text = str(err).strip()
    raised = [m for m in map(_RAISED.match, text.splitlines()) if m]
    message = raised[-1].group(2) if raised else (text.splitlines()[-1] if text else type(err).__name__)
    while _BEAM_STEP.search(message):
        message = _BEAM_STEP.sub("", message)
    if isinstance(err, OSError) and err.filename and err.strerror:  # "path: No such file or directory"
        message = f"{err.filename}: {err.strerror}"
    return message


def main(run: Callable[[list[str]], Any], name: str, beam: bool = False) -> None:
    """Runs ``run(argv)`` as the command ``name``; on an error prints one line and exits 1.

    Args:
        run: the stage's entry point, given the command line without the program name.
        name: the command's name, the prefix of its error line and of its log file.
        beam: send everything written to stderr (Beam's SDK workers log each worker error with its trace, and
            their start-up chatter) to the log file unless ``--verbose``; our own warnings are shown after.
    """
    argv = sys.argv[1:]
    verbose = VERBOSE_FLAG in argv
    argv = [a for a in argv if a != VERBOSE_FLAG]
    if beam:
        logging.basicConfig(format=_LOG_FORMAT)
        # A command is never an IPython session, but Beam finds that out by importing IPython where it is
        # installed, 0.3 s of every stage's start-up (apache_beam/utils/interactive_utils.py): an ImportError says so.
        sys.modules.setdefault("IPython", None)
    failure = None
    path = _log_path(name)
    with open(path, "w", encoding="utf-8") as log:
        log.write(f"$ {' '.join(sys.argv)}\n")
        log.flush()
        with _stderr_to(log) if beam and not verbose else contextlib.nullcontext():
            try:
                run(argv)
            except Exception as err:  # every failure becomes one line; the trace goes to the log
                if verbose:
                    raise
                traceback.print_exc(file=log)
                failure = err
    if beam and not verbose:
        _show_own_warnings(path)
    if failure is not None:
        print(f"{name}: error: {error_line(failure)} (trace: {path}, or rerun with {VERBOSE_FLAG})", file=sys.stderr)
        raise SystemExit(1)


_LOG_FORMAT = "%(levelname)s:%(name)s:%(message)s"  # the format Beam's SDK workers log in, so one parser reads both
_OWN_WARNING = re.compile(r"^(?:WARNING|ERROR):(?:pipelines|albert_lightning)[\w.]*:(.*)$")


@contextlib.contextmanager
def _stderr_to(log: TextIO) -> Iterator[None]:
    """Points file descriptor 2 at ``log``: the SDK worker processes inherit it, so their output lands there."""
    global _console
    sys.stderr.flush()
    saved = os.dup(2)
    os.dup2(log.fileno(), 2)
    _console = open(saved, "w", buffering=1, encoding="utf-8", errors="replace", closefd=False)
    try:
        yield
    finally:
        _console.close()
        _console = None
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)


def console() -> TextIO:
    """Returns where a command's own messages reach the user (progress lines): stderr, even while ``main`` sends
    file descriptor 2, and with it the Beam workers' chatter, to the log."""
    return _console or sys.stderr


def _show_own_warnings(path: str) -> None:
    with open(path, encoding="utf-8", errors="replace") as f:
        shown = dict.fromkeys(m.group(1) for m in map(_OWN_WARNING.match, f) if m)  # once each, in order
    for message in shown:
        print(f"warning: {message}", file=sys.stderr)


def _log_path(name: str) -> str:
    folder = os.path.join(tempfile.gettempdir(), "albert-lightning")
    os.makedirs(folder, exist_ok=True)
    return os.path.join(folder, f"{name}-{os.getpid()}.log")
