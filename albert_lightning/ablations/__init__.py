"""The ablation grid read back: its runs in the shape of the paper's tables (``report``) and what they show
(``findings``)."""
