"""pipelines.runtime.progress: lines of done/total units at most every period on the local runner, in-process and from
worker processes; nothing on a remote runner; the same outputs with or without it."""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path

import pytest
from apache_beam.options.pipeline_options import PipelineOptions

from pipelines import segment
from pipelines.contracts.documents import DOCUMENT_SCHEMA, file_name, table_from_rows
from pipelines.runtime import commands, files, progress

LINE = re.compile(r"^(\w+): ([\d,]+)/([\d,]+) (\w+) \(\d+%\)(, [\d.,]+ \w+/s, \d+:\d\d left| in \d+:\d\d)?$")
IN_MEMORY = ["--direct_running_mode=in_memory", "--direct_num_workers=1"]


@pytest.fixture(autouse=True)
def no_progress_from_outside(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(progress.ENV, raising=False)


def _lines(err: str) -> list[tuple[int, int, str]]:
    """(done, total, the rest) of each progress line; every line of ``err`` must be one."""
    parsed = []
    for line in err.splitlines():
        match = LINE.match(line)
        assert match, f"not a progress line: {line!r}"
        parsed.append((int(match[2].replace(",", "")), int(match[3].replace(",", "")), match[5] or ""))
    return parsed


def test_lines_report_the_units_done_at_most_once_a_period(capsys: pytest.CaptureFixture[str]):
    with progress.shown("demo", 12, "files", PipelineOptions(IN_MEMORY), every_s=0.2):
        start = time.monotonic()
        for _ in range(12):
            progress.advance()
            time.sleep(0.1)
        elapsed = time.monotonic() - start
    lines = _lines(capsys.readouterr().err)
    *periodic, final = lines
    assert final[:2] == (12, 12) and final[2].startswith(" in ")
    assert 2 <= len(periodic) <= elapsed / 0.2 + 1  # the rate limit: no more than one line per period
    assert [done for done, _, _ in periodic] == sorted(done for done, _, _ in periodic)
    assert all(total == 12 and 0 < done < 12 for done, total, _ in periodic)  # none in start-up or after the end
    assert any(rest.endswith(" left") for _, _, rest in periodic)  # a rate once two counts were seen


def test_nothing_on_a_remote_runner(capsys: pytest.CaptureFixture[str]):
    with progress.shown("demo", 3, "files", PipelineOptions(["--runner", "DataflowRunner"]), every_s=0.01):
        assert progress.ENV not in os.environ
        progress.advance()  # as a worker would: a no-op there
        time.sleep(0.1)
    assert capsys.readouterr().err == ""


def test_lines_reach_the_terminal_while_the_workers_output_goes_to_the_log(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
):
    with open(tmp_path / "log", "w") as log, commands._stderr_to(log):
        os.write(2, b"worker chatter\n")
        print("demo: 1/2 files (50%)", file=commands.console())
    assert capfd.readouterr().err == "demo: 1/2 files (50%)\n"
    assert (tmp_path / "log").read_text() == "worker chatter\n"


def _corpus(folder: Path, num_files: int = 4) -> Path:
    """A finished corpus-stage folder: ``num_files`` files of three short documents each."""
    for index in range(num_files):
        rows = [
            {"id": f"d{index}-{k}", "text": f"Text {k} of file {index}. A second sentence.", "presegmented": False,
             "meta": json.dumps({"source": str(index)})}
            for k in range(3)
        ]  # fmt: skip
        files.write_parquet_atomically(
            str(folder / file_name("documents", index, num_files)), table_from_rows(rows, DOCUMENT_SCHEMA)
        )
    files.write_json_atomically(str(folder / "stats.json"), {})
    return folder


def _segment(corpus: Path, out: Path, beam: list[str]) -> dict[str, bytes]:
    segment.run(["--params", os.devnull, "--input", str(corpus), "--output", str(out), *beam])
    return {p.name: p.read_bytes() for p in sorted(out.iterdir())}


def test_a_stage_reports_its_files_from_worker_processes_and_writes_the_same_outputs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
):
    corpus = _corpus(tmp_path / "corpus")
    with monkeypatch.context() as off:
        off.setattr(progress, "runs_locally", lambda options: False)
        quiet = _segment(corpus, tmp_path / "quiet", IN_MEMORY)
    assert capsys.readouterr().err == ""
    monkeypatch.setattr(progress, "EVERY_S", 0.02)
    seen = []  # what the launching process counted at each look: only the worker processes report
    monkeypatch.setattr(progress, "_done", lambda folder, done=progress._done: seen.append(done(folder)) or seen[-1])
    two_processes = ["--direct_running_mode=multi_processing", "--direct_num_workers=2"]
    shown = _segment(corpus, tmp_path / "shown", two_processes)
    assert max(seen) == 4 and seen == sorted(seen)
    assert all(total == 4 for _, total, _ in _lines(capsys.readouterr().err))
    assert shown == quiet
