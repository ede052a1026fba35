"""Where the instances stage's CPU goes at dupe_factor 1: each step of its DoFn against raw SentencePiece encoding.

Run: ``python bench/instances_steps.py --workdir DIR [--rounds 3] [--results bench/results]`` once
``python bench/pipeline.py --workdir DIR`` has built DIR's 10x copy (``sentences-x10``) and vocabulary (or name
them with ``--sentences`` and ``--spiece``).

bench/pipeline.py's ``encode_cost_d1`` says how far the stage's per-token cost is from raw encoding; this says
where the difference goes. In this one process, the stage's DoFn (``instances._BuildShardsFn``, run as ``Counted``
runs it, writing real shards to a temporary folder) builds every file's shards at params.yaml's knobs with
dupe_factor 1 and validation_dupe_factor 1 (as bench/pipeline.py's d1 runs), a group of files at a time as a
worker does, and each step's CPU time is recorded without the steps it calls. After each group, raw ``sp.encode``
(bench/pipeline.py's denominator: one call per file, one thread, CPython's collector paused) encodes the same
sentences, so stage and raw are timed within seconds of each other: this machine's speed drifts by ~10 % over
minutes. A first pass over one group warms up (numba loads its cached code) and is not counted. No Beam runner:
its per-element cost is in bench/pipeline.py's runs only.

Each step's ratio is its CPU-s ÷ raw encode's CPU-s on the same files; the steps together are the whole DoFn, so
``loop_encode_cost_d1`` = raw ÷ their sum, and the ratios of the steps other than ``tokenise`` add up to what the
stage spends beyond tokenising.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import functools
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import measure
from pipeline import file_sentences, raw_encode, timed_encode

from pipelines import instances
from pipelines.algorithms.vocab_layout import spiece_from_proto
from pipelines.contracts import manifest, shards
from pipelines.contracts.documents import finished_files
from pipelines.runtime import files, stage
from pipelines.runtime.params import load_params

# step: (owner, attribute, what it does). The DoFn's own lines (grouping, ids, splits, counters) are "rest".
STEPS = {
    "read": (files, "read_parquet", "reading the sentence files (Parquet)"),
    "tokenise": (instances, "_encode_ids", "SentencePiece encoding, the stage's call of it"),
    "encode_arrays": (instances._BuildShardsFn, "_encode", "flattening sentences for it and laying out its ids"),
    "held_out_hash": (instances, "stable_hashes64", "hashing document ids for the held-out split"),
    "plan_pairs": (instances, "plan_pairs", "drawing the sentence pairs and their keys (seed hashes included)"),
    "build": (instances, "build_planned", "laying the pairs out and masking them"),
    "tables": (instances, "_table", "the rows as Arrow tables"),
    "write": (shards.ShardWriter, "write_shard", "Arrow IPC batches, sha256 and the atomic file writes"),
}
REST = "rest"


class StepTimer:
    """CPU time of each step, exclusive of the timed steps it calls (the open steps are a stack)."""

    def __init__(self) -> None:
        self.cpu_s: collections.Counter[str] = collections.Counter()
        self._open: list[list] = []  # [start, CPU-s of the timed steps called]

    @contextlib.contextmanager
    def step(self, name: str) -> Iterator[None]:
        frame = [time.process_time(), 0.0]
        self._open.append(frame)
        try:
            yield
        finally:
            self._open.pop()
            spent = time.process_time() - frame[0]
            self.cpu_s[name] += spent - frame[1]
            if self._open:
                self._open[-1][1] += spent

    def timed(self, name: str, fn: Callable) -> Callable:
        @functools.wraps(fn)
        def run(*args, **kwargs):
            with self.step(name):
                return fn(*args, **kwargs)

        return run


@contextlib.contextmanager
def steps_timed(timer: StepTimer) -> Iterator[None]:
    """Wraps every ``STEPS`` function in ``timer`` while the block runs."""
    saved = [(owner, name, getattr(owner, name)) for owner, name, _ in STEPS.values()]
    try:
        for step, (owner, name, original) in zip(STEPS, saved, strict=True):
            setattr(owner, name, timer.timed(step, original))
        yield
    finally:
        for owner, name, original in saved:
            setattr(owner, name, original)


def one_round(sentences: Path, spiece: str, params: Path) -> dict:
    """Builds every shard of ``sentences`` once at ``params``'s knobs and dupe_factor 1, timing each step, and
    raw-encodes each group after it."""
    knobs = {**load_params(params, "instances"), "dupe_factor": 1, "validation_dupe_factor": 1}
    config = instances.InstancesConfig(**knobs)
    sp = spiece_from_proto(files.read_bytes(spiece), spiece)
    inputs = finished_files(str(sentences), "sentences")
    schema = manifest.shard_schema(sp.get_piece_size(), config.max_seq_length)
    groups = instances._groups(inputs)
    timer, raw_cpu_s, tokens, busy = StepTimer(), 0.0, 0, measure.busy_cpu_s()
    own, wall = time.process_time(), time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="instances-steps-") as folder, steps_timed(timer):
        outputs = instances._outputs(config, folder, None, len(inputs), schema)
        fn = stage._TallyingDoFn(instances._BuildShardsFn(instances.VocabSource.find(spiece), outputs))
        fn.setup()
        list(fn.process(groups[0]))  # a warm-up, not counted: numba loads its cached code at the first calls
        timer.cpu_s.clear()
        for group in groups:
            with timer.step(REST):
                list(fn.process(group))
            texts = [file_sentences(path) for _, path in group]
            encoded, _, cpu_s = timed_encode(functools.partial(raw_encode, sp), texts, collector=False)
            tokens, raw_cpu_s = tokens + encoded, raw_cpu_s + cpu_s
    other = measure.other_cores(busy, time.process_time() - own, time.perf_counter() - wall)
    return {"files": len(inputs), "tokens": tokens, "raw_cpu_s": raw_cpu_s, "steps_cpu_s": dict(timer.cpu_s),
            "other_cores": other}  # fmt: skip


def ratios(runs: list[dict]) -> dict[str, dict]:
    """Each step's CPU-s ÷ raw encode's (medians over the rounds, and each round's own), then raw ÷ the sum."""
    raw = statistics.median(r["raw_cpu_s"] for r in runs)
    found = {}
    for step, (*_, does) in [*STEPS.items(), (REST, (None, None, "the DoFn's own lines around the steps"))]:
        cpu = [r["steps_cpu_s"].get(step, 0.0) for r in runs]
        found[step] = measure.ratio(
            statistics.median(cpu), raw, f"CPU-s {does} ÷ raw sp.encode's on the same files",
            [c / r["raw_cpu_s"] for c, r in zip(cpu, runs, strict=True)],
        )  # fmt: skip
    totals = [sum(r["steps_cpu_s"].values()) for r in runs]
    found["loop_encode_cost_d1"] = measure.ratio(
        raw, statistics.median(totals), "raw sp.encode CPU-s ÷ the DoFn's CPU-s over the same files at "
        "dupe_factor 1 (every step above; no Beam runner, no start-up): bench/pipeline.py's encode_cost_d1 without "
        "the runner", [r["raw_cpu_s"] / t for r, t in zip(runs, totals, strict=True)],
    )  # fmt: skip
    return found


def table(found: dict[str, dict], runs: list[dict]) -> list[str]:
    files_counted = runs[0]["files"]
    lines = [f"{'step':<16}{'ms/file':>9}{'÷ raw':>8}  rounds"]
    for step in [*STEPS, REST]:
        r = found[step]
        per_file = r["numerator"] * 1000 / files_counted
        spread = f"{r['rounds']['min']:.3f}-{r['rounds']['max']:.3f}"
        lines.append(f"{step:<16}{per_file:>9.2f}{r['value']:>8.3f}  {spread}")
    beyond = sum(found[s]["value"] for s in [*STEPS, REST] if s != "tokenise")
    raw_ms = found["tokenise"]["denominator"] * 1000 / files_counted
    lines.append(f"{'raw encode':<16}{raw_ms:>9.2f}{1:>8.3f}")
    lines.append(f"beyond tokenising: {beyond:.3f} of raw encode; loop_encode_cost_d1 = "
                 f"{found['loop_encode_cost_d1']['value']:.3f}")  # fmt: skip
    return lines


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", type=Path, help="bench/pipeline.py's --workdir: its sentences-x10 and vocab")
    parser.add_argument("--sentences", type=Path, help="segment-stage folder (default: WORKDIR/sentences-x10)")
    parser.add_argument("--spiece", type=Path, help="spiece.model (default: WORKDIR/vocab/spiece.model)")
    parser.add_argument("--params", type=Path, default=measure.REPO / "params.yaml", help="instances knobs")
    parser.add_argument("--rounds", type=int, default=3, help="passes over every file")
    parser.add_argument("--results", type=Path, default=measure.REPO / "bench" / "results", help="output folder")
    args = parser.parse_args(argv)
    if args.workdir is None and (args.sentences is None or args.spiece is None):
        parser.error("give --workdir, or both --sentences and --spiece")
    args.sentences = args.sentences or args.workdir / "sentences-x10"
    args.spiece = args.spiece or args.workdir / "vocab" / "spiece.model"
    return args


def main(argv: list[str] | None = None) -> dict[str, dict]:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    runs = []
    for r in range(args.rounds):
        print(f"round {r + 1}/{args.rounds} ...", file=sys.stderr)
        runs.append(one_round(args.sentences, str(args.spiece), args.params))
    found, load = ratios(runs), max(r["other_cores"] for r in runs)
    lines = table(found, runs)
    print("\n".join(lines))
    figures = {"runs": runs, "table": lines}
    paths = measure.write_results(args.results, "instances_steps", figures, found, load, lines[-1:])
    print(f"wrote {paths[0]} and {paths[1]}")
    return found


if __name__ == "__main__":
    main()
