"""Downstream evaluation: the command line (``cli``), fine-tuning (``finetuning``), task files (``task_files``), the
plan of sizes, seeds and steps (``plan``), learning-rate selection, metrics, intervals and the report; extractive
reading comprehension (SQuAD, RACE, the span task) in ``reading``."""
