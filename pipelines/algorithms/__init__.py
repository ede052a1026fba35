"""Pure algorithms of the stages: text normalisation and sentences, hashing and seeding, the held-out split, SOP
pairs, n-gram masking, near duplicates and shared passages, in ALBERT's vocabulary id layout. They import
neither Beam nor torch, and touch no file: a test needs no pipeline, and training calls the same masking."""
