"""Is the deployed function piecewise linear? A ReLU network restricted to a short segment is
linear except at a few critical points, so almost every triple of equally spaced values lies on
a line within the answers' noise; a smooth activation (tanh, sigmoid, softplus, ELU) bends every
triple. Asked on three short segments (3 × 48 queries), before any attack that needs ReLU."""

from __future__ import annotations

import torch

from harness.attacks.extraction import relu_lines as rl
from harness.attacks.gradients import AnswerNoise


def bent_share(oracle, noise: AnswerNoise, gen: torch.Generator, points: int = 48,
               length: float = 0.05) -> float:
    """Share of bent value triples on one random segment of `length` (× |x|)."""
    d, dev = oracle.info.dim, oracle.device
    u = torch.randn(d, generator=gen, dtype=torch.float64).to(dev)
    v = torch.randn(d, generator=gen, dtype=torch.float64).to(dev)
    v = v / v.norm() * length * max(1.0, float(u.norm()))
    t = torch.linspace(-0.5, 0.5, points, dtype=torch.float64, device=dev)
    x = u[None] + t[:, None] * v[None]
    f = rl.ask(oracle, x)
    second = (f[:-2] + f[2:] - 2 * f[1:-1]).abs().amax(1)
    ok = torch.isfinite(second)
    if not bool(ok.any()):
        return 0.0
    scale = f[torch.isfinite(f)].abs().max() if bool(torch.isfinite(f).any()) else torch.tensor(1.0)
    bent = second[ok] > 20 * noise.at(x[1:-1][ok]) + 1e-12 * float(scale)
    return float(bent.double().mean())


def linear_pieces_test(oracle, noise: AnswerNoise, gen: torch.Generator) -> str | None:
    """A reason to decline when the outputs are not piecewise linear, else None."""
    shares = sorted(bent_share(oracle, noise, gen) for _ in range(3))
    if shares[1] > 0.5:
        return (f"the outputs are not piecewise linear ({shares[1]:.0%} of value triples on short "
                "segments bend beyond the answers' noise): not a ReLU network, which this "
                "cryptanalytic attack needs")
    return None
