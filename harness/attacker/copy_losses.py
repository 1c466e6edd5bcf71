"""The losses an attacker's copy of a model trains on (paper 000, Milli et al., Sec. 4 and App. D):
ℓ_M against the API's answers — squared error for regression, cross-entropy against labels or the
returned probabilities (soft targets), the top class as a hard label, and, beyond the paper, the
squared error of logit differences where the answers carry logits — and the scalar per input whose
gradient an explanation API returns (ℓ_G). Used by the surrogate (harness/attacks/extraction/).
"""

from __future__ import annotations

import torch
from torch import nn

from harness.core.answers import api_labels, decimal_grid


def gradient_target(out: torch.Tensor, of: str, cls: int, pred: torch.Tensor) -> torch.Tensor:
    """The scalar per input whose input gradient the API explains."""
    if out.shape[1] == 1:
        return out[:, 0]
    if of == "sum":
        return out.sum(1)
    if of == "class":
        return out[:, cls]
    return out.gather(1, pred[:, None])[:, 0]


def clean_answers(y: torch.Tensor, output: str) -> bool:
    """True when probability answers carry their logits: no decimal grid, no negative entries,
    rows summing to 1 (rounded, noisy or top-k answers do not: their logits are not trusted)."""
    if output != "probabilities":
        return output == "logits"
    y = y.reshape(len(y), -1)
    if len(y) == 0 or bool((y < 0).any()) or float((y.sum(1) - 1).abs().max()) > 1e-6:
        return False
    grid = decimal_grid(y)
    return grid is None or grid < 1e-8


FLOOR = 64 * 2.0**-24  # below this a float32 complement 1 − p is off by 1/64 or more of itself


def carries_logit(y: torch.Tensor) -> torch.Tensor:
    """Probability entries whose log is the answer's own: not 0 (or an exporter's 1e-30 for it),
    and not a small complement 1 − p computed in float32 or float64 (an integer multiple of 2⁻²⁴
    or 2⁻⁵³ below 64 such steps, as skl2onnx's binary probabilities are): their relative error is
    1/64 or worse, so their logit says only that the gap is below log FLOOR."""
    ok = y > 1e-29
    for step in (2.0**-24, 2.0**-53):
        k = y / step
        ok &= ~((k < 64) & (k == k.round()))
    return ok


class LogitGap:
    """The logit-gap loss against fixed answers `y`: everything that depends only on the answers
    (their log-probabilities, censoring, scale) computed once, so a copy trained for hundreds of
    steps on the same answers pays only for its own outputs (`__call__`)."""

    def __init__(self, y: torch.Tensor, output: str, one_logit: bool):
        y = y.reshape(len(y), -1)
        probs = output == "probabilities"
        t = torch.log(y.clamp_min(1e-300)) if probs else y
        ok = carries_logit(y) if probs else torch.ones_like(y, dtype=torch.bool)
        self.cut = torch.log(torch.tensor(FLOOR, dtype=t.dtype, device=t.device))
        self.kind = "pair" if one_logit and t.shape[1] == 2 else "one" if one_logit else "rows"
        if self.kind == "pair":  # [p₀, p₁] for a one-logit model: log p₁ − log p₀
            target, exact = t[:, 1:] - t[:, :1], ok.all(1, keepdim=True)
            self.use = torch.ones_like(exact)
            self.t, self.ok = t, ok
        elif self.kind == "one":
            target, exact = t, y > 0 if probs else ok
            self.use = exact
        else:
            self.top = t.argmax(1, keepdim=True)
            target = t - t.gather(1, self.top)
            self.use = torch.arange(t.shape[1], device=t.device)[None] != self.top
            exact = ok & self.use
            self.ok, self.cap = ok, self.cut - t.gather(1, self.top)
        self.target, self.exact = target, exact
        self.any = bool(self.use.any())
        scale = target[exact].pow(2).mean() if bool(exact.any()) else self.cut.pow(2)
        self.scale = scale.clamp_min(1e-12)

    def __call__(self, out: torch.Tensor) -> torch.Tensor:
        if not self.any:
            return out.sum() * 0.0
        if self.kind == "pair":
            t, ok = self.t, self.ok
            above = torch.relu((t[:, 1:] - self.cut) - out)  # p₀ censored: the logit is at least this
            below = torch.relu(out - (self.cut - t[:, :1]))  # p₁ censored: at most this
            resid = torch.where(self.exact, out - self.target, torch.where(ok[:, :1], below, above))
        elif self.kind == "one":
            resid = out - self.target
        else:
            diff = out - out.gather(1, self.top)
            resid = torch.where(self.ok, diff - self.target, torch.relu(diff - self.cap))
        return resid[self.use].pow(2).mean() / self.scale


def logit_gap_loss(out: torch.Tensor, y: torch.Tensor, output: str) -> torch.Tensor:
    """Squared error of the surrogate's logit differences against the answers' (log-probabilities
    for a probability API), relative to the answers' own mean square: each row against its top
    class (K outputs), or the single logit (one output). An entry that carries no logit
    (`carries_logit`) is censored: only a gap above log FLOOR − log p_top is penalised."""
    return LogitGap(y, output, out.shape[1] == 1)(out)


def membership_loss(out: torch.Tensor, y: torch.Tensor, output: str, task: str,
                    logits: bool = False, hard: bool = False,
                    gap: LogitGap | None = None) -> torch.Tensor:
    """ℓ_M: squared error for regression; else cross-entropy against labels or the returned
    probabilities (soft targets, clipped at 0 and renormalised; logits through a softmax), plus,
    when the answers carry logits (`logits`: clean probabilities or a logit API), the logit-gap
    loss with the cross-entropy at weight 0.1. `hard`: each answer's top class as a label. `gap`:
    the logit-gap loss prepared for these answers (`LogitGap`), else built here."""
    if task == "regression":
        return (out[:, 0] - y.reshape(-1)).pow(2).mean()
    if hard and output != "label":
        lab = api_labels(y, output)
        if out.shape[1] == 1:
            return nn.functional.binary_cross_entropy_with_logits(out[:, 0], lab.double())
        return nn.functional.cross_entropy(out, lab)
    if out.shape[1] == 1:  # binary, one logit
        target = y.double() if output == "label" else (
            y[:, -1].clamp(0, 1) if output == "probabilities" else torch.sigmoid(y[:, 0]))
        ce = nn.functional.binary_cross_entropy_with_logits(out[:, 0], target.reshape(-1))
    elif output == "label":
        return nn.functional.cross_entropy(out, y)
    else:
        q = torch.softmax(y, 1) if output == "logits" else y.clamp_min(0)
        q = q / q.sum(1, keepdim=True).clamp_min(1e-300)
        ce = -(q * torch.log_softmax(out, 1)).sum(1).mean()
    if logits and output != "label":
        return (gap or LogitGap(y, output, out.shape[1] == 1))(out) + 0.1 * ce
    return ce
