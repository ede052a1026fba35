"""Downstream evaluation: the command line (``cli``) and its ``config``, a task's runs (``runner``), fine-tuning
(``finetuning``), tasks (``task_specs``), their files (``task_files``) and which a name means
(``task_resolution``), the plan of sizes, seeds and steps (``plan``), learning-rate selection, metrics, intervals
and the report; extractive reading comprehension (SQuAD, RACE, the span task) in ``reading``."""
