"""Reading comprehension: SQuAD and RACE files (``files``), answer spans over windows (``spans``), the official
metrics (``metrics``) and the fine-tune-and-score runner (``runner``)."""
