"""Readers of the corpus stage's inputs: users' files in every format it takes (``sources``), the embedded
default corpus of Python's own documentation (``pydocs``), and a document's class label (``labels``)."""
