"""The scaffold every stage shares: declared counters, one output clean-up, one reader of params and flags."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import apache_beam as beam
import pytest
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.testing import test_pipeline
from apache_beam.testing.util import assert_that, equal_to

from pipelines.runtime.outputs import owning_outputs
from pipelines.runtime.params import parse_config
from pipelines.runtime.stage import Counted, Counters, GatherAndWrite, Smallest, run_and_count
from tests.conftest import LOCAL

COUNTS = Counters("test_stage", "seen", "odd", "never")
OTHER = Counters("test_stage.other", "seen")


def _count(value: int) -> int:
    COUNTS.inc("seen")
    if value % 2:
        COUNTS.inc("odd", value)
    return value


class _CountOther(beam.DoFn):
    def process(self, value: int):
        OTHER.inc("seen")
        yield from range(value)  # counted before its first output, and once per element, however many it yields


def _counted_pipeline() -> beam.Pipeline:
    pipeline = beam.Pipeline(options=PipelineOptions(LOCAL))
    numbers = pipeline | beam.Create([1, 2, 3, 4, 5]) | "Count" >> Counted(beam.Map(_count))
    _ = numbers | "CountOther" >> Counted(beam.ParDo(_CountOther())) | beam.combiners.Count.Globally()
    return pipeline


def test_counters_report_exactly_the_declared_names_summed_over_steps_and_zero_when_never_counted(
    tmp_path: Path,
) -> None:
    # The stages' multi-processing tests (test_corpus, test_instances) check the counts across processes too.
    assert run_and_count(_counted_pipeline(), str(tmp_path), COUNTS, OTHER) == {
        "never": 0,
        "odd": 9,
        "seen": 10,
    }
    assert not list(tmp_path.iterdir())  # the counts file is read and removed


def test_counts_of_steps_not_asked_for_are_left_out(tmp_path: Path) -> None:
    assert run_and_count(_counted_pipeline(), str(tmp_path), OTHER) == {"seen": 5}


def test_an_undeclared_counter_is_an_error_not_a_new_counter() -> None:
    with pytest.raises(KeyError, match="sen"):
        COUNTS.inc("sen")


def test_counting_outside_a_counted_step_is_an_error_not_a_lost_count(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError, match=r"test_stage\.seen counted outside a step applied through stage\.Counted"):
        COUNTS.inc("seen")
    pipeline = beam.Pipeline(options=PipelineOptions(LOCAL))
    _ = pipeline | beam.Create([1]) | beam.Map(_count)
    with pytest.raises(RuntimeError, match="outside a step"):
        run_and_count(pipeline, str(tmp_path), COUNTS)


def test_smallest_is_one_sorted_list_and_nothing_for_no_input() -> None:
    with test_pipeline.TestPipeline(argv=LOCAL) as pipeline:
        words = pipeline | beam.Create(["pear", "fig", "apple", "banana", "kiwifruit"])
        assert_that(words | Smallest(3), equal_to([["apple", "banana", "fig"]]), label="ByValue")
        assert_that(words | "ByLength" >> Smallest(2, key=len), equal_to([["fig", "pear"]]), label="ByKey")
        empty = pipeline | "Nothing" >> beam.Create([]) | "OfNothing" >> Smallest(3)
        assert_that(empty, equal_to([]), label="Empty")


def test_outputs_of_an_earlier_run_are_cleared_and_a_failed_run_leaves_none(tmp_path: Path) -> None:
    for name in ("stats.json", "part-0.txt", ".tmp-abc-part-1.txt", "keep.md"):
        (tmp_path / name).write_text("old")
    with owning_outputs(str(tmp_path), "stats.json", ["part-*.txt"]):
        assert sorted(p.name for p in tmp_path.iterdir()) == ["keep.md"]
        (tmp_path / "part-0.txt").write_text("new")
        (tmp_path / "stats.json").write_text("new")
    assert (tmp_path / "stats.json").read_text() == "new"
    with pytest.raises(RuntimeError, match="worker died"), owning_outputs(str(tmp_path), "stats.json", ["part-*"]):
        (tmp_path / "part-1.txt").write_text("half")
        raise RuntimeError("worker died")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["keep.md"]


@dataclasses.dataclass
class _Knobs:
    seed: int = 1
    rate: float = 0.5
    sizes: list[int] = dataclasses.field(default_factory=lambda: [1])
    name: str | None = None
    on: bool = False


def test_flags_override_params_which_override_defaults(tmp_path: Path) -> None:
    params = tmp_path / "params.yaml"
    params.write_text("seed: 7\nknobs:\n  rate: 0.25\n  sizes: [3, 4]\n")
    parsed = parse_config(["--params", str(params), "--on", "true", "--sizes", "5"], _Knobs, "knobs", {}, "")
    assert parsed.config == _Knobs(seed=7, rate=0.25, sizes=[5], name=None, on=True)


def test_a_misspelt_key_in_the_params_section_is_refused_naming_the_file(tmp_path: Path) -> None:
    params = tmp_path / "params.yaml"
    params.write_text("knobs:\n  rat: 0.25\n")
    with pytest.raises(SystemExit, match=rf"{params}: unknown keys in section 'knobs': rat"):
        parse_config(["--params", str(params)], _Knobs, "knobs", {}, "")


def test_evaluate_reads_its_params_through_the_same_reader(tmp_path: Path) -> None:
    from albert_lightning.evaluation.cli import _parse

    params = tmp_path / "params.yaml"
    params.write_text("evaluate:\n  seeds: 2\n  train_size: [32]\n")  # train_size: a typo of train_sizes
    with pytest.raises(SystemExit, match="unknown keys in section 'evaluate': train_size"):
        _parse(["--params", str(params)])
    params.write_text("evaluate:\n  seeds: 2\n  train_sizes: [32]\n")
    config = _parse(["--params", str(params), "--random_baseline", "false"])
    assert (config.seeds, config.train_sizes, config.random_baseline) == (2, [32], False)


def _write_total(total: int, path: str) -> None:
    with open(path, "a") as f:
        f.write(f"{total}\n")


@pytest.mark.parametrize("values", [[], [1, 2, 3, 4]])
def test_gather_and_write_writes_once_also_when_there_is_nothing(values: list[int], tmp_path: Path) -> None:
    # Both writers of a stage's gathered file (the counts, dedup's removed.jsonl) go through this one transform.
    path = str(tmp_path / "total.txt")
    with beam.Pipeline(options=PipelineOptions(LOCAL)) as pipeline:
        odd = pipeline | "Odd" >> beam.Create([v for v in values if v % 2])
        even = pipeline | "Even" >> beam.Create([v for v in values if not v % 2])
        _ = (odd, even) | GatherAndWrite(sum, 0, _write_total, path, keep=lambda v: v != 4)
    assert Path(path).read_text() == f"{sum(values) - (4 in values) * 4}\n"
