"""The one slower test: ``dvc repro`` runs every stage of dvc.yaml, unchanged, on a small slice of the default;
then ``dvc exp run`` runs them all again on a user's unlabelled prose (tests/fixtures/prose) to a report."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.conftest import DISTRIBUTED_ENV

ROOT = Path(__file__).resolve().parents[1]


def _project_copy(target: Path) -> Path:
    """Copies the files git tracks (code, dvc.yaml, params, configs, data/.gitignore) into a fresh project."""
    tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    for name in tracked.splitlines():
        output = name.startswith("data/") and name != "data/.gitignore"
        if output or name.endswith("dvc.lock") or not (ROOT / name).is_file():
            continue  # a fresh project: no outputs and no record of earlier runs
        (target / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, target / name)
    return target


def _shrink(project: Path) -> None:
    """The same stages with a slice of the corpus, a tiny model and a few steps."""
    params = yaml.safe_load((project / "params.yaml").read_text())
    params["beam_args"] = "--direct_running_mode=in_memory --direct_num_workers=1"
    params["corpus"].update(embedded_packages=["email", "json", "asyncio", "xml", "tkinter", "collections"])
    params["vocab"].update(vocab_size=800)
    params["instances"].update(dupe_factor=2)
    params["tasks"].update(min_class_documents=2, num_classes=4)
    params["evaluate"].update(max_steps=3, min_steps=1, seeds=2, train_sizes=[16, 0], intrinsic_batches=2)
    (project / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    config = yaml.safe_load((project / "configs/pretrain.yaml").read_text())
    config["trainer"].update(max_steps=8, val_check_interval=4, limit_val_batches=2, log_every_n_steps=2)
    config["trainer"]["callbacks"][0]["init_args"]["every_n_train_steps"] = 4
    config["model"].update(preset="tiny", warmup_steps=2)
    config["data"].update(batch_size=8)
    (project / "configs/pretrain.yaml").write_text(yaml.safe_dump(config, sort_keys=False))


GIT_IDENTITY = {f"GIT_{who}_{what}": value for who in ("AUTHOR", "COMMITTER") for what, value in
                (("NAME", "test"), ("EMAIL", "test@example.com"))}  # fmt: skip


def _commit(project: Path, env: dict[str, str], message: str) -> None:
    subprocess.run(["git", "add", "-A"], cwd=project, env=env, check=True)
    subprocess.run(["git", "commit", "-q", "-m", message], cwd=project, env=env, check=True)


@pytest.mark.slow
def test_dvc_repro_runs_every_stage_and_reports(tmp_path: Path) -> None:
    project = _project_copy(tmp_path / "project")
    _shrink(project)
    env = {k: v for k, v in os.environ.items() if k not in DISTRIBUTED_ENV}
    env.update(DVC_NO_ANALYTICS="1", PATH=f"{Path(sys.executable).parent}:{env.get('PATH', '')}", **GIT_IDENTITY)
    dvc = [sys.executable, "-m", "dvc"]
    subprocess.run(["git", "init", "-q"], cwd=project, env=env, check=True)
    _commit(project, env, "the project")
    result = subprocess.run([*dvc, "repro"], cwd=project, env=env, capture_output=True, text=True, timeout=1200)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    stages = yaml.safe_load((project / "dvc.yaml").read_text())["stages"]
    lock = yaml.safe_load((project / "dvc.lock").read_text())["stages"]
    assert {name.split("@")[0] for name in lock} == set(stages)  # every stage (and foreach item) ran
    manifest = json.loads((project / "data/shards/manifest.json").read_text())
    assert manifest["counters"]["instances"] > 0
    assert (project / "data/export/model.safetensors").exists()
    assert (project / "data/pretrain/curves.png").stat().st_size > 0
    metrics = subprocess.run([*dvc, "metrics", "show", "--json"], cwd=project, env=env, capture_output=True,
                             text=True, check=True)  # fmt: skip
    shown = json.dumps(json.loads(metrics.stdout))
    assert "mlm_accuracy" in shown and "random_init" in shown
    assert (project / "data/eval/learning_curve.png").stat().st_size > 0
    again = subprocess.run(
        [*dvc, "status", "--json", "dvc.yaml"], cwd=project, env=env, capture_output=True, text=True, check=True
    )
    assert json.loads(again.stdout) == {}, again.stdout  # every stage up to date: nothing changed, nothing missing

    _commit(project, env, "the baseline run")
    _an_experiment_compares_with_its_baseline(project, env)


def _an_experiment_compares_with_its_baseline(project: Path, env: dict[str, str]) -> None:
    """The README's third command on prose without labels: every stage runs again and the report holds the
    intrinsic scores; the metrics files are in git (cache: false), so `dvc exp show` has numbers for both rows."""
    dvc = [sys.executable, "-m", "dvc"]
    shutil.copytree(ROOT / "tests/fixtures/prose", project / "prose", ignore=shutil.ignore_patterns("*.md"))
    command = [*dvc, "exp", "run", "-S", "corpus.inputs=[prose]", "-S", "vocab.vocab_size=1000"]
    run = subprocess.run(command, cwd=project, env=env, capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    console = run.stdout + run.stderr
    assert "Tip:" not in console and "litlogger" not in console and "_pytree" not in console, console[-3000:]
    tasks = json.loads((project / "data/tasks/stats.json").read_text())
    assert tasks["tasks"] == {} and tasks["reason"]
    report = (project / "data/eval/report.md").read_text()
    assert "No downstream task" in report and "| sop | sop |" in report, report[:2000]  # the intrinsic rows
    shown = subprocess.run([*dvc, "exp", "show", "--json"], cwd=project, env=env, capture_output=True, text=True,
                           check=True)  # fmt: skip
    [baseline] = [row for row in json.loads(shown.stdout) if row["rev"] != "workspace"]  # the commit's row
    [experiment] = [rev for group in baseline["experiments"] for rev in group["revs"]]
    for row in (baseline, experiment):
        metrics = row["data"]["metrics"]
        assert metrics["data/pretrain/metrics.json"]["data"]["validation"]["mlm_accuracy"] is not None
    assert baseline["data"]["metrics"]["data/eval/metrics.json"]["data"]["tasks"]
    inputs = [row["data"]["params"]["params.yaml"]["data"]["corpus"]["inputs"] for row in (baseline, experiment)]
    assert inputs == [[], ["prose"]]  # the experiment's own run beside the baseline's
