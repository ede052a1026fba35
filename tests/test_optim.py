"""Optimiser module: parameter groups, a hand-computed LAMB step, convergence, schedule, state round trip, DTensor."""

from __future__ import annotations

import copy
import math
from pathlib import Path

import pytest
import torch
from torch import nn

from albert_lightning.optim import Lamb, build_optimizer, parameter_groups, warmup_linear_decay


def _tied_model() -> nn.Sequential:
    """Embedding(10, 4) → Linear → LayerNorm → Linear(4, 10) whose weight is the embedding's (as the MLM decoder)."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Embedding(10, 4), nn.Linear(4, 4), nn.LayerNorm(4), nn.Linear(4, 10))
    model[3].weight = model[0].weight
    return model


def test_groups_split_biases_and_layernorm_and_list_tied_weight_once() -> None:
    model = _tied_model()
    decay, no_decay = parameter_groups(model, weight_decay=0.01)
    assert (decay["weight_decay"], decay["adapt"]) == (0.01, True)
    assert (no_decay["weight_decay"], no_decay["adapt"]) == (0.0, False)
    assert {id(p) for p in decay["params"]} == {id(model[0].weight), id(model[1].weight)}
    expected = [model[1].bias, model[2].weight, model[2].bias, model[3].bias]
    assert {id(p) for p in no_decay["params"]} == {id(p) for p in expected}
    every = decay["params"] + no_decay["params"]
    assert len(every) == len({id(p) for p in every}) == 6  # the tied embedding/decoder weight appears once


def _lamb_step_by_hand(w: list[float], g: list[float], lr: float, wd: float, adapt: bool) -> list[float]:
    """One reference LAMB step from zero moments, no bias correction, written out element by element."""
    beta1, beta2, eps = 0.9, 0.999, 1e-6
    m = [(1 - beta1) * gi for gi in g]
    v = [(1 - beta2) * gi * gi for gi in g]
    update = [mi / (math.sqrt(vi) + eps) + wd * wi for mi, vi, wi in zip(m, v, w, strict=True)]
    w_norm, u_norm = math.hypot(*w), math.hypot(*update)
    ratio = w_norm / u_norm if adapt and w_norm > 0 and u_norm > 0 else 1.0
    return [wi - lr * ratio * ui for wi, ui in zip(w, update, strict=True)]


@pytest.mark.parametrize(("wd", "adapt"), [(0.01, True), (0.0, False)])
def test_lamb_matches_hand_computed_step(wd: float, adapt: bool) -> None:
    w0, g = [3.0, -4.0], [0.5, 2.0]
    p = nn.Parameter(torch.tensor(w0, dtype=torch.float64))
    p.grad = torch.tensor(g, dtype=torch.float64)
    Lamb([{"params": [p], "weight_decay": wd, "adapt": adapt}], lr=0.1).step()
    expected = torch.tensor(_lamb_step_by_hand(w0, g, lr=0.1, wd=wd, adapt=adapt), dtype=torch.float64)
    torch.testing.assert_close(p.detach(), expected)


def _least_squares_losses(name: str, steps: int = 200) -> tuple[float, float]:
    torch.manual_seed(0)
    a, x_true = torch.randn(32, 8), torch.randn(8, 1)
    b = a @ x_true
    model = nn.Linear(8, 1)
    opt = build_optimizer(model, name, lr=0.02, weight_decay=0.0)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = ((model(a) - b) ** 2).mean()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses[0], losses[-1]


@pytest.mark.parametrize("name", ["lamb", "adamw"])
def test_optimizers_lower_least_squares_loss(name: str) -> None:
    first, last = _least_squares_losses(name)
    assert last < 0.05 * first


def test_adamw_uses_the_same_groups() -> None:
    opt = build_optimizer(_tied_model(), "adamw", lr=1e-3)
    assert isinstance(opt, torch.optim.AdamW)
    assert [g["weight_decay"] for g in opt.param_groups] == [0.01, 0.0]
    assert opt.param_groups[0]["eps"] == 1e-6


def test_unknown_optimizer_names_the_choices() -> None:
    with pytest.raises(ValueError, match="lamb, adamw"):
        build_optimizer(_tied_model(), "sgd", lr=1e-3)


def test_schedule_warms_up_then_decays_linearly_to_zero() -> None:
    opt = build_optimizer(_tied_model(), "lamb", lr=0.002)
    sched = warmup_linear_decay(opt, warmup_steps=10, total_steps=110)
    lrs = []
    for _ in range(111):
        lrs.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    assert lrs[0] == 0.0 and lrs[5] == pytest.approx(0.001)
    # The reference's decay runs over the whole run: right after warm-up the factor is 1 - 10/110.
    assert lrs[10] == pytest.approx(0.002 * 100 / 110) and max(lrs) == pytest.approx(0.002 * 100 / 110)
    assert lrs[55] == pytest.approx(0.001)  # halfway through the run
    assert lrs[110] == 0.0
    with pytest.raises(ValueError):
        warmup_linear_decay(opt, warmup_steps=10, total_steps=10)


def _step(model: nn.Module, opt: torch.optim.Optimizer, seed: int) -> None:
    torch.manual_seed(seed)
    opt.zero_grad()
    model(torch.randint(0, 10, (3, 5))).pow(2).mean().backward()
    opt.step()


def test_state_dict_round_trip_continues_identically() -> None:
    model = _tied_model()
    opt = build_optimizer(model, "lamb", lr=0.01)
    for seed in range(3):
        _step(model, opt, seed)
    saved_model, saved_opt = copy.deepcopy(model.state_dict()), copy.deepcopy(opt.state_dict())
    for seed in range(3, 6):
        _step(model, opt, seed)

    resumed = _tied_model()
    resumed.load_state_dict(saved_model)
    resumed_opt = build_optimizer(resumed, "lamb", lr=0.01)
    resumed_opt.load_state_dict(saved_opt)
    for seed in range(3, 6):
        _step(resumed, resumed_opt, seed)
    for a, b in zip(model.parameters(), resumed.parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_lamb_on_dtensor_matches_plain_tensor(tmp_path: Path) -> None:
    dist = pytest.importorskip("torch.distributed")
    if not dist.is_available() or dist.is_initialized():
        pytest.skip("needs torch.distributed and no live process group")
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Shard, distribute_tensor

    # A file store needs neither a free port nor MASTER_ADDR/MASTER_PORT in os.environ.
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        mesh = init_device_mesh("cpu", (1,))
        torch.manual_seed(0)
        w, grads = torch.randn(6, 4), [torch.randn(6, 4) for _ in range(3)]
        plain = nn.Parameter(w.clone())
        sharded = nn.Parameter(distribute_tensor(w.clone(), mesh, [Shard(0)]))
        opts = [Lamb([q], lr=0.01, weight_decay=0.01) for q in (plain, sharded)]
        for g in grads:
            plain.grad = g.clone()
            sharded.grad = distribute_tensor(g.clone(), mesh, [Shard(0)])
            for opt in opts:
                opt.step()
        torch.testing.assert_close(sharded.detach().full_tensor(), plain.detach())
    finally:
        dist.destroy_process_group()
