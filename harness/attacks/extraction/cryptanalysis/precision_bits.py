"""How many bits of output precision the exact extraction needs — the measure of a rounding
defense that falls out of a successful run. The attacker holds an exact copy of the model, so it
can replay its own attack, without a single query to the victim, against that copy behind an
API whose answers carry b significant bits (float64 carries 53, float32 24), and bisect b
between the bits at which the replay still extracts the copy exactly (max relative error ≤ 1e-6
on fresh inputs) and those at which it stops. Answers coarser than the reported bits stop this
attack (Carlini, Jagielski, Mironov 2020,
Sec. 4–6: precision is what the differential attack spends)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from harness.attacks.base import RunContext
from harness.core.errors import TimeLimit


@dataclass
class _Info:
    """The public facts of the replayed API (those the attack reads)."""

    dim: int
    n_outputs: int
    output: str
    interface: str
    gradient_of: str
    gradient_class: int
    x_pool: torch.Tensor
    device: torch.device


def significant(z: torch.Tensor, bits: float) -> torch.Tensor:
    """z rounded to `bits` significant bits."""
    _, exp = torch.frexp(z)
    step = torch.ldexp(torch.ones_like(z), (exp - int(bits)).to(torch.int32))
    return torch.round(z / step) * step


class RoundedCopy:
    """An oracle-like view of the attacker's own copy whose `predict` answers carry `bits`
    significant bits."""

    def __init__(self, model, info: _Info, bits: float):
        self.model, self.info, self.bits = model, info, bits
        self.queries = 0

    interface = property(lambda self: self.info.interface)
    output = property(lambda self: self.info.output)
    device = property(lambda self: self.info.device)
    remaining = None
    budget = None

    def offers(self, method: str) -> bool:
        return method == "predict" or (method == "explain" and self.info.interface != "prediction")

    def affordable(self, n: int) -> int:
        return n

    def _raw(self, x: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            return self.model(x.reshape(len(x), -1).to(torch.float64))

    def predict(self, x: Any) -> torch.Tensor:
        x = torch.as_tensor(x, dtype=torch.float64).reshape(-1, self.info.dim)
        self.queries += len(x)
        z = self._raw(x)
        if self.info.output == "probabilities":
            if z.shape[1] == 1:
                z = torch.cat([1 - torch.sigmoid(z), torch.sigmoid(z)], 1)
            else:
                z = torch.softmax(z, 1)
        return significant(z, self.bits)

    def explain(self, x: Any) -> torch.Tensor:
        x = torch.as_tensor(x, dtype=torch.float64).reshape(-1, self.info.dim).clone()
        x.requires_grad_(True)
        self.queries += len(x)
        with torch.enable_grad():
            out = self.model(x)
            if out.shape[1] == 1:
                target = out[:, 0]
            elif self.info.gradient_of == "sum":
                target = out.sum(1)
            elif self.info.gradient_of == "class":
                target = out[:, self.info.gradient_class]
            else:
                target = out.gather(1, out.detach().argmax(1, keepdim=True))[:, 0]
            (g,) = torch.autograd.grad(target.sum(), x)
        return g.detach()


class _Unmeasured(Exception):
    """A replay hit its time limit: whether it would have extracted the copy is unknown."""


def _replay(attack, params, model, info: _Info, bits: float, seed: int) -> bool:
    """Does the attack, replayed against the copy rounded to `bits`, extract it exactly?
    _Unmeasured when the replay ran out of time (neither yes nor no)."""
    oracle = RoundedCopy(model, info, bits)
    gen = torch.Generator().manual_seed(seed)
    ctx = RunContext(seed=seed, rng=None, gen=gen, device=info.device, outdir=None)
    try:
        art = attack.run(oracle, params, ctx)
    except TimeLimit:
        raise _Unmeasured from None
    except Exception:  # noqa: BLE001 - any other stop (precision, assumption, skip) is a failure here
        return False
    if art.stopped_by == "time":
        raise _Unmeasured
    if art.stopped_by is not None or art.data.get("model") is None:
        return False
    x = torch.randn(512, info.dim, generator=gen, dtype=torch.float64)
    with torch.no_grad():
        f, g = model(x), art.data["model"](x)
    if art.data.get("space") == "centered":
        f, g = f - f.mean(1, keepdim=True), g - g.mean(1, keepdim=True)
    return float((f - g).abs().max()) <= 1e-6 * float(f.pow(2).mean().sqrt())


def bits_needed(attack, params, model, view, seed: int, lo: int = 12, hi: int = 53,
                seconds: float = 30.0) -> float | None:
    """The fewest bits of output precision (in (lo, hi], to one bit) at which the attack replayed
    on its own copy `model` still extracts it exactly, one bit fewer having stopped it; None when
    that was not shown: even `hi` bits do not, even `lo` bits still do (below the range), or a
    replay ran past `seconds` (coarse answers make the exact search wander; a timeout is neither
    a success nor a stop, so it never moves the figure)."""
    info = _Info(view.info.dim, max(1, view.info.n_outputs), view.output, view.interface,
                 getattr(view.info, "gradient_of", "predicted"),
                 getattr(view.info, "gradient_class", 0),
                 torch.zeros(0, view.info.dim, dtype=torch.float64), torch.device("cpu"))
    model = model.cpu()
    inner = params.model_copy(update={"measure_bits": False,
                                      "max_seconds": min(params.max_seconds, seconds)})
    floor = lo
    try:
        if not _replay(attack, inner, model, info, hi, seed):
            return None
        while hi - lo > 1:  # invariant: hi succeeds, lo fails (or is the untested floor)
            mid = (lo + hi) // 2
            if _replay(attack, inner, model, info, mid, seed):
                hi = mid
            else:
                lo = mid
        if lo == floor and _replay(attack, inner, model, info, lo, seed):
            return None  # it extracts even at the floor: "fewer stop it" was not shown
    except _Unmeasured:
        return None
    return float(hi)
