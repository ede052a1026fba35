"""Hugging Face interoperability: ``transformers`` folders in and out (``hf``) and the export command (``export``)."""
