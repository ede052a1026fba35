"""The tasks stage's example builders, pure functions of their inputs: which split a document is in, which
packages are classes, and the balanced ``same_module`` pairs of one split (``pipelines.tasks`` runs them)."""

from __future__ import annotations

import collections

from pipelines.hashes import stable_hash64, unit_interval

__all__ = ["module_pairs", "split_of", "top_packages"]


def split_of(document_id: str, dev_fraction: float, test_fraction: float) -> str:
    """Returns the split of a document: by the hash of its id alone, so every task and seed agree."""
    u = unit_interval("tasks-split", document_id)
    return "test" if u < test_fraction else "dev" if u < test_fraction + dev_fraction else "train"


def top_packages(counts: dict[str, int], num_packages: int, min_documents: int) -> list[str]:
    """Returns the sorted names of the ``num_packages`` largest packages with at least ``min_documents``."""
    eligible = sorted((-n, name) for name, n in counts.items() if n >= min_documents)
    return sorted(name for _, name in eligible[:num_packages])


def _partner(pool: list[dict], start: int, anchor: dict, used: set) -> dict | None:
    """Returns the first document of ``pool`` from ``start`` on (cyclically) not yet paired with ``anchor``."""
    for k in range(len(pool)):
        candidate = pool[(start + k) % len(pool)]
        if frozenset((anchor["id"], candidate["id"])) not in used:
            return candidate
    return None


def module_pairs(passages: list[dict], pairs_per_document: int, seed: int) -> tuple[list[dict], collections.Counter]:
    """Returns the balanced ``same_module`` rows of one split's passages and what happened, counted.

    Args:
        passages: dicts with ``id``, ``text``, ``module`` and ``package``, in any order.
        pairs_per_document: positives anchored at each document; each comes with one negative.
        seed: orders documents (``stable_hash64``) and picks negatives, so the output depends on nothing else.
    """
    order = sorted(passages, key=lambda p: (stable_hash64(seed, "pairs", p["id"]), p["id"]))
    by_module: dict[str, list[dict]] = collections.defaultdict(list)
    by_package: dict[str, list[dict]] = collections.defaultdict(list)
    for p in order:
        by_module[p["module"]].append(p)
        by_package[p["package"]].append(p)
    rows, counts, used = [], collections.Counter(), set()
    for anchor in order:
        same = by_module[anchor["module"]]
        if len(same) < 2:
            counts["documents_without_partner"] += 1
            continue
        pool, kind = [p for p in by_package[anchor["package"]] if p["module"] != anchor["module"]], "hard_negatives"
        if not pool:
            pool, kind = [p for p in order if p["package"] != anchor["package"]], "easy_negatives"
        at = same.index(anchor)
        for d in range(1, min(pairs_per_document, len(same) - 1) + 1):
            positive = same[(at + d) % len(same)]
            draw = stable_hash64(seed, "negative", anchor["id"], d) % max(1, len(pool))
            negative = _partner(pool, draw, anchor, used)
            # Both rows or neither, so the balance holds; a small module has few distinct positives.
            if negative is None or frozenset((anchor["id"], positive["id"])) in used:
                counts["pairs_without_negative" if negative is None else "repeated_pairs"] += 1
                continue
            used.update({frozenset((anchor["id"], positive["id"])), frozenset((anchor["id"], negative["id"]))})
            rows += [_pair_row(anchor, positive, "1"), _pair_row(anchor, negative, "0")]
            counts.update({"positive_pairs": 1, "negative_pairs": 1, kind: 1})
    return rows, counts


def _pair_row(a: dict, b: dict, label: str) -> dict:
    return {"id": a["id"], "id_b": b["id"], "text": a["text"], "text_b": b["text"], "label": label}
