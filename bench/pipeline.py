"""Benchmarks the instances stage against its targets (bench/README.md), on the embedded default corpus.

Run: ``python bench/pipeline.py [--workdir DIR] [--dupe_factor N] [--rounds 3] [--results bench/results]`` from
anywhere (with the project installed, ``pip install -e .``). It builds corpus → segment → vocab once with
params.yaml's values (kept in ``--workdir`` between runs) and a copy of the sentences ten times larger (the same
documents under ids ``{id}#k``), then runs each setting below in its own subprocess, ``--rounds`` times,
interleaved (every setting once per round), and reports medians and spread ((max − min) / median):

- ``{1x,10x}-w{1,2}``: the stage at params.yaml's dupe_factor D (each document is encoded once and its tokens
  *written* D times, in D differently masked and paired copies) with
  ``--direct_running_mode=multi_processing --direct_num_workers`` 1 and 2;
- ``{1x,10x}-d1``: the stage at dupe_factor 1 and validation_dupe_factor 1 (params.yaml's 4 would write the
  held-out tenth of the documents four times) and ``--direct_num_workers 1``: each document encoded once and
  written once, by one worker run as the stage runs it (in-process: a worker process of its own shares nothing);
- ``{1x,10x}-d1-mp``: the same with ``--direct_running_mode=multi_processing``, one SDK worker process beside
  the runner's (the basis of the figures before). Its fixed cost is larger at 1x than at 10x, so the 10x − 1x
  subtraction flatters this mode (docs/results.md, "History"); in-process runs match the stage's DoFn alone;
- ``encode``: raw ``sp.encode(texts, num_threads=1)`` of every sentence of the 10x copy, one call per sentence
  file, timed inside its process with CPython's collector paused: a call holds every list of ids it makes alive
  until it returns and the collector rescans them, a cost of the measurement that grows with the files' size,
  not of the tokenizer (docs/results.md, "The instances stage"). The same calls with the collector running are
  timed too, for ``encode_cost_d1_with_collector``, and one call over the 1x sentences, for
  ``encode_cost_d1_one_call`` (the two bases of the figures before). The 10x copy makes the sample as long as
  the stage's 10x run;
- ``reference``: the reference's algorithm (``bench/reference_instances.py``: google-research/albert
  ``create_pretraining_data.py`` in one process, without its TFRecord writing) on the first ``REFERENCE_FILES``
  1x sentence files at params.yaml's settings; its per-token rate does not depend on the corpus size.

Each run gives the wall time of ``instances.run()`` (timed inside the subprocess) and the CPU time of the whole
process tree (``os.wait4``: the stage's process and Beam's SDK workers, start-up included). The ratios, each
stored with what it divides (``bench/measure.py``):

1. ``encode_cost_d1`` (target ≥ 0.8): the stage's encoded tokens per CPU-second at dupe_factor 1, one worker,
   with the fixed cost removed (the difference between the 10x and 1x runs) ÷ raw encode's tokens per CPU-second;
   also with the worker in a process of its own (``encode_cost_d1_multiprocess``), from wall time, over the whole
   10x run (fixed cost included), against the calls with the collector running, and
   ``encode_cost_d1_vs_stage_encode`` against the stage's own tokenisation (SentencePiece's int32 buffers), which
   leaves only what the stage adds to encoding;
2. ``written_per_cpu_s_{x}``: tokens written (manifest counter ``tokens``) at dupe_factor D per CPU-second of
   the tree at one worker; and ``written_vs_encoded_{x}``: tokens written per wall-second per worker ÷ raw
   encode's tokens encoded per wall-second. The old "0.84 of raw encode" (docs/results.md, History) was this:
   D copies written over one encoded, so it can exceed 1 and is not a per-token cost;
3. ``speedup_{x}``: wall at 1 worker ÷ wall at 2 (target ≥ 1.7 on the 10x copy, where there is work to share),
   and the bound the tree's CPU time puts on it (CPU-s at 1 worker ÷ half the CPU-s at 2);
4. ``vs_reference_10x`` (target ≥ 30): the stage's tokens written per CPU-second at dupe_factor D on the 10x copy
   (one worker, start-up included) ÷ the reference's per CPU-second of its loop (its imports and start-up not
   counted, nor TFRecord writing: both favour the reference);
5. ``memory_ratio`` (target ≤ 1.2): peak summed RSS of the tree (psutil, every 0.2 s) at 10x ÷ at 1x, 2 workers,
   the highest over the rounds; Linux's ``ru_maxrss`` is the largest single process, printed beside it.

A fit over 1x and 10x at one worker splits ``run()`` into a fixed cost (runner set-up, SDK worker start-up and
imports, teardown) and a per-token rate. Timings are meaningful only on an otherwise idle machine: each run
records the cores other processes used meanwhile (``busy_other``); when any exceeded a quarter of a core, no
verdict is printed, only the figures and the load. The targets' ratios are also taken round by round (from each
round's own runs, neighbours in time): the verdict is PASS or FAIL when every round agrees with the ratio of
medians, and MIXED when the rounds fall on both sides of the target, which is then within the machine's noise.
The figures go to ``pipeline.json`` and ``pipeline.md`` in ``--results``, with cores, load, date, git commit
and command line.
"""

from __future__ import annotations

import argparse
import functools
import gc
import hashlib
import json
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

import pyarrow.compute as pc
import sentencepiece as spm
import yaml

from pipelines import instances
from pipelines.algorithms.vocabulary import SentencePieceVocab
from pipelines.contracts.documents import SENTENCES_SCHEMA, file_index, file_name, files_for_bytes, table_from_rows
from pipelines.runtime import files

sys.path.insert(0, str(Path(__file__).resolve().parent))
import measure

REPO = Path(__file__).resolve().parents[1]
PARAMS = REPO / "params.yaml"
COPIES = 10  # the larger corpus for the memory target
PREREQ_PARAMS = ("seed", "beam_args", "corpus", "segment", "vocab")  # what corpus, sentences and vocab depend on
TARGETS = {
    "encode_cost_d1": (">=", 0.8),
    "vs_reference_10x": (">=", 30.0),
    "speedup_10x": (">=", 1.7),
    "memory_ratio": ("<=", 1.2),
}
REFERENCE_FILES = 6  # of the 1x copy's sentence files: ~35 CPU-s of the reference's loop at dupe_factor 16
REFERENCE_KNOBS = ("max_seq_length", "max_predictions_per_seq", "masked_lm_prob", "short_seq_prob", "ngram")
# label: (corpus copy, workers, dupe_factor or None for params.yaml's, Beam's running mode or None for the stage's
# choice); one round runs them in this order. The settings at dupe_factor 1 also hold out at validation_dupe_factor
# 1: every document written once. Worker counts are compared in one mode, so a worker is a process there.
MULTI = "multi_processing"
SETTINGS = {
    "1x-w1": ("1x", 1, None, MULTI),
    "1x-w2": ("1x", 2, None, MULTI),
    "10x-w1": ("10x", 1, None, MULTI),
    "10x-w2": ("10x", 2, None, MULTI),
    "1x-d1": ("1x", 1, 1, None),
    "10x-d1": ("10x", 1, 1, None),
    "1x-d1-mp": ("1x", 1, 1, MULTI),
    "10x-d1-mp": ("10x", 1, 1, MULTI),
}


def run_stage(stage: str, argv: list[str], log: Path) -> None:
    """Runs ``python -m pipelines.<stage> argv`` (the stage's run()), its Beam logs going to ``log``."""
    with open(log, "w") as out:
        done = subprocess.run([sys.executable, "-m", f"pipelines.{stage}", *argv], cwd=REPO, stdout=out, stderr=out)
    if done.returncode:
        raise SystemExit(f"{stage} failed ({done.returncode}); see {log}")


def inputs_fingerprint(params: dict, max_documents: int | None = None) -> str:
    """Returns a hash of what the prerequisite folders depend on: their params, the slice and the pipelines' code."""
    depends = {**{k: params.get(k) for k in PREREQ_PARAMS}, "max_documents": max_documents}
    digest = hashlib.sha256(json.dumps(depends, sort_keys=True).encode())
    for source in sorted((REPO / "pipelines").glob("*.py")):
        digest.update(source.read_bytes())
    return digest.hexdigest()


def prepare_corpus(work: Path, params: dict, max_documents: int | None = None) -> None:
    """Builds corpus, sentences and vocab under ``work`` with params.yaml's values.

    A kept ``--workdir`` is reused while those params and the pipelines' code are unchanged, rebuilt otherwise.
    ``max_documents`` takes that many embedded documents and a 2000-piece vocabulary: a smoke run's size.
    """
    stamp, fingerprint = work / "inputs.sha256", inputs_fingerprint(params, max_documents)
    few = [f"--embedded_max_documents={max_documents}"] if max_documents else []
    if not stamp.exists() or stamp.read_text() != fingerprint:
        for name in ("corpus", "sentences", "vocab", f"sentences-x{COPIES}"):
            shutil.rmtree(work / name, ignore_errors=True)
    beam_args = params["beam_args"].split()
    # Benchmarks of the stages alone, on segment's sentences: the 10x copy repeats every document, which dedup undoes.
    vocab_flags = ["--input", str(work / "sentences"), "--allow_undeduped", *(["--vocab_size=2000"] if few else [])]
    steps = [
        ("corpus", work / "corpus", few),
        ("segment", work / "sentences", ["--input", str(work / "corpus")]),
        ("vocab", work / "vocab", vocab_flags),
    ]
    for stage, output, inputs in steps:
        if (output / "stats.json").exists():
            continue
        print(f"building {stage} → {output}", file=sys.stderr)
        run_stage(stage, ["--params", str(PARAMS), *inputs, "--output", str(output), *beam_args], work / f"{stage}.log")
    stamp.write_text(fingerprint)


def build_copies(sentences: Path, corpus_stats: Path, output: Path, copies: int = COPIES) -> int:
    """Writes a valid segment-stage folder holding every document ``copies`` times (ids ``{id}#k``).

    The file count follows the corpus stage's rule (``files_for_bytes`` of the text bytes) and each document goes
    to ``file_index`` of its new id, so the instances stage sees what segment would have written. Returns n.
    """
    text_bytes = json.loads(corpus_stats.read_text())["counters"]["document_bytes"]
    num_files = files_for_bytes(copies * text_bytes)
    built = json.loads((output / "stats.json").read_text()) if (output / "stats.json").exists() else {}
    if "normalizer" in built and built["files"] == num_files:
        return num_files
    shutil.rmtree(output, ignore_errors=True)  # a copy laid out by an older rule
    buckets: dict[int, list[dict]] = defaultdict(list)
    for path in sorted(sentences.glob("sentences-*-of-*.parquet")):
        for row in files.read_parquet(str(path)).to_pylist():
            for k in range(copies):
                copy = {**row, "id": f"{row['id']}#{k}"}
                buckets[file_index(copy["id"], num_files)].append(copy)
    for index in range(num_files):
        table = table_from_rows(buckets[index], SENTENCES_SCHEMA)
        files.write_parquet_atomically(str(output / file_name("sentences", index, num_files)), table)
    # The segment stage's normaliser: the instances stage records it in the manifest (and refuses a folder without).
    normalizer = json.loads((sentences / "stats.json").read_text())["normalizer"]
    stats = {"files": num_files, "copies": copies, "normalizer": normalizer}
    files.write_json_atomically(str(output / "stats.json"), stats)
    return num_files


def run_instances(
    label: str,
    sentences: Path,
    work: Path,
    workers: int,
    dupe_factor: int,
    extra: tuple[str, ...] = (),
    mode: str | None = MULTI,
) -> dict:
    """Runs the instances stage in a subprocess (this file in ``--_child`` mode) and measures its process tree;
    ``mode``: Beam's direct_running_mode, None for the stage's own choice for ``workers``."""
    output, result, log = work / f"shards-{label}", work / f"result-{label}.json", work / f"instances-{label}.log"
    shutil.rmtree(output, ignore_errors=True)
    beam = [f"--direct_num_workers={workers}", *([f"--direct_running_mode={mode}"] if mode else [])]
    argv = ["--params", str(PARAMS), "--input", str(sentences), "--spiece", str(work / "vocab" / "spiece.model")]
    argv += ["--allow_undeduped"]  # segment's sentences and their 10x copy: timings of the stage alone
    argv += ["--output", str(output), "--dupe_factor", str(dupe_factor), *extra, *beam]
    tree = measure.run_tree([sys.executable, __file__, "--_child", str(result), *argv], log)
    if tree.returncode:
        raise SystemExit(f"instances ({label}) failed ({tree.returncode}); see {log}")
    measured = json.loads(result.read_text())
    shutil.rmtree(output, ignore_errors=True)
    return {
        "workers": workers, "dupe_factor": dupe_factor, "wall_s": measured["wall_s"], "process_s": tree.wall_s,
        "cpu_s": tree.cpu_s, "main_cpu_s": measured["main_cpu_s"], "tokens": measured["counters"]["tokens"],
        "instances": measured["counters"]["instances"], "sentence_files": measured["sentence_files"],
        "sdk_workers_seen": tree.sdk_workers, "maxrss_mb": tree.maxrss_mb,
        "main_maxrss_mb": measured["self_maxrss_kb"] / 1024, "tree_peak_mb": tree.tree_peak_mb,
        "other_cores": tree.other_cores,
    }  # fmt: skip


def child_main(result: str, argv: list[str]) -> None:
    """``--_child`` mode: times ``instances.run(argv)`` alone and writes what the parent needs to ``result``."""
    from pipelines import instances

    start, before = time.perf_counter(), resource.getrusage(resource.RUSAGE_SELF)
    manifest = instances.run(argv)
    wall_s = time.perf_counter() - start
    own = resource.getrusage(resource.RUSAGE_SELF)
    body = {
        "main_cpu_s": own.ru_utime + own.ru_stime - before.ru_utime - before.ru_stime,  # during run() only
        "wall_s": wall_s,
        "counters": manifest.counters,
        "sentence_files": len(manifest.split("train")),
        "self_maxrss_kb": own.ru_maxrss,
    }
    Path(result).write_text(json.dumps(body))


def file_sentences(path: str | Path) -> list[str]:
    """Every sentence of one segment-stage file, in order."""
    return pc.list_flatten(files.read_parquet(str(path), columns=["sentences"]).column("sentences")).to_pylist()


def _sentences(folder: str) -> list[list[str]]:
    """Every sentence of a segment-stage folder, one list per file."""
    return [file_sentences(path) for path in sorted(Path(folder).glob("sentences-*-of-*.parquet"))]


def raw_encode(sp: spm.SentencePieceProcessor, texts: list[str]) -> int:
    """Raw encoding, the benches' per-token baseline: ``sp.encode`` in one thread; returns the pieces made."""
    return sum(map(len, sp.encode(texts, num_threads=1)))


def timed_encode(
    encode: Callable[[list[str]], int], per_file: list[list[str]], collector: bool
) -> tuple[int, float, float]:
    """(tokens, wall-s, CPU-s) of ``encode`` over every file's sentences, CPython's collector paused unless
    ``collector``."""
    tokens, start, cpu = 0, time.perf_counter(), time.process_time()
    if not collector:
        gc.disable()
    try:
        for texts in per_file:
            tokens += encode(texts)
    finally:
        gc.enable()
    return tokens, time.perf_counter() - start, time.process_time() - cpu


def encode_main(result: str, sentences: str, spiece: str, one_call: str) -> None:
    """``--_encode`` mode: times single-thread ``sp.encode`` over the sentences of each file of ``sentences`` with
    the collector paused, then running; the stage's own encoding of them; then one call over all of
    ``one_call``'s."""
    per_file = _sentences(sentences)
    sp = spm.SentencePieceProcessor(model_file=spiece)
    raw = functools.partial(raw_encode, sp)
    vocab = SentencePieceVocab(Path(spiece).read_bytes(), spiece)

    def stage_encode(texts: list[str]) -> int:
        # The stage's own tokenisation (SentencePiece's int32 buffers, no Python int per piece), as it runs it.
        return len(instances._encode_ids(vocab, texts)[0])

    tokens, wall_s, cpu_s = timed_encode(raw, per_file, collector=False)
    collector_tokens, _, collector_cpu_s = timed_encode(raw, per_file, collector=True)

    stage_tokens, _, stage_encode_cpu_s = timed_encode(stage_encode, per_file, collector=True)
    assert tokens == collector_tokens == stage_tokens, "the stage's encoding differs from sp.encode"
    counts = {"files": len(per_file), "sentences": sum(map(len, per_file))}
    per_file.clear()  # the one call's sentences take their place
    texts = [text for file in _sentences(one_call) for text in file]
    one_call_cpu = time.process_time()
    one_call_tokens = raw(texts)
    one_call_cpu_s = time.process_time() - one_call_cpu
    body = {**counts, "tokens": tokens, "wall_s": wall_s, "cpu_s": cpu_s, "collector_cpu_s": collector_cpu_s,
            "stage_encode_cpu_s": stage_encode_cpu_s, "one_call_tokens": one_call_tokens,
            "one_call_cpu_s": one_call_cpu_s}  # fmt: skip
    Path(result).write_text(json.dumps(body))


def run_encode(work: Path, sentences: Path, one_call: Path) -> dict:
    """Runs ``encode_main`` in a subprocess, so it is measured (and loaded) as the stage's runs are."""
    result, spiece = work / "result-encode.json", work / "vocab" / "spiece.model"
    command = [sys.executable, __file__, "--_encode", str(result), str(sentences), str(spiece), str(one_call)]
    tree = measure.run_tree(command, work / "encode.log")
    if tree.returncode:
        raise SystemExit(f"raw encode failed ({tree.returncode}); see {work / 'encode.log'}")
    return {**json.loads(result.read_text()), "other_cores": tree.other_cores}


def run_reference(work: Path, sentences: Path, knobs: dict, dupe_factor: int) -> dict:
    """Runs ``bench/reference_instances.py`` on the first ``REFERENCE_FILES`` sentence files at the stage's
    settings, in a subprocess measured as the stage's runs are; ``cpu_s`` is its loop's alone."""
    result, log = work / "result-reference.json", work / "reference.log"
    command = [sys.executable, str(Path(__file__).with_name("reference_instances.py")), "--input", str(sentences)]
    command += ["--spiece", str(work / "vocab" / "spiece.model"), "--files", str(REFERENCE_FILES)]
    command += ["--result", str(result), "--dupe_factor", str(dupe_factor)]
    command += [f"--{k}={knobs[k]}" for k in REFERENCE_KNOBS]
    tree = measure.run_tree(command, log)
    if tree.returncode:
        raise SystemExit(f"the reference's algorithm failed ({tree.returncode}); see {log}")
    return {**json.loads(result.read_text()), "other_cores": tree.other_cores}


def combine(runs: list[dict]) -> dict:
    """One setting's rounds: medians and spread of the timings, the highest of the peaks and of the load."""
    timed = ("wall_s", "process_s", "cpu_s", "main_cpu_s", "collector_cpu_s", "stage_encode_cpu_s", "one_call_cpu_s")
    out = {k: v for k, v in runs[0].items() if k not in timed}
    out.update({k: measure.summary([r[k] for r in runs]) for k in timed if k in runs[0]})
    peaks = ("maxrss_mb", "main_maxrss_mb", "tree_peak_mb", "other_cores")
    out.update({k: max(r[k] for r in runs) for k in peaks if k in runs[0]})
    return {**out, "rounds": runs}


def measure_all(args: argparse.Namespace, work: Path) -> dict:
    """Runs every setting, interleaved over ``--rounds``, and returns each one's combined figures."""
    params = yaml.safe_load(PARAMS.read_text())
    dupe_factor = args.dupe_factor or params["instances"]["dupe_factor"]
    prepare_corpus(work, params, args.max_documents)
    folders = {"1x": work / "sentences", "10x": work / f"sentences-x{COPIES}"}
    # In a subprocess: reading every row makes a process large, and a child inherits its parent's peak RSS as
    # its own ru_maxrss (Linux folds the old address space's high-water mark in at exec), which would then
    # stand for every run's maxrss.
    copies = [sys.executable, __file__, "--_copies", str(folders["1x"]), str(work / "corpus" / "stats.json")]
    subprocess.run([*copies, str(folders["10x"])], check=True)

    def run(label: str) -> dict:
        if label == "encode":
            return run_encode(work, folders["10x"], folders["1x"])
        if label == "reference":
            return run_reference(work, folders["1x"], params["instances"], dupe_factor)
        size, workers, dupe, mode = SETTINGS[label]
        once = ("--validation_dupe_factor", "1") if dupe == 1 else ()
        return run_instances(label, folders[size], work, workers, dupe or dupe_factor, once, mode)

    rounds = measure.run_rounds([*SETTINGS, "encode", "reference"], args.rounds, run)
    return {"dupe_factor": dupe_factor, **{label: combine(runs) for label, runs in rounds.items()}}


def ratios(f: dict) -> dict[str, dict]:
    """The bench's ratios (of medians over the rounds), each with what it divides; the targets' also by round."""
    med = "median"
    e, d1, d10 = f["encode"], f["1x-d1"], f["10x-d1"]
    encoded = (e["tokens"] // COPIES, e["tokens"])  # tokens the stage encodes at 1x and 10x: each sentence once
    raw_cpu, raw_wall = e["tokens"] / e["cpu_s"][med], e["tokens"] / e["wall_s"][med]
    D = f["dupe_factor"]

    def encoded_per_cpu_s(small_cpu_s: float, large_cpu_s: float) -> float:
        """The stage's encoded tokens per CPU-s at dupe_factor 1, fixed cost removed (10x run − 1x run)."""
        return (encoded[1] - encoded[0]) / (large_cpu_s - small_cpu_s)

    stage_cpu = encoded_per_cpu_s(d1["cpu_s"][med], d10["cpu_s"][med])  # the numerator of several ratios

    def encode_cost(encode: dict, small: dict, large: dict) -> float:
        return encoded_per_cpu_s(small["cpu_s"], large["cpu_s"]) / (encode["tokens"] / encode["cpu_s"])

    def peak_ratio(large: dict, small: dict) -> float:
        return large["tree_peak_mb"] / small["tree_peak_mb"]

    out = {
        "encode_cost_d1": measure.ratio(
            stage_cpu, raw_cpu,
            "stage tokens encoded per CPU-s of the process tree at dupe_factor 1 (each document written once), "
            "1 worker (in-process, the stage's mode for one), fixed cost removed (10x − 1x runs) ÷ raw sp.encode "
            "tokens per CPU-s on the same sentences, one call per file, CPython's collector paused",
            by_round(f, ("encode", "1x-d1", "10x-d1"), encode_cost)),
        "encode_cost_d1_multiprocess": measure.ratio(
            encoded_per_cpu_s(f["1x-d1-mp"]["cpu_s"][med], f["10x-d1-mp"]["cpu_s"][med]), raw_cpu,
            "the same with the worker in a process of its own (multi_processing, 1 SDK worker): the basis of the "
            "figures before",
            by_round(f, ("encode", "1x-d1-mp", "10x-d1-mp"), encode_cost)),
        "encode_cost_d1_with_collector": measure.ratio(
            stage_cpu,
            e["tokens"] / e["collector_cpu_s"][med],
            "the same stage figure ÷ the same raw sp.encode calls with the collector running, which scans their "
            "lists of ids again and again: the basis of the figures before"),
        "encode_cost_d1_vs_stage_encode": measure.ratio(
            stage_cpu,
            e["tokens"] / e["stage_encode_cpu_s"][med],
            "the same stage figure ÷ tokens per CPU-s of the stage's own encoding (instances._encode_ids, "
            "SentencePiece's buffers): the stage's cost beyond its tokenisation"),
        "encode_cost_d1_one_call": measure.ratio(
            stage_cpu,
            e["one_call_tokens"] / e["one_call_cpu_s"][med],
            "the same stage figure ÷ raw sp.encode in one call over every 1x sentence, whose lists of ids all live "
            "until it returns (CPython's collector scans them again and again): the basis of older figures"),
        "encode_cost_d1_wall": measure.ratio(
            (encoded[1] - encoded[0]) / (d10["wall_s"][med] - d1["wall_s"][med]), raw_wall,
            "the same from wall time of run(): encoded tokens per wall-s (10x − 1x) ÷ raw encode per wall-s"),
        "encode_cost_d1_whole_10x": measure.ratio(
            encoded[1] / d10["cpu_s"][med], raw_cpu,
            "stage tokens encoded per CPU-s over the whole 10x run at dupe_factor 1 (start-up included) ÷ raw encode"),
        "vs_reference_10x": measure.ratio(
            f["10x-w1"]["tokens"] / f["10x-w1"]["cpu_s"][med], f["reference"]["tokens"] / f["reference"]["cpu_s"][med],
            f"stage tokens written per CPU-s of the process tree at dupe_factor {D}, 10x, 1 worker, start-up "
            "included ÷ the reference's algorithm in one process (bench/reference_instances.py) per CPU-s of its "
            f"loop, no TFRecord writing, on {REFERENCE_FILES} 1x files at the same settings",
            by_round(f, ("10x-w1", "reference"), lambda s, r: s["tokens"] / s["cpu_s"] / (r["tokens"] / r["cpu_s"]))),
        "memory_ratio": measure.ratio(f["10x-w2"]["tree_peak_mb"], f["1x-w2"]["tree_peak_mb"],
                                      "peak summed RSS of the process tree, 10x ÷ 1x, 2 workers",
                                      by_round(f, ("10x-w2", "1x-w2"), peak_ratio)),
        "maxrss_ratio": measure.ratio(f["10x-w2"]["maxrss_mb"], f["1x-w2"]["maxrss_mb"],
                                      "largest single process's ru_maxrss, 10x ÷ 1x, 2 workers"),
    }  # fmt: skip
    for x in ("1x", "10x"):
        w1, w2 = f[f"{x}-w1"], f[f"{x}-w2"]
        out[f"written_per_cpu_s_{x}"] = measure.ratio(
            w1["tokens"], w1["cpu_s"][med], f"tokens written at dupe_factor {D} (each encoded once, written {D} "
            "times) ÷ CPU-s of the process tree, 1 worker, start-up included")  # fmt: skip
        out[f"written_vs_encoded_{x}"] = measure.ratio(
            w1["tokens"] / w1["wall_s"][med], raw_wall, f"tokens written per wall-s of run() at dupe_factor {D}, "
            "1 worker ÷ raw sp.encode tokens encoded per wall-s: not a per-token cost")  # fmt: skip
        out[f"speedup_{x}"] = measure.ratio(
            w1["wall_s"][med], w2["wall_s"][med], "run() wall-s 1 worker ÷ 2 workers",
            by_round(f, (f"{x}-w1", f"{x}-w2"), lambda a, b: a["wall_s"] / b["wall_s"]))  # fmt: skip
        out[f"cpu_bound_speedup_{x}"] = measure.ratio(
            w1["cpu_s"][med], w2["cpu_s"][med] / 2, "tree CPU-s at 1 worker ÷ half the tree CPU-s at 2: the best "
            "2 cores could do with the CPU time each took, whatever else runs")  # fmt: skip
    return out


def by_round(f: dict, labels: tuple[str, ...], of: Callable[..., float]) -> list[float]:
    """``of`` each round's runs of ``labels`` (one run each, neighbours in the interleaved order)."""
    return [of(*runs) for runs in zip(*(f[label]["rounds"] for label in labels), strict=True)]


def scaling(f: dict) -> dict[str, float]:
    """Splits a run's wall time into a fixed cost and a per-token cost, from the 1x and 10x runs at 1 worker.

    wall = fixed_s + tokens / rate. The fixed cost (runner set-up, SDK worker start-up, shard read-back) does
    not shrink with more workers, so it bounds the 1x speed-up however well the work itself is spread.
    """
    small, large = f["1x-w1"], f["10x-w1"]
    t_small, t_large = small["wall_s"]["median"], large["wall_s"]["median"]
    rate = (large["tokens"] - small["tokens"]) / (t_large - t_small)
    fixed_s = t_small - small["tokens"] / rate
    two = f["1x-w2"]["wall_s"]["median"]
    return {
        "fixed_s": fixed_s,
        "work_tokens_per_s": rate,
        "speedup_1x_without_fixed": (t_small - fixed_s) / max(two - fixed_s, 1e-9),
    }


def table(f: dict) -> list[str]:
    """Returns the aligned table: one row per setting (medians over the rounds), then the raw encode row."""
    head = f"{'run':<7}{'w':>2}{'dupe':>5}{'files':>6}{'run_s':>7}{'spread':>7}{'proc_s':>7}{'cpu_s':>7}{'main_cpu':>9}"
    lines = [head + f"{'tokens':>12}{'tree_MB':>8}{'maxrss_MB':>10}{'main_MB':>8}{'sdk':>4}{'busy_other':>11}"]
    for label in SETTINGS:
        r = f[label]
        lines.append(
            f"{label:<7}{r['workers']:>2}{r['dupe_factor']:>5}{r['sentence_files']:>6}{r['wall_s']['median']:>7.2f}"
            f"{r['wall_s']['spread']:>7.2f}{r['process_s']['median']:>7.2f}{r['cpu_s']['median']:>7.2f}"
            f"{r['main_cpu_s']['median']:>9.2f}{r['tokens']:>12,}{r['tree_peak_mb']:>8.0f}{r['maxrss_mb']:>10.0f}"
            f"{r['main_maxrss_mb']:>8.0f}{r['sdk_workers_seen']:>4}{r['other_cores']:>11.2f}"
        )
    e = f["encode"]
    lines.append(f"{'encode':<7}{1:>2}{'':>5}{'':>6}{e['wall_s']['median']:>7.3f}{e['wall_s']['spread']:>7.2f}{'':>7}"
                 f"{e['cpu_s']['median']:>7.2f}{'':>9}{e['tokens']:>12,}{'':>30}{e['other_cores']:>11.2f}")  # fmt: skip
    r = f["reference"]
    lines.append(f"{'ref':<7}{1:>2}{f['dupe_factor']:>5}{r['files']:>6}{r['wall_s']['median']:>7.2f}"
                 f"{r['wall_s']['spread']:>7.2f}{'':>7}{r['cpu_s']['median']:>7.2f}{'':>9}{r['tokens']:>12,}{'':>30}"
                 f"{r['other_cores']:>11.2f}")  # fmt: skip
    lines += [
        "ref: the reference's algorithm in one process (bench/reference_instances.py), cpu_s its loop's alone",
        f"encode: sp.encode of the 10x copy's {e['sentences']:,} sentences, one call per file ({e['files']}), one "
        "thread, no specials, CPython's collector paused",
        "medians over the rounds; spread: (max − min) / median of run_s; run_s: instances.run() alone; proc_s: its",
        "whole subprocess; cpu_s: CPU time of its process tree; main_cpu: of which the stage's own process;",
        "tokens: written (manifest); tree_MB: peak summed RSS; maxrss_MB: largest process; main_MB: the stage's",
        "process; sdk: Beam SDK worker processes seen; busy_other: cores other processes used (the load)",
    ]
    return lines


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", type=Path, help="keeps the built corpus between runs (default: a temp dir)")
    parser.add_argument("--dupe_factor", type=int, help="override params.yaml's instances.dupe_factor")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds of every setting")
    parser.add_argument("--max_documents", type=int, help="smoke run: this many embedded documents, vocabulary 2000")
    parser.add_argument("--results", type=Path, default=REPO / "bench" / "results", help="pipeline.json/.md go here")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--_child"]:
        return child_main(argv[1], argv[2:])
    if argv[:1] == ["--_copies"]:
        build_copies(*map(Path, argv[1:4]))
        return None
    if argv[:1] == ["--_encode"]:
        return encode_main(*argv[1:5])
    args = parse_args(argv)
    work = args.workdir or Path(tempfile.mkdtemp(prefix="bench-pipeline-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        figures = measure_all(args, work.resolve())
    finally:
        if args.workdir is None:
            shutil.rmtree(work, ignore_errors=True)
    figures["scaling"], found = scaling(figures), ratios(figures)
    fit = figures["scaling"]
    print("\n".join(table(figures)))
    print(
        f"fit over 1x and 10x at 1 worker: run_s = {fit['fixed_s']:.2f} s fixed + tokens / "
        f"{fit['work_tokens_per_s']:,.0f} tok/s; 1x speed-up less the fixed cost {fit['speedup_1x_without_fixed']:.2f}x"
    )
    for name, r in found.items():
        print(f"{name} = {r['value']:.3g}: {r['divides']}")
    load = max(f["other_cores"] for f in figures.values() if isinstance(f, dict) and "other_cores" in f)
    lines = measure.verdicts(found, TARGETS, load)
    print("\n".join(lines))
    paths = measure.write_results(args.results, "pipeline", figures, found, load, lines)
    print(f"wrote {paths[0]} and {paths[1]}")


if __name__ == "__main__":
    main()
