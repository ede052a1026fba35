"""Fine-tuning heads: each exports as the transformers task model it mirrors and gives its outputs, and the
fine-tuning module trains each of them."""

from __future__ import annotations

import pytest
import torch
import transformers

from albert_lightning.evaluation.finetuning import AlbertFineTuning
from albert_lightning.heads import HEADS
from albert_lightning.interop.hf import export_hf
from tests.test_hf import padded_batch, tiny


def _fine_tuned(head: str, seed: int = 0) -> AlbertFineTuning:
    torch.manual_seed(seed)
    module = AlbertFineTuning(tiny(seed), num_labels=3, head=head).eval()
    with torch.no_grad():  # a trained-looking head: the export must carry it, not a fresh one
        for parameter in module.network.parameters():
            parameter.add_(torch.randn_like(parameter) * 0.02)
    return module


def _choice_batch() -> dict[str, torch.Tensor]:
    """2 questions of 4 options, each option its own padded row."""
    g = torch.Generator().manual_seed(11)
    input_ids = torch.randint(5, 1000, (2, 4, 16), generator=g)
    attention_mask = (torch.arange(16) < torch.randint(6, 17, (2, 4, 1), generator=g)).long()
    token_type_ids = (torch.arange(16) >= 5).long().expand(2, 4, 16).clone()
    return {"input_ids": input_ids * attention_mask, "token_type_ids": token_type_ids, "attention_mask": attention_mask}


@pytest.mark.parametrize("head", list(HEADS))
def test_a_fine_tuned_head_exports_as_its_transformers_model_with_the_same_outputs(tmp_path, head: str) -> None:
    module = _fine_tuned(head)
    network = module.network
    export_hf(network, network.albert.config, tmp_path)
    theirs, info = getattr(transformers, HEADS[head]).from_pretrained(tmp_path, output_loading_info=True)
    assert not any(info.values()), info  # no missing, unexpected or mismatched keys
    batch = _choice_batch() if head == "choice" else padded_batch()
    with torch.no_grad():
        ours = module(batch)
        expected = theirs.eval()(**batch)
    if head == "span":
        torch.testing.assert_close(ours[:, 0], expected.start_logits, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(ours[:, 1], expected.end_logits, atol=1e-5, rtol=1e-5)
    else:
        torch.testing.assert_close(ours, expected.logits, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("head", ["span", "choice"])
def test_fine_tuning_fits_a_batch_with_each_reading_head(head: str) -> None:
    module = _fine_tuned(head).train()
    batch = _choice_batch() if head == "choice" else padded_batch()
    if head == "span":
        batch |= {"start_positions": torch.tensor([7, 2, 1]), "end_positions": torch.tensor([9, 5, 3])}
    else:
        batch |= {"labels": torch.tensor([2, 0])}
    optimizer = torch.optim.Adam(module.parameters(), lr=1e-3)
    losses = []
    for _ in range(30):
        loss = module._loss(module(batch), batch)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert losses[-1] < 0.2 * losses[0], losses[::5]


def test_an_unknown_head_is_refused() -> None:
    with pytest.raises(ValueError, match="head='tagging': choose one of classification, span, choice"):
        AlbertFineTuning(tiny(), head="tagging")
