"""The vocab stage's memory is SentencePiece's, and SentencePiece's grows with its sample: peak RSS by sample size.

Run: ``python bench/vocab_memory.py [--sentences 100000 300000 1000000]``. The sentences are
``bench/scale_corpus.py``'s documents cut by the segment stage's splitter (``split_sentences``), the first N of
them written one per line; each size trains the stage's own trainer call (``pipelines.vocab._train``, params.yaml's
vocabulary settings: unigram, 5,000 pieces, 8 threads) in a fresh process, which reports its peak RSS
(``ru_maxrss``) and CPU seconds. The ratios divide the largest size's peak above the interpreter's by the smallest's,
and MB per sampled sentence at both.

Why it matters: the stage's sample is capped at ``vocab.sample_sentences`` (1 M), so its memory stops growing
once a corpus has that many training sentences (about 0.16 GB of ``scale_corpus`` text), and until then grows
with the corpus. ``bench/scale.py``'s vocab ratio (1 GB ÷ 0.1 GB) compares a full sample with a partial one.
"""

from __future__ import annotations

import argparse
import itertools
import json
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import scale_corpus
from measure import MB, busy_cpu_s, other_cores, ratio, write_results

REPO = Path(__file__).resolve().parents[1]
# One size's training, in a process of its own so that each peak is that size's alone.
TRAIN = """
import json, resource, sys, time
from pipelines.vocab import VocabConfig, _train
import yaml
params = yaml.safe_load(open("params.yaml"))["vocab"]
config = VocabConfig(**{k: v for k, v in params.items() if k in VocabConfig.__dataclass_fields__})
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
start = time.process_time()
_train(sys.argv[1], config, config.vocab_size)
print(json.dumps({"peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, "before_mb": before,
                  "cpu_s": time.process_time() - start}))
"""


def sentence_file(workdir: Path, count: int) -> Path:
    """The first ``count`` sentences of the scale corpus, one per line (built once, then reused)."""
    from pipelines.algorithms.sentences import split_sentences

    path = workdir / f"sentences-{count}.txt"
    if path.exists():
        return path
    gb = count * 160 / 1e9  # ~120 bytes of text a sentence; a margin over it
    docs = (json.loads(line)["text"] for p in scale_corpus.build(workdir / "source", gb) for line in p.open())
    sentences = itertools.islice((s for text in docs for s in split_sentences(text)), count)
    text = "".join(s + "\n" for s in sentences)
    if text.count("\n") < count:
        raise SystemExit(f"the scale corpus gave fewer than {count:,} sentences; raise the margin")
    path.write_text(text, encoding="utf-8")
    return path


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sentences", type=int, nargs="+", default=[100_000, 300_000, 1_000_000])
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/albert-lightning-vocab-memory"))
    parser.add_argument("--results", type=Path, default=REPO / "bench" / "results")
    args = parser.parse_args(argv)
    args.workdir.mkdir(parents=True, exist_ok=True)
    runs, load = [], 0.0
    for count in sorted(args.sentences):
        path = sentence_file(args.workdir, count)
        busy, start = busy_cpu_s(), time.perf_counter()
        done = subprocess.run([sys.executable, "-c", TRAIN, str(path)], cwd=REPO, capture_output=True, text=True)
        if done.returncode:
            raise SystemExit(f"training on {path} failed:\n{done.stderr[-2000:]}")
        run = {"sentences": count, "characters": len(path.read_text(encoding="utf-8")), **json.loads(done.stdout)}
        load = max(load, other_cores(busy, run["cpu_s"], time.perf_counter() - start))  # memory is not load-bound
        runs.append(run)
        print(f"{count:>9,} sentences: peak {run['peak_mb']:,.0f} MB, {run['cpu_s']:.0f} CPU-s", flush=True)
    small, large = runs[0], runs[-1]
    grown = {r["sentences"]: r["peak_mb"] - r["before_mb"] for r in runs}
    ratios = {
        "peak_above_interpreter": ratio(
            grown[large["sentences"]], grown[small["sentences"]],
            f"SentencePiece's peak RSS above the interpreter's at {large['sentences']:,} sentences ÷ at "
            f"{small['sentences']:,} ({large['sentences'] / small['sentences']:.1f}× the sentences)",
        ),
        "mb_per_sentence": ratio(
            grown[large["sentences"]] / large["sentences"], grown[small["sentences"]] / small["sentences"],
            "MB of peak RSS per sampled sentence, largest sample ÷ smallest (1: linear in the sample)",
        ),
    }  # fmt: skip
    lines = [f"{k} = {r['value']:.3f}: {r['divides']}" for k, r in ratios.items()]
    for r in runs:
        per_character = (r["peak_mb"] - r["before_mb"]) * MB / r["characters"]
        lines.append(f"{r['sentences']:,} sentences ({r['characters'] / 1e6:.0f} M characters): peak "
                     f"{r['peak_mb']:,.0f} MB, {per_character:.1f} B a character over the interpreter")  # fmt: skip
    print("\n".join(lines))
    write_results(args.results, "vocab_memory", {"runs": runs}, ratios, load, lines)


if __name__ == "__main__":
    main()
