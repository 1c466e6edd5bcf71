"""Is the deployed function piecewise linear? On a short segment a ReLU network is linear except
at a few critical points, so the second differences of equally spaced values are the answers'
own error (rounding, float32 arithmetic: the same at any spacing) or, at a kink, grow like the
spacing h; a smooth activation (tanh, sigmoid, softplus, ELU) bends them all, growing like h².
Doubling the spacing therefore multiplies the typical second difference (its lower quartile) by
~1 (or ~2 where kinks are dense) for a ReLU network, by ~4 for a smooth one, at both of two
doublings (rounded answers are a staircase: their second differences grow at the first doubling,
then stay at the rounding step). Asked on three segments of 5% of |x| and three of 50% (where a
smooth net's curvature rises above float32 rounding; longer ones cross so many kinks of a wide
ReLU net that it looks curved): 6 × 49 queries, before any attack that needs ReLU. A smooth net
that is nearly linear at float32 precision can pass; the attack then fails its own checks."""

from __future__ import annotations

import torch

from harness.attacks.extraction.cryptanalysis import relu_lines as rl
from harness.core.gradients import AnswerNoise


def curvature_growth(oracle, noise: AnswerNoise, gen: torch.Generator, points: int = 49,
                     length: float = 0.05) -> float:
    """The smaller growth of the typical second difference over two doublings of the spacing on
    one random segment of `length` (× |x|); 1.0 when it stays at the answers' noise floor."""
    d, dev = oracle.info.dim, oracle.device
    u = torch.randn(d, generator=gen, dtype=torch.float64).to(dev)
    v = torch.randn(d, generator=gen, dtype=torch.float64).to(dev)
    v = v / v.norm() * length * max(1.0, float(u.norm()))
    t = torch.linspace(-0.5, 0.5, points, dtype=torch.float64, device=dev)
    x = u[None] + t[:, None] * v[None]
    f = rl.ask(oracle, x)
    fin = f[torch.isfinite(f).all(1)] if bool(torch.isfinite(f).any()) else f[:0]
    if len(fin) < 9:
        return 1.0

    def level(g):  # the lower quartile: the triples with a kink in them (up to 3/4) left out
        return float(torch.quantile((g[:-2] + g[2:] - 2 * g[1:-1]).abs().amax(1), 0.25))

    l1, l2, l4 = level(fin), level(fin[::2]), level(fin[::4])
    floor = 20 * float(noise.sigma) + 1e-13 * float(fin.abs().max())
    if l1 <= floor:  # straight at the finest spacing (to the noise): no curvature to speak of
        return 1.0
    # both doublings: rounded answers make a staircase, whose second differences rise from the
    # finest spacing but then stay at the step, where a smooth curve keeps growing 4×
    return min(l2 / max(l1, 1e-300), l4 / max(l2, 1e-300))


def linear_pieces_test(oracle, noise: AnswerNoise, gen: torch.Generator) -> str | None:
    """A reason to decline when the outputs are not piecewise linear, else None."""
    growth = max(sorted(curvature_growth(oracle, noise, gen, length=length) for _ in range(3))[1]
                 for length in (0.05, 0.5))
    if growth > 3.0:
        return (f"the outputs look curved at the scales it tests (second differences grow {growth:.1f}× "
                "when the spacing doubles, as a smooth function's do, where a ReLU network's stay at "
                "the answers' noise): a smooth activation, or a ReLU network with more kinks than "
                "the test can resolve; the attack needs ReLU pieces it can see, so it stops (with "
                "attacker.knows_architecture a declared smooth network is skipped without a query)")
    return None
