"""Hugging Face interoperability: ``transformers`` folders in and out (``hf``, with the tokenizer files in
``hf_tokenizer``), the one reader of a start (``pretrained``) and the export command (``export``)."""
