"""What every Beam stage does the same way: count what it drops and run on any runner.

- A stage declares each step's counters once, by name (``Counters``), and applies each step that counts through
  ``Counted``. The counts travel as data, not as runner metrics (the Dask runner has none): every call of the
  step's code fills a fresh tally that goes out beside its outputs, the pipeline's last step sums the tallies and
  writes them to a temporary file in the output folder, and ``run_and_count`` reads it back. It reports exactly
  the declared names, 0 when never incremented, so a stats file or manifest has fixed keys for
  ``dvc metrics diff``. A retried bundle's tallies are dropped with its outputs, so nothing counts twice.
- ``Smallest`` is ``beam.combiners.Top.Smallest`` as a plain combine, because the Dask runner drops what
  ``finish_bundle`` emits, which Top's usual path relies on (its result there is an empty list).
- No stage uses side inputs, nor a combine's default for an empty input (which Beam builds from one): the Dask
  runner computes a side input again, with its whole upstream, inside every task that reads it, and the values
  came out wrong, elements twice (Beam 2.77's Dask ParDo never clears the list it collects outputs in, so a step
  object run twice returns its first run's outputs again). Global values reach the elements through a join
  (``CoGroupByKey``) instead.
- Its output folder is ``outputs``'s: checked, then cleared, before the stage writes.

A stage reads its upstream files through the upstream's contract: ``documents.finished_files`` for the text
stages, ``manifest.Manifest`` for the shard folder.
"""

from __future__ import annotations

import collections
import contextlib
import json
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import apache_beam as beam
from apache_beam.pipeline import AppliedPTransform, PipelineVisitor
from apache_beam.transforms.combiners import TopCombineFn

from pipelines.runtime import files

__all__ = [
    "COUNTS_FILE",
    "Counted",
    "Counters",
    "GatherAndWrite",
    "Smallest",
    "run_and_count",
    "run_and_count_each",
    "sum_counts",
]

COUNTS_FILE = ".tmp-counts.json"  # in the ``.tmp-*`` names ``owning_outputs`` clears, so a failed run leaves none
_FILLING = threading.local()  # .tallies: the tallies being filled on this thread, innermost last


class Counters:
    """A step's counters, declared once by name; an undeclared name is a KeyError, not a silent new counter.

    Picklable (names only), so a DoFn or a function run on Beam workers holds one and calls ``inc`` while
    ``Counted`` runs it.
    """

    def __init__(self, namespace: str, *names: str) -> None:
        self.namespace, self.names = namespace, names

    def inc(self, name: str, value: int = 1) -> None:
        if name not in self.names:
            raise KeyError(f"{self.namespace}: counter {name!r} is not declared ({', '.join(self.names)})")
        tallies = getattr(_FILLING, "tallies", None)
        if not tallies:  # the count would be lost without a word
            raise RuntimeError(f"{self.namespace}.{name} counted outside a step applied through stage.Counted")
        if value:
            tallies[-1][self.namespace, name] += value


class _Tally(collections.Counter):
    """(namespace, name) → count: what one call of a counted step counted; a type of its own among the outputs."""


@contextlib.contextmanager
def _filling(tally: _Tally) -> Iterator[None]:
    tallies = _FILLING.__dict__.setdefault("tallies", [])
    tallies.append(tally)
    try:
        yield
    finally:
        tallies.pop()


class _TallyingDoFn(beam.DoFn):
    """Runs a step's DoFn with a fresh tally per element; yields the DoFn's outputs, then the tally if not empty."""

    def __init__(self, fn: beam.DoFn) -> None:
        self._fn = fn

    def setup(self) -> None:
        self._fn.setup()

    # *args and **kwargs (the side inputs) unannotated: Beam reads annotations as type hints and rejects Any there.
    def process(self, element: Any, *args, **kwargs) -> Iterator[Any]:
        tally, outputs, done = _Tally(), None, object()
        while True:
            # The tally is active only while the step's own code runs, not while downstream steps (fused on this
            # thread) handle an output; a generator's code runs inside next().
            with _filling(tally):
                outputs = iter(self._fn.process(element, *args, **kwargs) or ()) if outputs is None else outputs
                output = next(outputs, done)
            if output is done:
                break
            yield output
        if tally:
            yield tally

    def teardown(self) -> None:
        self._fn.teardown()


def _is_tally(element: Any) -> bool:
    return isinstance(element, _Tally)


def _is_output(element: Any) -> bool:
    return not isinstance(element, _Tally)


class Counted(beam.PTransform):
    """Applies ``step`` (a ``beam.ParDo``, ``Map``, ``FlatMap`` or ``Filter``) so that what its code counts with
    ``Counters.inc`` travels as data; returns the step's outputs.

    The tallies are one PCollection with the outputs, split by type, not a tagged output: the Dask runner hands
    every tag of a ParDo to every consumer. They end in a PCollection no step reads, which ``run_and_count``
    finds. The step's DoFn may use ``setup``/``teardown`` and side inputs, not the bundle methods nor DoFn
    parameters such as ``DoFn.TimestampParam``.
    """

    def __init__(self, step: beam.ParDo) -> None:
        super().__init__()
        self._fn = _TallyingDoFn(step.fn)
        self._args, self._kwargs = step.raw_side_inputs

    def expand(self, pcoll: beam.PCollection) -> beam.PCollection:
        both = pcoll | "CountingStep" >> beam.ParDo(self._fn, *self._args, **self._kwargs)
        _ = both | "Tallies" >> beam.Filter(_is_tally)
        return both | "Outputs" >> beam.Filter(_is_output)


class Smallest(beam.PTransform):
    """The ``n`` smallest elements (by ``key``) as one ascending list, or nothing for an empty input:
    ``beam.combiners.Top.Smallest`` on every runner. A combine, so Beam's local runner and Dataflow keep O(n) per
    bundle; the Dask runner, which does not combine before grouping, holds the whole input on one worker."""

    def __init__(self, n: int, key: Callable[[Any], Any] | None = None) -> None:
        super().__init__()
        self._n, self._key = n, key

    def expand(self, pcoll: beam.PCollection) -> beam.PCollection:
        top = TopCombineFn(self._n, self._key, reverse=True)
        return pcoll | "TopCombine" >> beam.CombineGlobally(top).without_defaults()


class _Leaves(PipelineVisitor):
    """The PCollections no step reads: the stage's final outputs and every ``Counted`` step's tallies."""

    def __init__(self) -> None:
        self.outputs: list[beam.PCollection] = []
        self.read: set[int] = set()

    def visit_transform(self, applied: AppliedPTransform) -> None:
        self.outputs += [p for p in applied.outputs.values() if isinstance(p, beam.PCollection)]
        self.read.update(id(p) for p in applied.inputs)
        self.read.update(id(s.pvalue) for s in applied.side_inputs)

    def leaves(self) -> list[beam.PCollection]:
        return [p for p in self.outputs if id(p) not in self.read]


def _sum_tallies(tallies: Iterable[collections.Counter]) -> collections.Counter:
    total = collections.Counter()
    for tally in tallies:
        total.update(tally)
    return total


def _write_counts(total: collections.Counter, path: str) -> None:
    files.write_json_atomically(path, sorted([*key, n] for key, n in total.items()))


class GatherAndWrite(beam.PTransform):
    """PCollections → one value combined from all their elements (``keep`` ones alone, when given), handed to
    ``write(value, *args)`` once, also when they are empty.

    An ``empty`` element joins them, so the combine has a value without a combine default: Beam gives the
    default through a side input, which the Dask runner gets wrong, and this keeps it on the main path.
    """

    def __init__(
        self,
        combine: Callable[[Iterable[Any]], Any],
        empty: Any,
        write: Callable[..., None],
        *args: Any,
        keep: Callable[[Any], bool] | None = None,
    ) -> None:
        super().__init__()
        self._combine, self._empty, self._write, self._args, self._keep = combine, empty, write, args, keep

    def expand(self, pcolls: tuple[beam.PCollection, ...]) -> beam.PCollection:
        nothing = pcolls[0].pipeline | "Nothing" >> beam.Create([self._empty])
        gathered = (*pcolls, nothing) | "Gather" >> beam.Flatten()
        if self._keep is not None:
            gathered = gathered | "Keep" >> beam.Filter(self._keep)
        return (
            gathered
            | "Combine" >> beam.CombineGlobally(self._combine).without_defaults()
            | "Write" >> beam.Map(self._write, *self._args)
        )


def run_and_count(pipeline: beam.Pipeline, folder: str, *counters: Counters) -> dict[str, int]:
    """Runs ``pipeline`` to completion; returns the ``counters``' totals by name (summed over steps), sorted.

    Adds the pipeline's last step, which reads every leaf (so the Dask runner, which computes only the last
    step and what it reads, runs them all) and writes the counts to ``folder``/``COUNTS_FILE``; reads and
    deletes that file after the run.

    Raises:
        RuntimeError: when the run ended without writing the counts (a runner that skipped the last step).
    """
    return _totals(_run_and_tally(pipeline, folder), counters)


def run_and_count_each(pipeline: beam.Pipeline, folder: str, *counters: Counters) -> list[dict[str, int]]:
    """``run_and_count``, with each of ``counters`` totalled apart: one dict per ``Counters``, in their order (a
    step that fills several outputs counts each under a namespace of its own)."""
    tally = _run_and_tally(pipeline, folder)
    return [_totals(tally, [c]) for c in counters]


def _run_and_tally(pipeline: beam.Pipeline, folder: str) -> list[tuple[str, str, int]]:
    path = files.join(folder, COUNTS_FILE)
    visitor = _Leaves()
    pipeline.visit(visitor)
    # Every leaf → the sum of the tallies among them, written to ``path`` as [namespace, name, count] rows.
    write = GatherAndWrite(_sum_tallies, _Tally(), _write_counts, path, keep=_is_tally)
    _ = tuple(visitor.leaves()) | "WriteCounts" >> write
    result = pipeline.run()
    try:
        result.wait_until_finish()
    finally:
        client = getattr(result, "client", None)  # the Dask runner opens a client per pipeline and leaves it open
        if client is not None:
            client.close()
    if not files.exists(path):
        raise RuntimeError(f"{path}: the pipeline finished without writing its counts; did the runner skip a step?")
    rows = json.loads(files.read_bytes(path))
    files.delete_if_exists(path)
    return rows


def _totals(rows: list[tuple[str, str, int]], counters: Sequence[Counters]) -> dict[str, int]:
    """The declared names of ``counters`` (0 when never counted), each summed over their namespaces, sorted."""
    declared = {(c.namespace, name) for c in counters for name in c.names}
    totals = {name: 0 for c in counters for name in c.names}
    for namespace, name, n in rows:
        if (namespace, name) in declared:
            totals[name] += n
    return dict(sorted(totals.items()))


def sum_counts(counts: Iterable[dict[str, int]]) -> dict[str, int]:
    """Named counts summed name by name: a ``CombineGlobally`` function (its result is one of its inputs' kind)."""
    total: dict[str, int] = {}
    for count in counts:
        for name, value in count.items():
            total[name] = total.get(name, 0) + value
    return total
