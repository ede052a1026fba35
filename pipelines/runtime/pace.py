"""When a progress line is due in a log, and how its rate and time left read: one rule for the Beam stages' lines
(``progress``) and the pretraining run's (``albert_lightning.pretraining.progress_bar``).

A terminal shows a live bar or a line every few seconds; a log (``dvc repro > log 2>&1``, a CI job, a batch
scheduler) keeps every line, so there a line is due only once ``EVERY_S`` seconds have passed since the last one
or once another ``EVERY_FRACTION`` of the work is done, whichever comes first: at most 20 lines for the fractions
plus one per ``EVERY_S``. Neither Beam nor torch: ``fit`` imports this on machines that have no Beam.
"""

from __future__ import annotations

__all__ = ["EVERY_FRACTION", "EVERY_S", "Pace", "clock", "rate_and_left"]

EVERY_S = 30.0
EVERY_FRACTION = 0.05


class Pace:
    """Says whether a line is due, for ``total`` units of work started at time ``start`` (seconds, any clock).

    Args:
        total: the units the work will complete.
        start: the time the work started: the first period counts from it.
        every_s: a line is due once this many seconds have passed since the last line.
        every_fraction: a line is due once ``done`` reaches the next multiple of this fraction of ``total``;
            None: by time only (a terminal's line every few seconds).
    """

    def __init__(self, total: int, start: float, every_s: float = EVERY_S,
                 every_fraction: float | None = EVERY_FRACTION) -> None:  # fmt: skip
        self.total, self.every_s, self.every_fraction = max(total, 1), every_s, every_fraction
        self.last, self.mark = start, 0

    def _mark(self, done: int) -> int:
        """How many whole ``every_fraction`` parts of the total ``done`` has reached."""
        return int(done * (1 / self.every_fraction) // self.total) if self.every_fraction else 0

    def due(self, done: int, now: float) -> bool:
        """Whether a line is due at ``done`` units and time ``now``; when it is, the next one counts from here."""
        mark = self._mark(done)
        if mark <= self.mark and now - self.last < self.every_s:
            return False
        self.last, self.mark = now, mark
        return True


def clock(seconds: float) -> str:
    """``seconds`` as ``m:ss``, or ``h:mm:ss`` from an hour on."""
    minutes, seconds = divmod(round(seconds), 60)
    return f"{minutes // 60}:{minutes % 60:02d}:{seconds:02d}" if minutes >= 60 else f"{minutes}:{seconds:02d}"


def rate_and_left(done: int, total: int, since: tuple[float, int], now: float, unit: str) -> str:
    """``35 files/s, 0:34 left``: the rate from ``since`` (a time and the units done then) to ``now``, and the time
    the rest takes at that rate; "" before any unit was done after ``since``."""
    elapsed, gained = now - since[0], done - since[1]
    if gained <= 0 or elapsed <= 0:
        return ""
    rate = gained / elapsed
    shown = f"{rate:,.0f}" if rate >= 10 else f"{rate:.2g}"
    return f"{shown} {unit}/s, {clock(max(total - done, 0) / rate)} left"
