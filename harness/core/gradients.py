"""Input gradients as an attacker gets them: from `explain` when the API offers it, else by
forward finite differences through `predict` (d + 1 queries per point, all in one batch).

Probabilities are turned back into logit differences before differencing: centred
log-probabilities log p − mean(log p) equal the logits minus their mean, so their gradients
lie in the same span as the logits' gradients (for a binary API, log(p₁/p₀) is the logit).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from harness.core.answers import decimal_grid, float32_exact, logit_signals


def fd_cost(dim: int) -> int:
    """Queries per gradient by forward differences."""
    return dim + 1


@dataclass
class AnswerNoise:
    """What an attacker learns about the precision of the answers from the answers themselves
    (never from the victim's declared dtype): `sigma` is the absolute error of one logit signal
    (std), `scale` the typical |signal|, `randomized` whether the same query twice differed,
    `rounding` the decimal grid of the raw answers (None: no grid), `float32` whether every
    answer is exactly representable in float32."""

    sigma: float
    scale: float
    randomized: bool = False
    rounding: float | None = None
    float32: bool = False
    queries: int = 0
    x_norm: float = 1.0  # typical |x| of the points the noise was measured at

    def at(self, x: torch.Tensor) -> torch.Tensor:
        """Noise of answers at points x (N, d): arithmetic error grows with the size of the
        terms summed, so σ scales with |x| beyond the points it was measured at."""
        return self.sigma * (x.norm(dim=-1) / self.x_norm).clamp_min(1.0)

    @property
    def rel(self) -> float:
        """sigma relative to the typical signal (≥ 1e-16)."""
        return max(self.sigma / max(self.scale, 1e-300), 1e-16)

    def describe(self) -> str:
        kind = ("randomized" if self.randomized else f"rounded to {self.rounding:g}" if self.rounding
                else "float32" if self.float32 else "float64")
        return f"answers {kind}: noise ≈ {self.sigma:.2g} on signals of ≈ {self.scale:.2g}"


def estimate_noise(oracle, gen: torch.Generator, points: int = 8, scale: float = 1.0) -> AnswerNoise:
    """Estimate the answers' noise from 4·`points` predict queries: each point twice (randomized
    answers differ), and the second differences F(x + sv) + F(x − sv) − 2F(x) over a short step
    (zero inside one linear piece in exact arithmetic: what remains is the answers' own error;
    the median ignores the few steps that cross a kink)."""
    d, dev = oracle.info.dim, oracle.device
    x = scale * torch.randn(points, d, generator=gen, dtype=torch.float64).to(dev)
    v = torch.randn(points, d, generator=gen, dtype=torch.float64).to(dev)
    s = 1e-4 * x.norm(dim=1, keepdim=True).clamp_min(1e-3) * v / v.norm(dim=1, keepdim=True)
    raw = oracle.predict(torch.cat([x, x, x + s, x - s]))
    raw = raw.reshape(len(raw), -1).double()
    f = logit_signals(raw, oracle.output).reshape(4, points, -1)
    ok = torch.isfinite(f).all(0).all(-1)
    f = f[:, ok]
    f32 = float32_exact(raw)
    scale_f = float(f[0].abs().median()) if f.numel() else 1.0
    rep = (f[0] - f[1]).abs()
    randomized = bool(rep.numel()) and float(rep.max()) > 0
    second = (f[2] + f[3] - 2 * f[0]).abs()
    sigma = float(second.median()) / (0.6745 * 6**0.5) if second.numel() else 0.0
    if randomized:
        sigma = max(sigma, float(rep.pow(2).mean().sqrt()) / 2**0.5)
    grid = None if randomized else decimal_grid(raw)
    if grid is not None and grid >= 1e-8:
        # a rounded answer carries a uniform error of the grid step; log-probabilities divide it
        # by the probability
        p = raw.abs().clamp_min(grid) if oracle.output == "probabilities" else raw.new_ones(1)
        sigma = max(sigma, float((grid / 12**0.5 / p).median()))
    else:
        grid = None
    eps = 6e-8 if f32 else 1.1e-16
    sigma = max(sigma, eps * max(scale_f, 1e-30))
    return AnswerNoise(sigma, max(scale_f, 1e-30), randomized, grid, f32, 4 * points,
                       float(x.norm(dim=1).median()))


def fd_step(noise: AnswerNoise) -> float:
    """Forward-difference step (relative to the inputs' scale) for answers with this noise: the
    geometric mean of the noise and the unit scale, √(σ/|F|), balances the noise error σ/s
    against the chance that a step crosses a ReLU kink (∝ s). 1.5e-8 for float64, 2.4e-4 for
    float32 answers."""
    return min(max(noise.rel**0.5, 1e-8), 0.1)


def finite_difference_gradients(oracle, x: torch.Tensor, step: float | None = None) -> torch.Tensor:
    """Forward-difference gradients of every logit signal at each point: (N, K', d).

    Two batched predict calls, N·(d+1) queries: the points, then each point plus `step`·e_j
    (relative to max(1, |x|∞) of each point). `step=None` uses 1e-3.
    """
    n, d = x.shape
    base = logit_signals(oracle.predict(x), oracle.output)
    step = 1e-3 if step is None else step
    eye = torch.eye(d, dtype=x.dtype, device=x.device)
    h = step * x.abs().amax(dim=1).clamp_min(1.0)
    shifted = (x[:, None, :] + h[:, None, None] * eye[None]).reshape(n * d, d)
    moved = logit_signals(oracle.predict(shifted), oracle.output).reshape(n, d, -1)
    return ((moved - base[:, None, :]) / h[:, None, None]).permute(0, 2, 1)


def gradient_rows(oracle, x: torch.Tensor, fd_step: float | None) -> tuple[torch.Tensor, str]:
    """Gradient rows at x through the best path the API offers; returns (rows, path)."""
    if oracle.offers("explain"):
        return oracle.explain(x), "explain"
    g = finite_difference_gradients(oracle, x, fd_step)
    return g.reshape(-1, g.shape[-1]), "finite_differences"


def cost_per_point(oracle) -> int:
    """Queries one gradient point costs on this API."""
    return 1 if oracle.offers("explain") else fd_cost(oracle.info.dim)
