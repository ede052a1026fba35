"""Measures what the dedup stage's rules remove from real text, and how much held-out text training still sees.

Run: ``python bench/dedup_rules.py --corpus prose=/tmp/p/sentences --corpus default=/tmp/default/sentences
--before /tmp/dedup-before`` from the repository, where each ``--corpus`` is a finished segment-stage folder
(read only) and ``--before`` a checkout of the code to compare with (``git worktree add /tmp/dedup-before
<commit>``; its dedup stage's third rule is the old one). Outputs go under ``--work``; the tables are printed
and written to ``dedup_rules.md`` and ``dedup_rules.json`` in ``--results``.

Each corpus is deduplicated by the ``--before`` code and by this code at params.yaml's settings, then at every
``passage_words`` × ``passage_documents`` of the sweep, each as its command (``python -m pipelines.dedup
--params params.yaml``) with ``--sample_removed`` large enough that ``removed.jsonl`` lists every removal. From
the files, not the counters:

- per rule (exact, near, the third rule): documents removed, sentences removed, of them of ≤ 2 words, and of
  them removed as a repeat inside their own document (``kept_id`` is their own id);
- per run: held-out sentences seen verbatim in a training document (as ``pipelines.leakage`` counts them), of
  at least params.yaml's ``passage_words`` words and of any length; what is left of the boilerplate: kept
  sentences of ≥ 4 words in 3 documents or more (occurrences beyond each text's first document), and kept
  sentences naming "gutenberg" beyond their first document (Project Gutenberg's licence, in the prose corpus);
- samples: the texts the third rule removed most often, and what a lower floor or fewer documents would add.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

from pipelines.algorithms.passages import word_count
from pipelines.algorithms.splits import is_held_out
from pipelines.runtime import files

REPO = Path(__file__).resolve().parents[1]
PARAMS = yaml.safe_load((REPO / "params.yaml").read_text())["dedup"]
FRACTION = yaml.safe_load((REPO / "params.yaml").read_text())["held_out_fraction"]
FLOOR = PARAMS["passage_words"]  # the leakage floor every run is measured at, so the runs compare
SWEEP = [(words, documents) for words in (4, 6, 8, 12) for documents in (2, 3, 5)]
EVERY = 10**8  # sample_removed: every removal is listed
SAMPLES = 6


def run_dedup(code: Path, source: Path, output: Path, *flags: str) -> None:
    """The dedup stage of the checkout ``code``, as its command, ``source`` → ``output``."""
    argv = [sys.executable, "-m", "pipelines.dedup", "--params", str(code / "params.yaml"), "--input", str(source)]
    env = {**os.environ, "PYTHONPATH": str(code)}
    argv += ["--output", str(output), f"--sample_removed={EVERY}", *flags]
    subprocess.run(argv, cwd=code, env=env, check=True, capture_output=True)


def read_documents(folder: Path) -> dict[str, list[str]]:
    """A sentences folder → id → sentences."""
    paths = sorted(folder.glob("sentences-*-of-*.parquet"))
    tables = [files.read_parquet(str(p), columns=["id", "sentences"]).to_pylist() for p in paths]
    return {row["id"]: row["sentences"] for table in tables for row in table}


def leaked(docs: dict[str, list[str]], fraction: float, min_words: int) -> tuple[int, int]:
    """(held-out sentence occurrences of ≥ ``min_words`` words seen in a training document, all of them)."""
    held, train = collections.Counter(), set()
    for doc_id, sentences in docs.items():
        if is_held_out(doc_id, fraction):
            held.update(s for s in sentences if word_count(s) >= min_words)
        else:
            train.update(sentences)
    return sum(n for s, n in held.items() if s in train), sum(held.values())


def leftovers(docs: dict[str, list[str]]) -> tuple[int, int]:
    """(kept occurrences of ≥ 4-word sentences in ≥ 3 documents, of sentences naming gutenberg), each beyond the
    first document that holds the text."""
    where = collections.defaultdict(collections.Counter)
    for doc_id, sentences in docs.items():
        for sentence in sentences:
            where[sentence][doc_id] += 1
    repeats = licence = 0
    for sentence, counts in where.items():
        beyond = sum(counts.values()) - counts[min(counts)]
        repeats += beyond if len(counts) >= 3 and word_count(sentence) >= 4 else 0
        licence += beyond if "gutenberg" in sentence else 0
    return repeats, licence


def _empty() -> dict:
    return {"documents": 0, "sentences": 0, "short": 0, "inside": 0, "texts": []}


def per_rule(docs: dict[str, list[str]], output: Path) -> dict[str, dict]:
    """Every removal of ``output``'s removed.jsonl, by rule: documents, sentences, short ones, inside one."""
    rules: dict[str, dict] = {rule: _empty() for rule in ("exact_duplicate", "near_duplicate")}
    for line in (output / "removed.jsonl").read_text().splitlines():
        item = json.loads(line)
        row = rules.setdefault(item["rule"], _empty())
        if "position" in item:  # one sentence
            sentences, row["inside"] = [item["text"]], row["inside"] + (item["kept_id"] == item["id"])
            row["texts"].append(item["text"])
        else:
            sentences, row["documents"] = docs[item["id"]], row["documents"] + 1
        row["sentences"] += len(sentences)
        row["short"] += sum(word_count(s) <= 2 for s in sentences)
    return rules


def measure(label: str, docs: dict[str, list[str]], output: Path) -> dict:
    stats = json.loads((output / "stats.json").read_text())
    kept = read_documents(output)
    rules = per_rule(docs, output)
    floor, held = leaked(kept, stats["held_out_fraction"], FLOOR)
    seen_all, held_all = leaked(kept, stats["held_out_fraction"], 0)
    repeats, licence = leftovers(kept)
    return {
        "run": label, "rules": rules, "emptied": stats["counters"]["emptied_documents"],
        "seen_floor": floor, "held_floor": held, "seen_all": seen_all, "held_all": held_all,
        "repeats_left": repeats, "licence_left": licence,
    }  # fmt: skip


def _third(run: dict) -> dict:
    third = (row for rule, row in run["rules"].items() if rule not in ("exact_duplicate", "near_duplicate"))
    return next(third, _empty())


def _share(seen: int, held: int) -> str:
    return f"{seen / max(1, held):.2%} ({seen:,} of {held:,})"


def _common(texts: list[str], minus: list[str] = ()) -> str:
    counts = collections.Counter(texts) - collections.Counter(minus)
    return "; ".join(f'"{t[:70]}" ×{n}' for t, n in sorted(counts.items(), key=lambda i: (-i[1], i[0]))[:SAMPLES])


def tables(name: str, before: dict, input_run: dict, runs: dict[str, dict]) -> list[str]:
    """One corpus's Markdown tables."""
    now = runs[f"words={PARAMS['passage_words']} documents={PARAMS['passage_documents']}"]
    head = "| rule | documents removed | sentences removed | of ≤ 2 words | inside their document |"
    lines = [f"## {name}", "", head, "|---|---|---|---|---|"]
    for label, run in (("before", before), ("after", now)):
        for rule, row in run["rules"].items():
            cells = [f"{row[k]:,}" for k in ("documents", "sentences", "short", "inside")]
            lines.append(f"| {rule} ({label}) | {' | '.join(cells)} |")
    head = (f"| run | held-out sentences of ≥ {FLOOR} words seen in training | of any length | documents emptied "
            "| ≥ 4-word sentences left in ≥ 3 documents | gutenberg lines left |")  # fmt: skip
    lines += ["", head, "|---|---|---|---|---|---|"]
    for run in (input_run, before, *runs.values()):
        lines.append(f"| {run['run']} | {_share(run['seen_floor'], run['held_floor'])} | "
                     f"{_share(run['seen_all'], run['held_all'])} | {run['emptied']:,} | {run['repeats_left']:,} | "
                     f"{run['licence_left']:,} |")  # fmt: skip
    sweep = ["", "| passage_words × documents | sentences removed | of ≤ 2 words |", "|---|---|---|"]
    sweep += [f"| {label} | {_third(r)['sentences']:,} | {_third(r)['short']:,} |" for label, r in runs.items()]
    lines += [*sweep, "", f"Removed most often, before: {_common(_third(before)['texts'])}", "",
              f"Removed most often, after: {_common(_third(now)['texts'])}"]  # fmt: skip
    for label, run in runs.items():
        if label.startswith(("words=4 documents=3", "words=8 documents=2")):
            lines += ["", f"What {label} adds: {_common(_third(run)['texts'], _third(now)['texts'])}"]
    return [*lines, ""]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", action="append", required=True, help="name=segment-stage folder (repeatable)")
    parser.add_argument("--before", type=Path, required=True, help="checkout of the code to compare with")
    # The runs' outputs are read back as measurements: a private folder, never a shared predictable /tmp path.
    parser.add_argument("--work", type=Path, default=None, help="folder for the runs (default: a new private one)")
    parser.add_argument("--results", type=Path, default=REPO / "bench" / "results")
    args = parser.parse_args()
    args.work = args.work or Path(tempfile.mkdtemp(prefix="albert-dedup-rules-"))
    report, lines = {}, ["# What the dedup rules remove (bench/dedup_rules.py)", ""]
    for name, folder in (item.split("=", 1) for item in args.corpus):
        source, work = Path(folder), args.work / name
        docs = read_documents(source)
        repeats, licence = leftovers(docs)
        input_run = {"run": "no dedup", "rules": {}, "emptied": 0, "repeats_left": repeats, "licence_left": licence}
        input_run["seen_floor"], input_run["held_floor"] = leaked(docs, FRACTION, FLOOR)
        input_run["seen_all"], input_run["held_all"] = leaked(docs, FRACTION, 0)
        run_dedup(args.before, source, work / "before")
        before = measure("before (every repeat of a sentence)", docs, work / "before")
        runs = {}
        for words, documents in SWEEP:
            label, out = f"words={words} documents={documents}", work / f"w{words}-d{documents}"
            run_dedup(REPO, source, out, f"--passage_words={words}", f"--passage_documents={documents}")
            runs[label] = measure(label, docs, out)
        lines += tables(name, before, input_run, runs)
        report[name] = {"input": input_run, "before": before, "runs": runs}
        print("\n".join(tables(name, before, input_run, runs)), flush=True)
    args.results.mkdir(parents=True, exist_ok=True)
    (args.results / "dedup_rules.md").write_text("\n".join(lines))
    for corpus in report.values():  # the texts are in the tables' samples; the JSON keeps the counts
        for run in [corpus["before"], *corpus["runs"].values()]:
            for row in run["rules"].values():
                row.pop("texts")
    (args.results / "dedup_rules.json").write_text(json.dumps(report, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
