"""Beam pipelines that turn documents into ALBERT pretraining shards, in data-flow order.

- ``corpus``    documents with stable ids (embedded default: Python's own documentation) → ``data/corpus/``
- ``segment``   documents → normalised sentences                                         → ``data/sentences/``
- ``vocab``     a hash-bounded sentence sample → SentencePiece unigram model              → ``data/vocab/``
- ``instances`` SOP pairs with n-gram masks → Arrow IPC shards + ``manifest.json``        → ``data/shards/``
- ``tasks``     downstream classification tasks from the documents' metadata             → ``data/tasks/``

Each stage runs as ``python -m pipelines.<stage>`` (``--help`` lists its flags; unknown flags go to Beam) and
under ``dvc repro``. What they share: ``params`` and ``options`` (command line), ``stage`` (counters, output
clean-up), ``files`` and ``commands``. The contracts between them: ``documents``, ``shards`` and
``vocab_layout``. The algorithms (``textnorm``, ``sentences``, ``sop``, ``masking``, ``masked_pairs``,
``seeding``) and the contracts ``shards`` and ``vocab_layout`` are pure: they import neither Beam nor torch.
"""

import logging as _logging

# Beam logs this at import on every machine without the GCP extras, which no local stage needs: keep it out of
# every command's output (the GCP runners install apache-beam[gcp], which has apitools).
_logging.getLogger().addFilter(lambda record: "apitools not found" not in record.getMessage())
