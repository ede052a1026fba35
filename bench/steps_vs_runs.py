"""Measures the ablation grid's trade at a fixed budget: more pretraining runs of fewer steps, or fewer of more.

Run from the repository after ``dvc repro ablations/dvc.yaml`` (its shards and its runs are read, never written):

    python bench/steps_vs_runs.py --variants baseline sharing-none embedding-double --runs 6 --steps 750

pretrains each named variant ``--runs`` times for ``--steps`` steps (warm-up and decay scaled with them) and
evaluates each run as the grid's evaluate stage does, under a private temporary folder, side by side
(``albert_lightning.ablations.replicates``). Then it checks every finding among those variants on these runs and
on the grid's own (``data/ablations/runs``: ``pretrain_seeds`` runs of ``configs/ablation.yaml``'s steps), and
prints per finding both intervals, their widths and verdicts, the CPU-seconds each configuration cost, and how
many findings each leaves resolved. Same budget: runs × steps equal on both sides (e.g. 6 × 750 = 3 × 1500).

``--grid_only`` trains nothing and measures both sides of the trade on the grid's own runs: every finding checked
on each subset of 1, 2, … of each variant's runs (how many resolve, how wide the intervals), and along the steps,
each run's validation curve: intrinsic differences at each validation step against the between-run spread.
"""

from __future__ import annotations

import argparse
import csv
import itertools
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from albert_lightning.ablations import findings as af  # noqa: E402
from albert_lightning.ablations.report import collect  # noqa: E402


def _launch(template: list[str], runs: int, first_seed: int) -> None:
    command = [sys.executable, "-m", "albert_lightning.ablations.replicates", "--seeds", str(runs),
               "--first_seed", str(first_seed), "--", *template]  # fmt: skip
    subprocess.run(command, cwd=REPO, check=True)


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_variant(name: str, item: dict, grid: dict, runs: int, steps: int, root: Path) -> None:
    """The grid's pretrain and evaluate commands for one variant, at ``steps`` steps and ``runs`` runs."""
    folder = root / name
    dropout = item["dropout"]
    overrides = json.dumps({"sharing": item["sharing"], "embedding_size": item["embedding_size"],
                            "hidden_dropout_prob": dropout, "attention_probs_dropout_prob": dropout})  # fmt: skip
    fit = [sys.executable, "-m", "albert_lightning.fit", "--config", "configs/pretrain.yaml", "--config",
           grid["pretrain_config"], "--data.data_dir", f"data/ablations/shards/{item['shards']}",
           "--data.masking", item["masking"], "--model.config_overrides", overrides,
           "--trainer.max_steps", str(steps), "--trainer.val_check_interval", str(steps),
           "--model.warmup_steps", str(max(1, steps // 10)), "--seed_everything", "{seed}", "--data.seed", "{seed}",
           "--trainer.default_root_dir", f"{folder}/pretrain/seed-{{seed}}"]  # fmt: skip
    evaluate = [sys.executable, "-m", "albert_lightning.evaluate", "--checkpoint",
                f"{folder}/pretrain/seed-{{seed}}/checkpoints/last.ckpt", "--output", f"{folder}/eval/seed-{{seed}}",
                "--shards", "data/eval_shards/sop", "data/eval_shards/nsp", "--max_steps",
                str(grid["evaluate_max_steps"]), "--random_baseline", "false", "--seeds", str(grid["evaluate_seeds"]),
                "--tasks", "data/tasks/package", "--lrs", str(grid["evaluate_lrs"]), "--train_sizes",
                str(grid["evaluate_train_sizes"])]  # fmt: skip
    _launch(fit, runs, grid["first_seed"])
    _launch(evaluate, runs, grid["first_seed"])


def _findings(runs_folder: Path, variants: list[str]) -> dict[str, dict]:
    evidence = {run.name: run.evidence for run in collect(runs_folder) if run.name in variants}
    chosen = tuple(f for f in af.FINDINGS if f.first in variants and (f.second in variants or f.second is None))
    return {r["key"]: r for r in af.check(evidence, chosen)}


# (comparison, ahead, behind, validation column). MLM only: a variant's validation pairs are of its own
# inter-sentence kind, so its "sop_accuracy" is NSP accuracy for objective-nsp; SOP is shown for the baseline alone.
CURVE_PAIRS = (
    ("no dropout (MLM)", "baseline", "dropout-0.1", "mlm_accuracy"),
    ("not-shared>all-shared (MLM)", "sharing-none", "baseline", "mlm_accuracy"),
    ("E>E/2 (MLM)", "baseline", "embedding-half", "mlm_accuracy"),
    ("E>2E (MLM)", "baseline", "embedding-double", "mlm_accuracy"),
)


def _subsets(runs_folder: Path) -> None:
    """Prints, per number of runs k, the mean over k-subsets of the seeds of the findings resolved, and widths."""
    variants = [p for p in runs_folder.iterdir() if p.is_dir()]
    seeds = sorted({p.name for v in variants for p in (v / "pretrain").glob("seed-*")})
    print("| runs per variant | findings resolved (per subset) | mean interval width |\n|---|---|---|")
    for k in range(1, len(seeds) + 1):
        counts, widths = [], []
        for chosen in itertools.combinations(seeds, k):
            with tempfile.TemporaryDirectory() as work:
                for v in variants:
                    for part in ("pretrain", "eval"):
                        (Path(work) / v.name / part).mkdir(parents=True)
                        for seed in chosen:
                            (Path(work) / v.name / part / seed).symlink_to(v / part / seed)
                results = af.check({run.name: run.evidence for run in collect(Path(work))})
            judged = [r for r in results if r["verdict"] in (af.HOLDS, af.FAILS, af.OPEN)]
            counts.append(sum(r["verdict"] != af.OPEN for r in judged))
            widths.append(statistics.mean(r["high"] - r["low"] for r in judged))
        print(f"| {k} | {statistics.mean(counts):.1f} ({counts}) | {statistics.mean(widths):.3f} |")


def _curves(runs_folder: Path) -> None:
    """Prints each intrinsic comparison at every validation step: mean difference and between-run SDs."""

    def values(variant: str, column: str) -> dict[int, list[float]]:
        out: dict[int, list[float]] = {}
        for run in sorted((runs_folder / variant / "pretrain").glob("seed-*")):
            with open(run / "curves" / "validation.csv", newline="") as f:
                for row in csv.DictReader(f):
                    out.setdefault(int(float(row["step"])), []).append(float(row[column]))
        return out

    print("| comparison (validation curve) | step | mean difference | between-run SD (each) | difference / SD |")
    print("|---|---|---|---|---|")
    for name, ahead, behind, column in CURVE_PAIRS:
        a, b = values(ahead, column), values(behind, column)
        for step in sorted(set(a) & set(b)):
            if step == 0 or len(a[step]) < 2 or len(b[step]) < 2:
                continue
            d = statistics.mean(a[step]) - statistics.mean(b[step])
            sd_a, sd_b = statistics.stdev(a[step]), statistics.stdev(b[step])
            ratio = d / (sd_a**2 + sd_b**2) ** 0.5 if sd_a or sd_b else float("inf")
            print(f"| {name} | {step} | {d:+.4f} | {sd_a:.4f} / {sd_b:.4f} | {ratio:+.1f} |")
    sop = values("baseline", "sop_accuracy")
    for step in sorted(sop):
        if step and len(sop[step]) > 1:
            above, sd = statistics.mean(sop[step]) - 0.5, statistics.stdev(sop[step])
            print(f"| baseline SOP accuracy − chance | {step} | {above:+.4f} | {sd:.4f} | {above / sd:+.1f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variants", nargs="+", help="variants of ablations/params.yaml")
    parser.add_argument("--runs", type=int, help="pretraining runs per variant")
    parser.add_argument("--steps", type=int, help="steps per run")
    parser.add_argument("--grid_runs", default="data/ablations/runs", help="the grid's runs, to compare with")
    parser.add_argument("--grid_only", action="store_true", help="train nothing: subsample the grid's runs")
    args = parser.parse_args()
    if args.grid_only:
        _subsets(REPO / args.grid_runs)
        print()
        _curves(REPO / args.grid_runs)
        return
    if not (args.variants and args.runs and args.steps):
        parser.error("--variants, --runs and --steps are needed unless --grid_only")
    grid = yaml.safe_load((REPO / "ablations/params.yaml").read_text())
    grid_steps = yaml.safe_load((REPO / grid["pretrain_config"]).read_text())["trainer"]["max_steps"]
    with tempfile.TemporaryDirectory(prefix="albert-steps-vs-runs-") as work:
        before = _children_cpu()
        for name in args.variants:
            run_variant(name, grid["variants"][name], grid, args.runs, args.steps, Path(work))
        cpu = _children_cpu() - before
        ours = _findings(Path(work), args.variants)
    theirs = _findings(REPO / args.grid_runs, args.variants)
    mine, grid_label = f"{args.runs} × {args.steps}", f"{grid['pretrain_seeds']} × {grid_steps}"
    print(
        f"| finding | {mine}: difference [95 % CI] | width | verdict | {grid_label}: difference [95 % CI] "
        "| width | verdict |"
    )
    print("|---|---|---|---|---|---|---|")
    resolved = {mine: 0, grid_label: 0}
    for key, r in ours.items():
        cells = []
        for label, result in ((mine, r), (grid_label, theirs[key])):
            if result["verdict"] == "skipped":
                cells += ["skipped", "-", "-"]
                continue
            cells += [f"{result['difference']:+.3f} [{result['low']:+.3f}, {result['high']:+.3f}]",
                      f"{result['high'] - result['low']:.3f}", result["verdict"]]  # fmt: skip
            resolved[label] += result["verdict"] not in (af.OPEN, af.NO_CLAIM)
        print(f"| {key} | " + " | ".join(cells) + " |")
    print(f"\nresolved: {mine} {resolved[mine]}, {grid_label} {resolved[grid_label]} of {len(ours)}; "
          f"CPU-seconds of the {mine} runs (pretraining and evaluation): {cpu:.0f}")  # fmt: skip


if __name__ == "__main__":
    os.environ.setdefault("DVC_NO_ANALYTICS", "1")
    main()
