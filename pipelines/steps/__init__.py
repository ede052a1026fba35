"""Work of a stage too large for its command module, one file per stage: ``dedup``'s six steps."""
