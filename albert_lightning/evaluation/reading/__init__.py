"""Reading comprehension: SQuAD and RACE files (``files``), pieces' spans in the original text (``spans``), the
model's windows over them (``windows``), answers decoded from windows (``decoding``), the official metrics
(``metrics``) and the fine-tune-and-score runner (``runner``)."""
