"""The replicates launcher (``albert_lightning/ablations/replicates.py``): one run per seed with ``{seed}`` filled in,
an equal share of the cores each, no inherited rendezvous, and a failure that stops the rest and names its log."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest

from albert_lightning.ablations import replicates

WRITE = (
    "import json, os, sys; json.dump({'seed': sys.argv[1], 'threads': os.environ['OMP_NUM_THREADS'], "
    "'rank': os.environ.get('RANK'), 'port': os.environ['MASTER_PORT']}, open(sys.argv[2], 'w'))"
)


def test_each_seed_runs_once_with_its_share_of_the_cores(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RANK", "3")  # a distributed launch above us must not leak into the runs
    monkeypatch.setattr(replicates.os, "sched_getaffinity", lambda _: set(range(4)), raising=False)
    argv = ["--seeds", "3", "--first_seed", "10", "--skip_first", "--", sys.executable, "-c", WRITE, "{seed}",
            str(tmp_path / "seed-{seed}.json")]  # fmt: skip
    assert replicates.main(argv) == 0
    written = {p.name: json.loads(p.read_text()) for p in tmp_path.glob("seed-*.json")}
    assert sorted(written) == ["seed-11.json", "seed-12.json"]  # 10 skipped: the main pipeline's own run
    assert [written[f"seed-{s}.json"]["seed"] for s in (11, 12)] == ["11", "12"]
    assert {w["threads"] for w in written.values()} == {"2"}  # 4 cores, 2 runs at once
    assert {w["rank"] for w in written.values()} == {None}
    assert len({w["port"] for w in written.values()}) == 2  # side-by-side runs get their own rendezvous port


def test_threads_per_job() -> None:
    assert [replicates.threads_per_job(2, j) for j in (1, 2, 3)] == [2, 1, 1]
    assert replicates.threads_per_job(16, 3) == 5


def test_a_template_without_the_seed_is_refused() -> None:
    with pytest.raises(ValueError, match="never mentions"):
        replicates.jobs_for(["python", "-m", "albert_lightning.fit"], [1, 2])


def test_a_failed_run_stops_the_others_and_names_its_log(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    # seed 1 fails at once; seed 2 would write its file after 30 s, but is stopped first
    code = (
        "import sys, time\nif sys.argv[1] == '1':\n    print('boom: bad shard'); sys.exit(3)\n"
        "time.sleep(30)\nopen(sys.argv[2], 'w').write('late')"
    )
    started = time.monotonic()
    argv = ["--seeds", "2", "--first_seed", "1", "--", sys.executable, "-c", code, "{seed}", str(tmp_path / "{seed}")]
    assert replicates.main(argv) == 1
    assert time.monotonic() - started < 20 and not (tmp_path / "2").exists()
    err = capsys.readouterr().err
    assert "boom: bad shard" in err and "seed 1 failed (exit 3); log: " in err


def test_every_report_lists_the_same_seed_folders_in_the_order_of_their_seeds(tmp_path: Path) -> None:
    # One listing for the grid report, the adaptation report and the across-runs report: numeric order, not
    # text order (seed-9 before seed-10), and only the finished runs.
    from albert_lightning.ablations.replicates import seed_folders

    for name in ("seed-10", "seed-9", "seed-11", "seed-x", "notes"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "metrics.json").write_text("{}")
    (tmp_path / "seed-12").mkdir()  # an unfinished run
    assert [p.name for p in seed_folders(tmp_path)] == ["seed-9", "seed-10", "seed-11"]
