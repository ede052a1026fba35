"""Which pieces the masked-LM targets of a shard folder are: the most frequent ones and their share of all targets.

Reads the train shards listed in the folder's ``manifest.json`` (Arrow IPC files, columns ``input_ids``,
``masked_lm_positions`` and ``masked_lm_ids``) and names the ids with the folder's ``spiece.model``. Shows how
often whitespace (the bare piece "▁") is a target, and how often it is one without the piece after it, or the
other way round: why ``pipelines/algorithms/masking.py`` joins a bare "▁" to the word after it.

    python bench/masked_pieces.py /tmp/shards_before --top 15
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa

from pipelines.algorithms.vocab_layout import load_spiece
from pipelines.contracts.manifest import SPIECE, Manifest
from pipelines.contracts.shards import open_shard

BARE_SPACE = "▁"


@dataclass
class Targets:
    counts: np.ndarray  # [vocab] how often each id is a target
    bare_alone: int = 0  # a bare "▁" is a target and the piece after it is not
    after_bare_alone: int = 0  # the piece after a bare "▁" is a target and the "▁" is not


def _flat(column: pa.ChunkedArray) -> tuple[np.ndarray, np.ndarray]:
    """Returns a list column's values end to end and its row offsets."""
    array = column.combine_chunks()
    return array.flatten().to_numpy().astype(np.int64), array.offsets.to_numpy().astype(np.int64)


def _add_shard(targets: Targets, table: pa.Table, bare_id: int) -> None:
    tokens, token_offsets = _flat(table.column("input_ids"))
    positions, target_offsets = _flat(table.column("masked_lm_positions"))
    labels, _ = _flat(table.column("masked_lm_ids"))
    rows = np.repeat(np.arange(table.num_rows), np.diff(target_offsets))
    where = token_offsets[rows] + positions
    tokens[where] = labels  # the originals: replacements undone
    is_target = np.zeros(len(tokens) + 1, dtype=bool)  # one past the end: the last token has no successor
    is_target[where] = True
    bare = np.flatnonzero(tokens == bare_id)
    targets.bare_alone += int(np.sum(is_target[bare] & ~is_target[bare + 1]))
    targets.after_bare_alone += int(np.sum(~is_target[bare] & is_target[bare + 1]))
    found = np.bincount(labels, minlength=len(targets.counts))
    targets.counts[: len(found)] += found[: len(targets.counts)]


def read_targets(folder: Path, pieces: Sequence[str], split: str = "train") -> Targets:
    """Returns the target statistics of the ``split`` shards of ``folder``'s manifest."""
    targets = Targets(np.zeros(len(pieces), dtype=np.int64))
    bare_id = pieces.index(BARE_SPACE) if BARE_SPACE in pieces else -1
    for path in Manifest.read(folder).paths(folder, split):
        _add_shard(targets, open_shard(path), bare_id)
    return targets


def table(targets: Targets, pieces: Sequence[str], top: int) -> list[str]:
    """Returns markdown lines: the ``top`` pieces by count with their share, then the bare "▁" figures."""
    counts, total = targets.counts, int(targets.counts.sum())
    if total == 0:
        raise SystemExit("no masked-LM targets in the shards")
    lines = [f"{total:,} targets", "", "| rank | piece | count | share |", "|---:|---|---:|---:|"]
    for rank, i in enumerate(np.argsort(-counts, kind="stable")[:top], start=1):
        lines.append(f"| {rank} | `{pieces[i]}` | {counts[i]:,} | {counts[i] / total:.2%} |")
    bare = int(counts[pieces.index(BARE_SPACE)]) if BARE_SPACE in pieces else 0
    return [
        *lines,
        "",
        f'share of bare "{BARE_SPACE}": {bare / total:.2%} ({bare:,} targets)',
        f'bare "{BARE_SPACE}" a target without the piece after it: {targets.bare_alone:,}',
        f'piece after a bare "{BARE_SPACE}" a target without it: {targets.after_bare_alone:,}',
    ]


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path, help="shard folder: manifest.json, spiece.model and the shards")
    parser.add_argument("--top", type=int, default=15, help="how many of the most frequent targets to list")
    parser.add_argument("--split", default="train", help="which shards of the manifest to read")
    args = parser.parse_args(argv)
    sp = load_spiece(args.folder / SPIECE)
    pieces = [sp.id_to_piece(i) for i in range(sp.get_piece_size())]
    print("\n".join(table(read_targets(args.folder, pieces, args.split), pieces, args.top)))


if __name__ == "__main__":
    main()
