"""The files one stage writes and the next reads: document and sentence files (``documents``) and the Arrow
shards with their manifest (``shards`` writes, ``manifest`` validates what a reader is handed)."""
