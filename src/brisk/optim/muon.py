"""Muon for the matrix-shaped weights and AdamW for the rest, as one torch Optimizer.

torch.optim.Muon (torch >= 2.9) orthogonalises each update with Newton-Schulz iterations and accepts only
2-D parameters: it raises ValueError for a conv filter (out, in, kh, kw) or a bias. So every parameter
with >= 2 dimensions goes to Muon through a 2-D proxy (out x in*kh*kw, the reshape Keller Jordan's Muon
uses for convs), and the others (biases, norm scales and shifts) go to AdamW. One object holds both, so
Lightning, LR schedulers, checkpoints and resume see a single optimizer.

`adjust_lr_fn="match_rms_adamw"` (Moonshot's scaling, "Muon is Scalable for LLM Training") scales Muon's
update to AdamW's RMS, so both halves share one learning rate: a schedule with one `max_lr` (OneCycle)
drives them together.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch.optim import AdamW, Muon, Optimizer

from brisk.registry import OPTIMIZERS


@OPTIMIZERS.register("muon")
class MuonWithAdamW(Optimizer):
    """The groups this optimizer shows (`param_groups`) hold the real parameters, so schedulers, gradient
    clipping and AMP's unscaling act on them as on any optimizer; each step passes their settings and
    gradients on to the inner Muon and AdamW."""

    def __init__(
        self,
        params: Iterable,
        lr: float = 0.02,
        weight_decay: float = 0.0,
        momentum: float = 0.95,
        betas: tuple[float, float] = (0.9, 0.999),
        adjust_lr_fn: str = "match_rms_adamw",
        ns_steps: int = 5,
    ) -> None:
        groups = list(params)
        if groups and not isinstance(groups[0], dict):
            groups = [{"params": groups}]
        matrix, other = [], []
        for group in groups:
            options = {k: v for k, v in group.items() if k != "params"}
            params = list(group["params"])
            if big := [p for p in params if p.ndim >= 2]:
                matrix.append({**options, "params": big})
            if small := [p for p in params if p.ndim < 2]:
                other.append({**options, "params": small})
        # `momentum` in the defaults: OneCycleLR then cycles each group's "momentum" (Muon's), as it does for SGD.
        super().__init__([*matrix, *other], {"lr": lr, "weight_decay": weight_decay, "momentum": momentum})
        self._pairs = [(p, p.detach().reshape(p.shape[0], -1).clone()) for g in matrix for p in g["params"]]
        proxies = iter(proxy for _, proxy in self._pairs)
        muon_groups = [{**g, "params": [next(proxies) for _ in g["params"]]} for g in matrix]
        kw = {"lr": lr, "weight_decay": weight_decay}
        self.muon = Muon(
            muon_groups or [torch.zeros(1, 1)], momentum=momentum, adjust_lr_fn=adjust_lr_fn, ns_steps=ns_steps, **kw
        )
        self.adamw = AdamW(other or [torch.zeros(1)], betas=betas, **kw)

    def _inner_groups(self) -> list[dict]:
        return [*(self.muon.param_groups if self._pairs else []), *self.adamw.param_groups][: len(self.param_groups)]

    @torch.no_grad()
    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for mine, inner in zip(self.param_groups, self._inner_groups(), strict=True):
            inner.update({k: v for k, v in mine.items() if k in inner and k != "params"})  # what a scheduler set
        for param, proxy in self._pairs:
            # Copied in each step: a checkpoint load or EMA's weight swap may have changed the weights.
            proxy.copy_(param.reshape(proxy.shape))
            proxy.grad = None if param.grad is None else param.grad.reshape(proxy.shape)
        self.muon.step()
        for param, proxy in self._pairs:
            if proxy.grad is not None:
                param.copy_(proxy.view_as(param))
                proxy.grad = None
        self.adamw.step()
        return loss

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "muon": self.muon.state_dict(), "adamw": self.adamw.state_dict()}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        super().load_state_dict({k: state_dict[k] for k in ("state", "param_groups")})
        self.muon.load_state_dict(state_dict["muon"])
        self.adamw.load_state_dict(state_dict["adamw"])
