"""How every stage command ends when something is wrong: one line naming the file and the problem, exit 1.

A bad input found inside a Beam worker reaches the driver as a ``RuntimeError`` whose text holds the worker's
tracebacks, and the SDK workers log each of them again, so the useful line used to come last out of ~300.
``main`` prints only that line and sends the workers' output to a log file that only the user can read
(``<temp dir>/albert-lightning-<uid>/<command>-<pid>.log``, secrets in the command line as ``***``);
``--verbose`` shows everything.
A command given a ``Chatter`` (the Lightning commands) sends its libraries' banners, tips and the warnings raised
inside them to that log too, keeping the console for its own lines (progress, results, errors).
Imports neither Beam nor torch, so the training commands use it too. Usage::

    if __name__ == "__main__":
        main(run, "instances", beam=True)
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import re
import stat
import sys
import tempfile
import traceback
import warnings
from collections.abc import Callable, Iterator
from typing import Any, TextIO

__all__ = ["DEPRECATIONS", "LIGHTNING_LOGGERS", "VERBOSE_FLAG", "Chatter", "console", "error_line", "main", "redacted"]

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


@dataclasses.dataclass(frozen=True)
class Chatter:
    """What of its libraries' output a command sends to its log instead of the console (``--verbose``: none).

    Attributes:
        loggers: loggers whose records below WARNING (start-up banners, tips) go to the log; their warnings and
            errors still reach the console.
        warnings: categories of the warnings raised outside this project's packages that go to the log.
    """

    loggers: tuple[str, ...]
    warnings: tuple[type[Warning], ...]


# Where Lightning 2.6 attaches its console handler: "GPU available…", "💡 Tip: … litlogger", "`Trainer.fit` stopped"
# and the model summary are INFO records of these (lightning/pytorch/__init__.py, lightning/fabric/__init__.py).
LIGHTNING_LOGGERS = ("lightning.pytorch", "lightning.fabric")
# Notices for a library's maintainers (Lightning's own use of a deprecated torch name, say), not for its users.
DEPRECATIONS = (DeprecationWarning, PendingDeprecationWarning, FutureWarning)


def main(run: Callable[[list[str]], Any], name: str, beam: bool = False, chatter: Chatter | None = None) -> None:
    """Runs ``run(argv)`` as the command ``name``; on an error prints one line and exits 1.

    Args:
        run: the stage's entry point, given the command line without the program name.
        name: the command's name, the prefix of its error line and of its log file.
        beam: send everything written to stderr (Beam's SDK workers log each worker error with its trace, and
            their start-up chatter) to the log file unless ``--verbose``; our own warnings are shown after.
        chatter: the libraries' output to send to the log file unless ``--verbose``; one line says how many
            messages went there.
    """
    argv = sys.argv[1:]
    verbose = VERBOSE_FLAG in argv
    argv = [a for a in argv if a != VERBOSE_FLAG]
    if beam:
        logging.basicConfig(format=_LOG_FORMAT)
        # A command is never an IPython session, but Beam finds that out by importing IPython where it is
        # installed, 0.3 s of every stage's start-up (apache_beam/utils/interactive_utils.py): an ImportError says so.
        sys.modules.setdefault("IPython", None)
    failure, usage_error, routed = None, None, [0]
    with _log_file(name, sys.argv) as (path, log):
        with _stderr_to(log) if beam and not verbose else contextlib.nullcontext():
            try:
                with _chatter_to(log, chatter, routed) if chatter and not verbose else contextlib.nullcontext():
                    run(argv)
            except Exception as err:  # every failure becomes one line; the trace goes to the log
                if verbose:
                    raise
                traceback.print_exc(file=log)
                failure = err
            except SystemExit as done:  # argparse: --help (0) or a usage error (2), written where stderr points
                usage_error = done
    if beam and not verbose:
        _show_own_warnings(path)
        if usage_error is not None and usage_error.code:  # its message went to the log with fd 2: show it
            print(_usage_message(path), file=sys.stderr, end="")
    if usage_error is not None:
        raise usage_error
    if routed[0] and failure is None:  # a failure's line names the log already
        print(f"{name}: {routed[0]} library messages (banners, tips, warnings) are in {path}", file=sys.stderr)
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


# This project's own packages: a warning raised in them is ours to show, whatever ``Chatter`` says.
_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # pipelines/runtime/ → root
_PROJECT = tuple(os.path.join(_ROOT, package, "") for package in ("pipelines", "albert_lightning"))


class _Routed(logging.Handler):
    """Stands in for a logger's handlers: records below WARNING go to ``log``; the rest go where they went before
    (the logger's own handlers, and its ancestors' when it propagated)."""

    def __init__(self, log: TextIO, logger: logging.Logger, routed: list[int]) -> None:
        super().__init__()
        self.log, self.logger, self.routed = log, logger, routed
        self.handlers, self.propagate = list(logger.handlers), logger.propagate

    def emit(self, record: logging.LogRecord) -> None:
        if record.levelno < logging.WARNING:
            self.routed[0] += 1
            self.log.write(f"{record.levelname}:{record.name}:{record.getMessage()}\n")
            self.log.flush()
            return
        for handler in self.handlers:
            if record.levelno >= handler.level:
                handler.handle(record)
        if self.propagate and self.logger.parent is not None:
            self.logger.parent.callHandlers(record)

    def restore(self) -> None:
        self.logger.handlers, self.logger.propagate = self.handlers, self.propagate


@contextlib.contextmanager
def _chatter_to(log: TextIO, chatter: Chatter, routed: list[int]) -> Iterator[None]:
    """Sends ``chatter`` to ``log`` while the command runs, counting each message in ``routed[0]``."""
    stand_ins = [_Routed(log, logging.getLogger(name), routed) for name in chatter.loggers]
    for stand_in in stand_ins:
        stand_in.logger.handlers, stand_in.logger.propagate = [stand_in], False
    shown = warnings.showwarning

    def show(  # warnings.showwarning's signature
        message: Warning | str,
        category: type[Warning],
        filename: str,
        lineno: int,
        file: TextIO | None = None,
        line: str | None = None,
    ) -> None:
        if issubclass(category, chatter.warnings) and not os.path.abspath(filename).startswith(_PROJECT):
            routed[0] += 1
            log.write(warnings.formatwarning(message, category, filename, lineno, line))
            log.flush()
            return
        shown(message, category, filename, lineno, file, line)

    warnings.showwarning = show
    try:
        yield
    finally:
        warnings.showwarning = shown
        for stand_in in stand_ins:
            stand_in.restore()


def console() -> TextIO:
    """Returns where a command's own messages reach the user (progress lines): stderr, even while ``main`` sends
    file descriptor 2, and with it the Beam workers' chatter, to the log."""
    return _console or sys.stderr


def _usage_message(path: str) -> str:
    """The log's last argparse usage message (from its ``usage:`` line to the end of the log)."""
    with open(path, encoding="utf-8", errors="replace") as f:
        lines = f.readlines()
    starts = [i for i, line in enumerate(lines) if line.startswith("usage:")]
    return "".join(lines[starts[-1] :]) if starts else ""


def _show_own_warnings(path: str) -> None:
    with open(path, encoding="utf-8", errors="replace") as f:
        shown = dict.fromkeys(m.group(1) for m in map(_OWN_WARNING.match, f) if m)  # once each, in order
    for message in shown:
        print(f"warning: {message}", file=sys.stderr)


def redacted(argv: list[str]) -> list[str]:
    """Returns ``argv`` with the value of every flag that carries a secret shown as ``***``.

    A flag carries one when its name holds key, secret, token, password or credential (``--s3_secret_access_key``);
    both ``--flag=value`` and ``--flag value`` are redacted. In the second form a next word that starts with ``--``
    is the next flag (argparse takes no such value), so a flag like ``--enable_hot_key_logging`` keeps its neighbour.
    """
    shown: list[str] = []
    value_follows = False
    for arg in argv:
        if value_follows and not arg.startswith("--"):
            shown.append("***")
            value_follows = False
            continue
        name, equals, _ = arg.partition("=")
        secret = arg.startswith("-") and _SECRET_FLAG.search(name) is not None
        shown.append(f"{name}=***" if secret and equals else arg)
        value_follows = secret and not equals
    return shown


_SECRET_FLAG = re.compile(r"key|secret|token|password|credential", re.IGNORECASE)
# A new file only, so a link planted at the predictable name never sends the log onto another file: O_EXCL refuses
# every existing name, a link included (POSIX open), and O_NOFOLLOW states it outright.
_NEW_FILE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW


def _secret_values(argv: list[str]) -> list[str]:
    """Returns what ``redacted`` hides in ``argv``: each shown ``***`` stands for the end of its word."""
    hidden = [arg[len(shown) - 3 :] for arg, shown in zip(argv, redacted(argv), strict=True) if arg != shown]
    return [value for value in hidden if value]


@contextlib.contextmanager
def _log_file(name: str, argv: list[str]) -> Iterator[tuple[str, TextIO]]:
    """Opens the log of command ``name``, headed by its command line ``argv`` with the secrets hidden, and yields
    its path and file; on the way out, however the command ends, takes every secret out of what was logged.

    The second pass is needed for Beam: each SDK worker process logs its pipeline options to file descriptor 2,
    which is the log, S3 keys among them (``Pipeline_options: {...}``, apache_beam/runners/worker/sdk_worker_main.py).
    """
    path, log = _open_log(name)
    try:
        with log:
            log.write(f"$ {' '.join(redacted(argv))}\n")
            log.flush()
            yield path, log
    finally:
        _scrub(path, _secret_values(argv))


def _scrub(path: str, secrets: list[str]) -> None:
    if not secrets:
        return
    with open(path, "r+b") as log:
        text = log.read()
        for secret in secrets:
            text = text.replace(secret.encode(), b"***")
        log.seek(0)
        log.write(text)
        log.truncate()


def _open_log(name: str) -> tuple[str, TextIO]:
    """Creates the log of command ``name``, readable by this user only (it holds the command line and traces)."""
    folder = _log_folder()
    path = os.path.join(folder, f"{name}-{os.getpid()}.log")
    try:
        fd = os.open(path, _NEW_FILE, 0o600)
    except FileExistsError:  # left by an earlier process with this pid: a fresh name, made the same way
        fd, path = tempfile.mkstemp(prefix=f"{name}-{os.getpid()}-", suffix=".log", dir=folder)
    return path, open(fd, "w", encoding="utf-8")


def _log_folder() -> str:
    """Returns this user's folder of logs, ``<temp dir>/albert-lightning-<uid>``, made with mode 0700.

    A shared folder failed every user but its creator with PermissionError, and let anyone read the others' logs
    or plant links in it. The name is predictable, so whatever already holds it is used only if it is a real
    folder of this user that no one else may enter; anything else (a link, another user's or a world-writable
    folder) gets a fresh private folder instead. The temp dir's sticky bit keeps others from swapping ours.
    """
    uid = os.getuid()
    folder = os.path.join(tempfile.gettempdir(), f"albert-lightning-{uid}")
    with contextlib.suppress(FileExistsError):
        os.mkdir(folder, 0o700)
    found = os.lstat(folder)
    if stat.S_ISDIR(found.st_mode) and found.st_uid == uid and not found.st_mode & 0o077:
        return folder
    return tempfile.mkdtemp(prefix=f"albert-lightning-{uid}-")
