"""A Beam stage's progress on the local runner, on stderr: ``segment: 812/2,000 files (41%), 35 files/s, 0:34 left``.

On Beam's local runner in multi-processing mode the launching process cannot see its workers' progress
(``pipeline.run()`` blocks and metrics arrive at the end), so the workers report through the file system: each
process appends one byte per unit done (a file, a source) to its own file in a local temporary folder, one
``write`` of O_APPEND, which neither tears nor interleaves with another process's, and costs a microsecond or two
next to a unit's milliseconds. A thread of the launching process sums the files' sizes and prints a line while
some but not all units are done: on a terminal every ``TERMINAL_S`` seconds, in a log when ``pace.Pace`` says
(30 s or 5 % of the units since the last line, whichever comes first). In-process mode works the same, with one
file.
The folder reaches the workers in an environment variable, which the local runner's SDK worker processes inherit.

The folder is the machine's temporary one, not the output's: a local runner may write to s3://, which should not
see a write per unit. Remote runners (Dataflow, Flink, Spark, Dask) show progress in their own consoles: for them
nothing is set up, nothing is printed and ``advance`` does nothing. Usage, in a stage::

    with progress.shown("segment", len(inputs), "files", args.beam):
        counters = run_and_count(pipeline, ...)

and, where a worker finishes one unit, ``progress.advance()``.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Iterator
from typing import TextIO

from apache_beam.options.pipeline_options import PipelineOptions

from pipelines.runtime.commands import console
from pipelines.runtime.options import runs_locally
from pipelines.runtime.pace import Pace, clock, rate_and_left

__all__ = ["ENV", "LOOK_S", "TERMINAL_S", "advance", "shown"]

ENV = "ALBERT_LIGHTNING_PROGRESS"  # the folder this run's workers report to; unset: no report
TERMINAL_S = 5.0  # a terminal's line this often: the rate is seen to move
LOOK_S = 1.0  # in a log, the workers' count is looked at this often and a line printed when the pace says

_file: tuple[str, int, int] | None = None  # (folder, pid, descriptor) of this process's report


def advance(units: int = 1) -> None:
    """Counts ``units`` more done by this process, when a local run shows progress; never raises."""
    global _file
    folder = os.environ.get(ENV)
    if not folder or units < 1:
        return
    try:
        if _file is None or _file[:2] != (folder, os.getpid()):
            if _file is not None and _file[1] == os.getpid():
                os.close(_file[2])  # an earlier run's, in a process that outlived it (tests run stages in-process)
            flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND
            _file = (folder, os.getpid(), os.open(os.path.join(folder, str(os.getpid())), flags, 0o600))
        os.write(_file[2], b"." * units)
    except OSError:  # the run ended (folder removed) or the disk is full: progress must never fail the stage
        _file = None


def _done(folder: str) -> int:
    with os.scandir(folder) as entries:
        return sum(entry.stat().st_size for entry in entries)


class _Reporter(threading.Thread):
    """Prints a line when ``pace`` says, looking every ``look_s`` seconds, while some but not all units are done.

    Nothing during start-up or once every unit is done (a stage's last steps, a short run): a command's stderr is
    then just its result. The rate counts from the first unit seen done, so start-up does not drag it down.
    """

    def __init__(self, stage: str, total: int, unit: str, folder: str, pace: Pace, look_s: float,
                 stream: TextIO) -> None:  # fmt: skip
        super().__init__(daemon=True, name=f"progress-{stage}")
        self.stage, self.total, self.unit, self.folder = stage, total, unit, folder
        self.pace, self.look_s, self.stream, self.stop = pace, look_s, stream, threading.Event()
        self.start_time, self.first, self.lines = time.monotonic(), None, 0

    def run(self) -> None:
        while not self.stop.wait(self.look_s):
            done, now = _done(self.folder), time.monotonic()
            if 0 < done < self.total and self.pace.due(done, now):
                self.report(done, now)
            if done and self.first is None:
                self.first = (now, done)

    def report(self, done: int, now: float, final: bool = False) -> None:
        line = f"{self.stage}: {done:,}/{self.total:,} {self.unit} ({done / max(self.total, 1):.0%})"
        if final:
            line += f" in {clock(now - self.start_time)}"
        elif self.first is not None and (rate := rate_and_left(done, self.total, self.first, now, self.unit)):
            line += f", {rate}"
        print(line, file=self.stream, flush=True)
        self.lines += 1


@contextlib.contextmanager
def shown(stage: str, total: int, unit: str, options: PipelineOptions, every_s: float | None = None) -> Iterator[None]:
    """Prints the progress of the pipeline run inside the block: ``total`` units, counted by ``advance``.

    Only on the local runner (``options.runs_locally``), and only while some but not all units are done; a final
    line with the elapsed time follows when the block succeeds after at least one line. Lines go to the
    terminal's stderr (``commands.console``): every ``TERMINAL_S`` seconds on a terminal, at the log's pace
    (``pace.Pace``: 30 s or 5 %) otherwise.

    Args:
        stage: the line's prefix.
        total: the units the run will complete, from the upstream's listing.
        unit: their name, plural ("files").
        options: the pipeline's options.
        every_s: seconds between lines (a terminal's, or a log's at most); default ``TERMINAL_S`` or 30 s.
    """
    if not runs_locally(options):
        yield
        return
    folder = tempfile.mkdtemp(prefix=f"progress-{stage}-")
    previous = os.environ.get(ENV)
    os.environ[ENV] = folder
    stream, start = console(), time.monotonic()
    if getattr(stream, "isatty", lambda: False)():  # a redirected stderr, or a stand-in without the method
        period = TERMINAL_S if every_s is None else every_s
        pace, look_s = Pace(total, start, every_s=period, every_fraction=None), period
    else:
        pace = Pace(total, start) if every_s is None else Pace(total, start, every_s=every_s)
        look_s = min(LOOK_S, pace.every_s)
    reporter = _Reporter(stage, total, unit, folder, pace, look_s, stream)
    reporter.start()
    try:
        yield
        reporter.stop.set()
        reporter.join()
        if reporter.lines:
            reporter.report(_done(folder), time.monotonic(), final=True)
    finally:
        reporter.stop.set()
        reporter.join()
        if previous is None:
            del os.environ[ENV]
        else:
            os.environ[ENV] = previous
        shutil.rmtree(folder, ignore_errors=True)
