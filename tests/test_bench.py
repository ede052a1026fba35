"""bench/: the FLOP count of bench/mfu.py and its run on CPU, and bench/measure.py's interleaving, summaries, ratios
and results files.

The benches' timings are never tested; what is tested is that their arithmetic says what it claims.
"""

from __future__ import annotations

import gc
import json
import sys
from pathlib import Path

import pytest
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

import measure
from mfu import flops_per_token, resolve_device

from albert_lightning.model import AlbertConfig, AlbertForPreTraining


def test_flops_per_token_matches_a_hand_count():
    # tiny: V=1000, E=32, H=64, L=2, I=128; T=64, P=10. Forward multiply-adds per position:
    # E·H = 2048; L·(4H² + 2HI) = 2·(16384 + 16384) = 65536; L·2·T·H = 16384;
    # P/T·(HE + EV) = 10/64·(2048 + 32000) = 5320; (H² + 2H)/T = 4224/64 = 66. Sum 89354, × 6 = 536124.
    assert flops_per_token(AlbertConfig.preset("tiny"), 64, 10) == pytest.approx(536124)


def test_flops_per_token_counts_shared_layers_at_every_use():
    one, two = AlbertConfig.preset("tiny", inner_group_num=1), AlbertConfig.preset("tiny", inner_group_num=2)
    layer = 6 * (4 * 64 * 64 + 2 * 64 * 128 + 2 * 64 * 64)  # one more application of each of the L=2 layers
    assert flops_per_token(two, 64, 10) - flops_per_token(one, 64, 10) == pytest.approx(2 * layer)


def test_flops_per_token_matches_torch_flop_counter():
    torch.manual_seed(0)
    config = AlbertConfig.preset("tiny")
    model = AlbertForPreTraining(config)
    ids, positions = torch.randint(5, 1000, (2, 64)), torch.randint(1, 64, (2, 10))
    # The math backend runs attention as bmm, which the counter sees; fused kernels on CPU it does not.
    with sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
        out = model(ids, torch.zeros_like(ids), torch.ones_like(ids), positions)
        (out.prediction_logits.sum() + out.sop_logits.sum()).backward()
    assert counter.get_total_flops() == pytest.approx(2 * 64 * flops_per_token(config, 64, 10))


def test_a_bare_cuda_device_is_pinned_to_its_first_gpu():
    # torch.cuda.set_device refuses torch.device("cuda"): bench/mfu.py's default on a GPU machine.
    assert resolve_device("cuda") == torch.device("cuda", 0)
    assert resolve_device("cuda:1") == torch.device("cuda", 1)
    assert resolve_device("cpu") == torch.device("cpu")


def test_mfu_times_steps_the_shard_loader_feeds_and_writes_its_results(pipeline_run, tmp_path):
    # The GPU run's code path on CPU: FSDP2 on a 1-device mesh, dynamic masking from real shards, results files.
    from mfu import main

    argv = ["--device", "cpu", "--preset", "tiny", "--batch_size", "4", "--steps", "2", "--warmup", "1"]
    main([*argv, "--seq_len", "128", "--shards", str(pipeline_run.shards), "--results", str(tmp_path)])
    body = json.loads((tmp_path / "mfu.json").read_text())
    tiny = body["figures"]["tiny"]
    assert all(rows == 4 and length <= 128 for rows, length in tiny["shapes"])
    assert 0 < tiny["tokens_per_step"] <= 4 * 128
    mfu, share = body["ratios"]["mfu_model_step_tiny"], body["ratios"]["loader_share_tiny"]
    assert mfu["value"] == pytest.approx(mfu["numerator"] / mfu["denominator"]) and mfu["value"] > 0
    assert 0 < share["value"] < 1
    assert body["figures"]["peak_source"].startswith("CPU estimate")
    assert not [v for v in body["verdicts"] if v.split()[0] in ("PASS", "FAIL", "MIXED")]  # a GPU target, not judged
    with pytest.raises(SystemExit, match="shards of 128 tokens"):
        main([*argv, "--seq_len", "64", "--shards", str(pipeline_run.shards), "--results", str(tmp_path)])


def test_the_reference_baseline_makes_sop_pairs_with_15_percent_masked(pipeline_run, tmp_path):
    # bench/pipeline.py's vs_reference_10x divides by this baseline's rate: it must do the reference's work.
    import sentencepiece as spm
    from reference_instances import create_instances, features, main, parse_args

    argv = ["--input", str(pipeline_run.sentences), "--spiece", str(pipeline_run.spiece), "--files", "2"]
    argv += ["--dupe_factor", "2", "--max_seq_length", "64", "--max_predictions_per_seq", "10"]
    config = parse_args([*argv, "--result", str(tmp_path / "result.json")])
    paths = sorted(str(p) for p in pipeline_run.sentences.glob("sentences-*-of-*.parquet"))[:2]
    sp = spm.SentencePieceProcessor(model_file=str(pipeline_run.spiece))
    instances = create_instances(paths, sp, config)
    for i in instances:
        assert len(i.tokens) <= 64 and i.tokens[0] == "[CLS]" and i.tokens[-1] == "[SEP]"
        assert len(i.segment_ids) == len(i.tokens) == len(i.token_boundary)
        assert i.tokens[i.segment_ids.index(1) - 1] == "[SEP]" and "[SEP]" not in i.masked_lm_labels
        assert i.masked_lm_positions == sorted(set(i.masked_lm_positions)) == sorted(i.masked_lm_positions)
        assert len(i.masked_lm_labels) == len(i.masked_lm_positions) <= min(10, max(1, round(len(i.tokens) * 0.15)))
        assert {len(v) for k, v in features(i, sp, 64, 10).items() if k.startswith("input")} == {64}
    masked = sum(len(i.masked_lm_positions) for i in instances) / sum(len(i.tokens) for i in instances)
    assert 0.12 < masked < 0.16  # round(0.15 × length) a row, less a span now and then that would overflow
    assert 0.45 < sum(i.is_random_next for i in instances) / len(instances) < 0.8  # swapped half, and lone segments
    main([*argv, "--result", str(tmp_path / "result.json")])
    body = json.loads((tmp_path / "result.json").read_text())
    assert body["instances"] == len(instances) and body["tokens"] == sum(len(i.tokens) for i in instances)


def test_interleave_alternates_settings_round_by_round():
    assert measure.interleave(["A", "B"], 3) == [(0, "A"), (0, "B"), (1, "A"), (1, "B"), (2, "A"), (2, "B")]
    with pytest.raises(ValueError):
        measure.interleave(["A"], 0)


def test_run_rounds_calls_in_interleaved_order_and_groups_by_setting():
    calls = []

    def fake(label: str) -> dict:
        calls.append(label)
        return {"n": len(calls)}

    results = measure.run_rounds(["A", "B", "C"], 2, fake)
    assert calls == ["A", "B", "C", "A", "B", "C"]
    assert results == {"A": [{"n": 1}, {"n": 4}], "B": [{"n": 2}, {"n": 5}], "C": [{"n": 3}, {"n": 6}]}


def test_summary_gives_median_and_spread():
    s = measure.summary([2.0, 1.0, 4.0, 3.0])
    assert s == {"median": 2.5, "min": 1.0, "max": 4.0, "spread": pytest.approx(3.0 / 2.5), "n": 4}
    assert measure.summary([5.0])["spread"] == 0.0
    with pytest.raises(ValueError):
        measure.summary([])


def test_verdicts_are_withheld_on_a_loaded_machine():
    ratios = {"speedup": measure.ratio(3.0, 2.0, "wall at 1 worker ÷ wall at 2")}
    assert measure.verdicts(ratios, {"speedup": (">=", 1.7)}, load=0.0)[0].startswith("FAIL speedup = 1.5")
    assert measure.verdicts(ratios, {"speedup": ("<=", 1.7)}, load=0.1)[0].startswith("PASS")
    loaded = measure.verdicts(ratios, {"speedup": (">=", 1.7)}, load=0.8)
    assert len(loaded) == 1 and loaded[0].startswith("NO VERDICT") and "0.80" in loaded[0]


def test_a_target_the_rounds_fall_on_both_sides_of_is_mixed(tmp_path):
    straddling = measure.ratio(0.81, 1.0, "x ÷ y", rounds=[0.78, 0.81, 0.84])
    every = measure.ratio(0.85, 1.0, "x ÷ y", rounds=[0.82, 0.85, 0.9])
    none = measure.ratio(0.7, 1.0, "x ÷ y", rounds=[0.6, 0.7, 0.79])
    targets = {name: (">=", 0.8) for name in ("a", "b", "c")}
    lines = measure.verdicts({"a": straddling, "b": every, "c": none}, targets, load=0.0)
    assert lines[0] == "MIXED a = 0.81 (target >= 0.8; 2/3 rounds meet it, 0.78-0.84): x ÷ y"
    assert lines[1].startswith("PASS b = 0.85 (target >= 0.8; 3/3 rounds")
    assert lines[2].startswith("FAIL c = 0.7 (target >= 0.8; 0/3 rounds")
    assert straddling["rounds"]["values"] == [0.78, 0.81, 0.84] and straddling["rounds"]["median"] == 0.81
    _, md_path = measure.write_results(tmp_path, "fake", {}, {"a": straddling}, 0.0, lines)
    assert "| a | 0.81 | 0.78-0.84 |" in md_path.read_text()


def test_write_results_records_the_machine_and_what_each_ratio_divides(tmp_path):
    ratios = {"encode_cost": measure.ratio(3.0e6, 4.0e6, "stage tokens per CPU-s ÷ raw encode tokens per CPU-s")}
    lines = measure.verdicts(ratios, {"encode_cost": (">=", 0.8)}, load=0.1)
    json_path, md_path = measure.write_results(tmp_path / "results", "fake", {"x": [1, 2]}, ratios, 0.1, lines)
    body = json.loads(json_path.read_text())
    for field in ("date", "commit", "dirty", "command", "cores", "loadavg_1_5_15", "load_other_cores", "loaded"):
        assert field in body, field
    assert body["bench"] == "fake" and body["figures"] == {"x": [1, 2]} and body["loaded"] is False
    r = body["ratios"]["encode_cost"]
    assert r["value"] == pytest.approx(r["numerator"] / r["denominator"]) == pytest.approx(0.75)
    assert "raw encode" in r["divides"] and body["verdicts"] == [
        "FAIL encode_cost = 0.75 (target >= 0.8): " + r["divides"]
    ]
    md = md_path.read_text()
    assert "encode_cost" in md and "3e+06 / 4e+06" in md and body["commit"][:12] in md


def test_the_pipeline_benchs_larger_copy_is_a_segment_folder_the_instances_stage_accepts(pipeline_run, tmp_path):
    from pipeline import build_copies

    from pipelines.contracts.manifest import Manifest
    from tests.conftest import PipelineRun, run_instances

    copies = tmp_path / "sentences-2x"
    build_copies(pipeline_run.sentences, pipeline_run.corpus / "stats.json", copies, copies=2)
    run_instances(PipelineRun(pipeline_run.corpus, copies, pipeline_run.vocab, pipeline_run.shards), tmp_path / "o")
    doubled, single = Manifest.read(tmp_path / "o"), Manifest.read(pipeline_run.shards)
    assert doubled.normalizer == single.normalizer
    assert doubled.counters["documents"] == 2 * single.counters["documents"]


def test_raw_encode_is_timed_with_the_collector_paused_then_running_on_the_same_tokens(
    pipeline_run, tmp_path, monkeypatch
):
    from pipeline import encode_main

    paused = []
    real_disable = gc.disable

    def disable() -> None:  # seen: the collector paused for one timing
        paused.append(True)
        real_disable()

    monkeypatch.setattr(gc, "disable", disable)
    result = tmp_path / "encode.json"
    encode_main(str(result), str(pipeline_run.sentences), str(pipeline_run.vocab / "spiece.model"),
                str(pipeline_run.sentences))  # fmt: skip
    body = json.loads(result.read_text())
    assert paused == [True] and gc.isenabled()  # paused once, and running again afterwards
    assert body["tokens"] == body["one_call_tokens"] > 0  # the same sentences, per file and in one call
    assert body["files"] == len(list(pipeline_run.sentences.glob("sentences-*.parquet")))
    assert min(body[k] for k in ("cpu_s", "collector_cpu_s", "stage_encode_cpu_s", "one_call_cpu_s")) > 0


def test_the_step_timer_counts_each_step_without_the_timed_steps_it_calls(monkeypatch):
    import instances_steps

    clock = iter([0.0, 1.0, 5.0, 6.0, 6.5, 10.0])  # outer opens, inner 1-5, inner 6-6.5, outer closes at 10
    monkeypatch.setattr(instances_steps.time, "process_time", lambda: next(clock))
    timer = instances_steps.StepTimer()
    inner = timer.timed("inner", lambda x: x + 1)
    with timer.step("outer"):
        assert inner(1) == 2 and inner(2) == 3
    assert timer.cpu_s == {"outer": 10.0 - 4.0 - 0.5, "inner": 4.5}


def test_instances_steps_times_every_step_of_the_dofn_against_raw_encode(pipeline_run, tmp_path):
    import instances_steps

    from pipelines import instances

    originals = {name: getattr(owner, name) for owner, name, _ in instances_steps.STEPS.values()}
    spiece = pipeline_run.vocab / "spiece.model"
    argv = ["--sentences", str(pipeline_run.sentences), "--spiece", str(spiece), "--rounds", "1"]
    found = instances_steps.main([*argv, "--results", str(tmp_path)])
    # Each step ran (a renamed function the DoFn no longer calls would count nothing) and was put back after.
    assert all(found[step]["numerator"] > 0 for step in [*instances_steps.STEPS, instances_steps.REST])
    assert {name: getattr(owner, name) for owner, name, _ in instances_steps.STEPS.values()} == originals
    assert instances._encode_ids is originals["_encode_ids"]
    body = json.loads((tmp_path / "instances_steps.json").read_text())
    (run,) = body["figures"]["runs"]
    assert run["tokens"] > 0 and run["files"] == len(list(pipeline_run.sentences.glob("sentences-*.parquet")))
    steps_cpu_s = sum(run["steps_cpu_s"].values())
    assert found["loop_encode_cost_d1"]["value"] == pytest.approx(run["raw_cpu_s"] / steps_cpu_s)
    assert found["tokenise"]["value"] == pytest.approx(run["steps_cpu_s"]["tokenise"] / run["raw_cpu_s"])


def test_the_dedup_benchs_copy_marks_every_word_of_copies_after_the_first(tmp_path):
    from dedup import mark_copies
    from pipeline import build_copies

    from pipelines.contracts.documents import SENTENCES_SCHEMA, file_index, file_name, table_from_rows
    from pipelines.runtime import files

    source, copies = tmp_path / "sentences", tmp_path / "copies"
    rows = [{"id": f"d{i}", "sentences": ["same words here.", f"doc {i}."], "meta": "{}"} for i in range(4)]
    files.write_parquet_atomically(str(source / file_name("sentences", 0, 1)), table_from_rows(rows, SENTENCES_SCHEMA))
    files.write_json_atomically(str(source / "stats.json"), {"normalizer": {}})
    files.write_json_atomically(str(tmp_path / "corpus.json"), {"counters": {"document_bytes": 100}})
    n = build_copies(source, tmp_path / "corpus.json", copies, copies=3)
    mark_copies(copies)
    written = {
        r["id"]: r["sentences"]
        for p in copies.glob("sentences-*.parquet")
        for r in files.read_parquet(str(p)).to_pylist()
    }
    assert len(written) == 12 and all(file_index(i, n) == int(p.name[10:15]) for p in copies.glob("s*.parquet")
                                      for i in files.read_parquet(str(p)).column("id").to_pylist())  # fmt: skip
    assert written["d1#0"] == ["same words here.", "doc 1."]
    assert written["d1#2"] == ["samex2 wordsx2 here.x2", "docx2 1.x2"]  # distinct text, the same repeats


def test_the_scale_corpus_is_seeded_per_file_and_repeats_no_long_sentence(tmp_path):
    import collections

    import scale_corpus

    pool = scale_corpus.sentence_pool()
    for name in ("a", "b"):
        scale_corpus._write_file(tmp_path / f"{name}.jsonl", 3, 400_000, 0, pool)
    scale_corpus._write_file(tmp_path / "other.jsonl", 4, 400_000, 0, pool)
    assert (tmp_path / "a.jsonl").read_bytes() == (tmp_path / "b.jsonl").read_bytes()  # (seed, index) alone
    texts = [json.loads(line)["text"] for name in ("a", "other") for line in open(tmp_path / f"{name}.jsonl")]
    assert len(set(texts)) == len(texts) and {json.loads(open(tmp_path / "a.jsonl").readline())["label"]} <= set(pool)
    long = [s for text in texts for s in text.split(". ") if len(s.split()) >= 8]
    repeats = sum(n - 1 for n in collections.Counter(long).values())
    assert len(long) > 1000 and repeats <= len(long) // 1000  # the dedup stage's passages stay distinct
