"""Beam pipelines that turn documents into ALBERT pretraining shards, in data-flow order.

- ``corpus``    documents with stable ids (embedded default: Python's own documentation) → ``data/corpus/``
- ``segment``   documents → normalised sentences                                         → ``data/sentences/``
- ``vocab``     a hash-bounded sentence sample → SentencePiece unigram model              → ``data/vocab/``
- ``instances`` SOP pairs with n-gram masks → Arrow IPC shards + ``manifest.json``        → ``data/shards/``

Each stage runs as ``python -m pipelines.<stage>`` (``--help`` lists its flags; unknown flags go to Beam) and
under ``dvc repro``. Pure algorithm modules (``textnorm``, ``sentences``, ``sop``, ``masking``, ``shards``,
``seeding``, and ``masked_pairs``, which makes ``sop``'s pairs into the masked sequences ``instances`` writes)
import neither Beam nor torch.
"""

import logging as _logging

# Beam logs this at import on every machine without the GCP extras, which no local stage needs: keep it out of
# every command's output (the GCP runners install apache-beam[gcp], which has apitools).
_logging.getLogger().addFilter(lambda record: "apitools not found" not in record.getMessage())
