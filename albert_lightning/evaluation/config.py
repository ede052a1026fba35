"""The ``evaluate`` command's config: the ``evaluate`` section of ``params.yaml``, each field also a ``--flag``
(``cli`` reads it; ``inputs``, the runners and the report take it)."""

from __future__ import annotations

import dataclasses

__all__ = ["EvaluateConfig"]


@dataclasses.dataclass
class EvaluateConfig:
    """The ``evaluate`` section of params.yaml; each field is also a ``--flag``."""

    tasks: list[str] = dataclasses.field(
        default_factory=lambda: ["data/tasks"],
        metadata={
            "help": "the tasks stage's folder (its every task), task folders, GLUE or CLUE names, squad1/2, race"
        },
    )
    glue_dir: str | None = dataclasses.field(
        default=None, metadata={"help": "folder of GLUE's task folders, which names like CoLA are read from"}
    )
    checkpoint: str = dataclasses.field(
        default="data/pretrain/checkpoints/last.ckpt",
        metadata={"help": "pretrained checkpoint (or HF folder) to fine-tune"},
    )
    spiece: str = dataclasses.field(
        default="data/vocab",
        metadata={"help": "the vocabulary the checkpoint was pretrained with: spiece.model, vocab.txt or a folder"},
    )
    shards: list[str] = dataclasses.field(
        default_factory=lambda: ["data/eval_shards/sop", "data/eval_shards/nsp"],
        metadata={"help": "held-out shards scored for MLM and SOP/NSP accuracy"},
    )
    output: str = dataclasses.field(
        default="data/eval", metadata={"help": "folder for the report, metrics.json and every run's predictions"}
    )
    leakage: str | None = dataclasses.field(
        default=None, metadata={"help": "the leakage stage's metrics.json, shown beside the scores"}
    )
    max_seq_length: int = dataclasses.field(
        default=128, metadata={"help": "pieces per fine-tuning example, special tokens included"}
    )
    batch_size: int = dataclasses.field(default=32, metadata={"help": "examples per fine-tuning and scoring batch"})
    epochs: float = dataclasses.field(
        default=3.0,
        metadata={"help": "passes over the training set per fine-tuning run, within the step floor and cap"},
    )
    min_steps: int = dataclasses.field(
        default=30,
        metadata={"help": "floor of steps per fine-tuning run: 32 examples are one batch, too few steps to learn"},
    )
    max_steps: int = dataclasses.field(
        default=300, metadata={"help": "cap of steps per fine-tuning run (CPU budget); -1 for none"}
    )
    lrs: list[float] = dataclasses.field(
        default_factory=lambda: [1e-4],
        metadata={"help": "fine-tuning learning rates; each start uses the best on a held-out slice, one skips that"},
    )
    lr_selection_fraction: float = dataclasses.field(
        default=0.2, metadata={"help": "share of the training examples held out to choose the rate on"}
    )
    seed: int = dataclasses.field(
        default=12345, metadata={"help": "seed of the fine-tuning seeds, training subsets and bootstrap resamples"}
    )
    seeds: int = dataclasses.field(default=3, metadata={"help": "fine-tuning seeds per task and training-set size"})
    train_sizes: list[int] = dataclasses.field(
        default_factory=lambda: [32, 128, 512, 0],
        metadata={"help": "nested training-set sizes (a learning curve); 0: every example"},
    )
    bootstrap_resamples: int = dataclasses.field(
        default=2000, metadata={"help": "resamples of (seeds, dev examples) for the gain's interval"}
    )
    devices: int = dataclasses.field(default=1, metadata={"help": "devices each fine-tuning run is sharded over"})
    intrinsic_batches: int = dataclasses.field(
        default=20, metadata={"help": "held-out batches scored per shards folder"}
    )
    random_baseline: bool = dataclasses.field(
        default=True, metadata={"help": "also fine-tune a random model of the same shape (grids may skip it)"}
    )
    squad_dir: str | None = dataclasses.field(
        default=None, metadata={"help": "folder of SQuAD's official files (tasks squad1, squad2)"}
    )
    race_dir: str | None = dataclasses.field(default=None, metadata={"help": "folder of the RACE data (task race)"})
    clue_dir: str | None = dataclasses.field(
        default=None, metadata={"help": "folder of CLUE's <task>_public folders (tasks tnews … cmrc2018, c3)"}
    )
    doc_stride: int = dataclasses.field(
        default=128, metadata={"help": "context pieces between reading windows' starts (the reference's)"}
    )
    max_query_length: int = dataclasses.field(default=64, metadata={"help": "question pieces kept (the reference's)"})
    max_answer_length: int = dataclasses.field(
        default=30, metadata={"help": "pieces in a decoded answer (the reference's)"}
    )
    n_best_size: int = dataclasses.field(
        default=20, metadata={"help": "answer starts and ends tried per window (the reference's)"}
    )
