"""What every Beam stage does the same way: declare its counters, run, and own its output folder.

- A stage declares each step's counters once, by name (``Counters``); ``run_and_count`` reports exactly those
  names, 0 when never incremented, so a stats file or manifest has fixed keys for ``dvc metrics diff``.
- ``owning_outputs`` clears what an earlier run of the stage left in its folder, its finished-marker (stats or
  manifest file) first, so a half-cleared folder is never taken for a finished one, and clears it again when
  this run fails. The marker is written last, inside the block, by the stage.

A stage reads its upstream files through the upstream's contract: ``documents.finished_files`` for the text
stages, ``shards.Manifest`` for the shard folder.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence

import apache_beam as beam
from apache_beam.metrics import Metrics
from apache_beam.metrics.metric import MetricsFilter

from pipelines import files

__all__ = ["Counters", "owning_outputs", "run_and_count"]


class Counters:
    """A step's counters, declared once by name; an undeclared name is a KeyError, not a silent new counter.

    Picklable, so a DoFn or a function run on Beam workers holds one and calls ``inc``.
    """

    def __init__(self, namespace: str, *names: str) -> None:
        self.namespace, self.names = namespace, names
        self._counters = {name: Metrics.counter(namespace, name) for name in names}

    def inc(self, name: str, value: int = 1) -> None:
        self._counters[name].inc(value)


def run_and_count(pipeline: beam.Pipeline, *counters: Counters) -> dict[str, int]:
    """Runs ``pipeline`` to completion; returns the ``counters``' totals by name (summed over steps), sorted."""
    result = pipeline.run()
    result.wait_until_finish()
    totals = {name: 0 for c in counters for name in c.names}
    query = MetricsFilter().with_namespaces([c.namespace for c in counters])
    for counter in result.metrics().query(query)["counters"]:
        value = counter.committed if counter.committed is not None else counter.attempted
        totals[counter.key.metric.name] += int(value or 0)
    return dict(sorted(totals.items()))


@contextlib.contextmanager
def owning_outputs(folder: str, marker: str, patterns: Sequence[str]) -> Iterator[None]:
    """Clears ``marker``, then every file ``patterns`` match and any temporary file in ``folder``, before the
    block and again if it raises: the folder holds one finished run or none."""
    everything = [marker, *patterns, ".tmp-*"]
    files.delete_matching(folder, everything)
    try:
        yield
    except BaseException:
        files.delete_matching(folder, everything)
        raise
