"""The embedded default's span task (pure): "what does X return?" over a docstring, answered by its own words.

A function's or method's docstring that says what it returns in a sentence of its own ("Return the base name of
pathname p.") gives a question about that function over the docstring, whose answer is the sentence's object
("the base name of pathname p"): a natural question, a real passage, and an answer taken from the docstring's
own structure, not a random span. Written in SQuAD's layout by the tasks stage, so the same reader, model and
metrics serve it and SQuAD.

The passage is the docstring's first ``max_sentences`` sentences (the long ones, like numpy's, go on for pages,
which a CPU evaluation cannot afford to window through); a docstring whose return sentence is beyond them, or
whose answer is not a short phrase (numpy's "Returns ------- out : ndarray" sections), gives no question.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

__all__ = ["return_question"]

# "return"/"returns" then the object, up to an optional final full stop. The object must start like a phrase:
# numpy-style section headers ("returns -------") and field lists ("returns: ...") do not.
_RETURN = re.compile(r"returns?\s+(?P<answer>[\w`'\"(\[*][^\n]*?)\.?$", re.IGNORECASE)
MIN_WORDS, MAX_WORDS = 2, 20
KINDS = ("function", "method")


def return_question(
    document_id: str, sentences: Sequence[str], meta: dict[str, Any], max_sentences: int
) -> dict[str, Any] | None:
    """Returns one question in SQuAD's layout (``id``, ``title``, ``question``, ``context``, ``answers``) for a
    documented function or method whose docstring has a sentence saying what it returns, else None."""
    if meta.get("kind") not in KINDS or not meta.get("qualname"):
        return None
    passage = list(sentences[:max_sentences])
    offset = 0
    for sentence in passage:
        found = _RETURN.match(sentence)
        if found and _is_phrase(found["answer"]):
            name = f"{meta['module']}.{meta['qualname']}"
            start = offset + found.start("answer")
            answer = {"text": found["answer"], "answer_start": start}
            context = " ".join(passage)
            return {"id": document_id, "title": name, "question": f"what does {name} return?", "context": context,
                    "answers": [answer]}  # fmt: skip
        offset += len(sentence) + 1  # the joining space
    return None


def _is_phrase(answer: str) -> bool:
    words = answer.split()
    return MIN_WORDS <= len(words) <= MAX_WORDS and "---" not in answer and " : " not in answer
