"""Measures the dedup stage against its targets: its share of the data stages' CPU, and how it grows with the corpus.

Run: ``python bench/dedup.py [--data data] [--rounds 3] [--copies 10] [--results bench/results]`` from the
repository, after ``dvc repro segment`` (inputs: ``--data``'s corpus and sentences, read only; outputs go to a
temporary folder). ``--max_documents N`` is a smoke run: it first builds its own corpus and sentences from N
embedded documents in the temporary folder (and the corpus stage runs on N documents too).

Every stage runs as its command, ``python -m pipelines.<stage> --params params.yaml ...``, in a subprocess whose
whole process tree is measured (``measure.run_tree``: CPU time of the tree, Beam's SDK workers included, and the
peak of its summed RSS), ``--rounds`` interleaved rounds, medians. Ratios (targets in ``TARGETS``):

- ``dedup_share``: dedup's CPU ÷ the CPU of the data stages before pretraining (corpus, segment, dedup, vocab,
  instances, tasks), each in the Beam mode it chooses itself, as ``dvc repro`` runs them; vocab, instances and
  tasks read the dedup stage's output;
- ``cpu_10x``: dedup's CPU on a ``--copies``-fold copy of the sentences ÷ on the sentences. The copy is
  ``bench/pipeline.py``'s ``build_copies`` (ids ``{id}#k``, each re-bucketed with ``file_index``, the corpus
  stage's file count), then copy k > 0 has every word marked (``word`` → ``wordx3``): distinct text with the
  1x corpus's duplicate structure, so each copy does the work of the first;
- ``peak_rss_10x``: the dedup process tree's peak RSS on the copy ÷ on the sentences.

The two dedup runs of the scaling ratios pass ``--direct_running_mode=multi_processing`` with one worker per core,
so both sizes run in the same mode (a small input would otherwise run in-process and a large one in worker
processes, and the ratios would compare the modes). Results: ``dedup.json`` and ``dedup.md`` in ``--results``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import measure
from pipeline import build_copies

from pipelines.runtime import files

REPO = Path(__file__).resolve().parents[1]
PARAMS = REPO / "params.yaml"
STAGES = ("corpus", "segment", "dedup", "vocab", "instances", "tasks")  # one round, in data-flow order
TARGETS = {"dedup_share": ("<=", 0.25), "cpu_10x": ("<=", 11.0), "peak_rss_10x": ("<=", 1.2)}
SAME_MODE = ["--direct_running_mode=multi_processing", f"--direct_num_workers={os.cpu_count() or 1}"]


def mark_copies(folder: Path) -> None:
    """Rewrites each sentences file of a ``build_copies`` folder so that copy k > 0 (id ``…#k``) has every word
    marked ``{word}x{k}``: the same rows, ids and files, distinct text."""
    for path in sorted(folder.glob("sentences-*-of-*.parquet")):
        table = files.read_parquet(str(path))
        rows = table.to_pylist()
        for row in rows:
            k = int(row["id"].rsplit("#", 1)[1])
            if k:
                row["sentences"] = [" ".join(f"{word}x{k}" for word in s.split(" ")) for s in row["sentences"]]
        files.write_parquet_atomically(str(path), table.from_pylist(rows, schema=table.schema))


def stage_argv(stage: str, data: Path, work: Path, max_documents: int | None) -> list[str]:
    """The stage's command as ``dvc repro`` gives it, reading ``data`` (vocab, instances and tasks: the dedup
    output) and writing under ``work/out``."""
    out = work / "out"
    deduped = str(out / "deduped")
    inputs = {
        "corpus": [f"--embedded_max_documents={max_documents}"] if max_documents else [],
        "segment": ["--input", str(data / "corpus")],
        "dedup": ["--input", str(data / "sentences")],
        "vocab": ["--input", deduped, *(["--vocab_size=2000"] if max_documents else [])],
        "instances": ["--input", deduped, "--spiece", str(out / "vocab" / "spiece.model"), "--eval_output",
                      str(out / "eval")],
        "tasks": ["--input", deduped],
    }[stage]  # fmt: skip
    output = out / {"segment": "sentences", "dedup": "deduped"}.get(stage, stage)
    return [sys.executable, "-m", f"pipelines.{stage}", "--params", str(PARAMS), *inputs, "--output", str(output)]


def run_one(label: str, data: Path, work: Path, copies: Path, max_documents: int | None) -> dict:
    """Runs one label (a stage, or ``dedup-1x``/``dedup-10x`` in one mode) and returns its tree's figures."""
    if label.startswith("dedup-"):
        source = data / "sentences" if label == "dedup-1x" else copies
        command = [sys.executable, "-m", "pipelines.dedup", "--params", str(PARAMS), "--input", str(source)]
        command += ["--output", str(work / "out" / label), *SAME_MODE]
    else:
        command = stage_argv(label, data, work, max_documents)
    log = work / f"{label}.log"
    tree = measure.run_tree(command, log)
    if tree.returncode:
        raise SystemExit(f"{label} failed ({tree.returncode}); see {log}")
    return {"cpu_s": tree.cpu_s, "wall_s": tree.wall_s, "tree_peak_mb": tree.tree_peak_mb,
            "sdk": tree.sdk_workers, "other_cores": tree.other_cores}  # fmt: skip


def prepare(args: argparse.Namespace, work: Path) -> tuple[Path, Path]:
    """Returns the data folder (``--data``, or a smoke run's own) and the folder of the marked copy."""
    data = args.data.resolve()
    if args.max_documents:
        data = work / "data"
        few = [f"--embedded_max_documents={args.max_documents}"]
        for stage, argv in (("corpus", few), ("segment", ["--input", str(data / "corpus")])):
            output = data / ("corpus" if stage == "corpus" else "sentences")
            command = [sys.executable, "-m", f"pipelines.{stage}", "--params", str(PARAMS), *argv, "--output"]
            subprocess.run([*command, str(output)], cwd=REPO, check=True, capture_output=True)
    copies = work / f"sentences-x{args.copies}"
    # In a subprocess: reading every row makes a process large, and a child would inherit that peak as its own.
    build = [sys.executable, __file__, "--_copies", str(data / "sentences"), str(data / "corpus" / "stats.json")]
    subprocess.run([*build, str(copies), str(args.copies)], check=True)
    return data, copies


def ratios(figures: dict, rounds: dict[str, list[dict]]) -> dict[str, dict]:
    """The three ratios of medians (peaks: the highest), each with its value in every round."""
    cpu = {label: f["cpu_s"]["median"] for label, f in figures.items()}
    per_round = list(zip(*(rounds[s] for s in STAGES), strict=True))  # each round's six stage runs
    pairs = list(zip(rounds["dedup-10x"], rounds["dedup-1x"], strict=True))
    share = "dedup CPU-s ÷ CPU-s of corpus, segment, dedup, vocab, instances and tasks (each in its own Beam mode)"
    return {
        "dedup_share": measure.ratio(
            cpu["dedup"],
            sum(cpu[s] for s in STAGES),
            share,
            [r[STAGES.index("dedup")]["cpu_s"] / sum(x["cpu_s"] for x in r) for r in per_round],
        ),
        "cpu_10x": measure.ratio(
            cpu["dedup-10x"],
            cpu["dedup-1x"],
            "dedup CPU-s on the marked copy ÷ on the sentences (multi_processing, a worker per core)",
            [large["cpu_s"] / small["cpu_s"] for large, small in pairs],
        ),
        "peak_rss_10x": measure.ratio(
            figures["dedup-10x"]["tree_peak_mb"],
            figures["dedup-1x"]["tree_peak_mb"],
            "dedup process tree's peak summed RSS (MB) on the marked copy ÷ on the sentences",
            [large["tree_peak_mb"] / small["tree_peak_mb"] for large, small in pairs],
        ),
    }


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=REPO / "data", help="folder holding corpus/ and sentences/")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds of every run")
    parser.add_argument("--copies", type=int, default=10, help="the larger corpus: this many copies")
    parser.add_argument("--max_documents", type=int, help="smoke run: its own inputs from this many documents")
    parser.add_argument("--results", type=Path, default=REPO / "bench" / "results", help="dedup.json/.md go here")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--_copies"]:
        sentences, stats, output, copies = argv[1:5]
        build_copies(Path(sentences), Path(stats), Path(output), int(copies))
        return mark_copies(Path(output))
    args = parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="bench-dedup-"))
    try:
        data, copies = prepare(args, work)
        labels = [*STAGES, "dedup-1x", "dedup-10x"]
        rounds = measure.run_rounds(
            labels, args.rounds, lambda label: run_one(label, data, work, copies, args.max_documents)
        )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    figures = {label: {"cpu_s": measure.summary([r["cpu_s"] for r in runs]),
                       "wall_s": measure.summary([r["wall_s"] for r in runs]),
                       "tree_peak_mb": max(r["tree_peak_mb"] for r in runs), "rounds": runs}
               for label, runs in rounds.items()}  # fmt: skip
    found = ratios(figures, rounds)
    for label, f in figures.items():
        print(f"{label:<12} cpu {f['cpu_s']['median']:7.2f} s  wall {f['wall_s']['median']:7.2f} s  "
              f"peak {f['tree_peak_mb']:7.0f} MB")  # fmt: skip
    load = max(r["other_cores"] for runs in rounds.values() for r in runs)
    lines = measure.verdicts(found, TARGETS, load)
    print("\n".join(lines))
    figures["max_documents"], figures["copies"] = args.max_documents, args.copies
    paths = measure.write_results(args.results, "dedup", figures, found, load, lines)
    print(f"wrote {paths[0]} and {paths[1]}")
    return None


if __name__ == "__main__":
    main()
