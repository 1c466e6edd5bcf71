"""The deep ReLU network the cryptanalytic attack extracts, and the prefix of it known so far.

`DeepReluNet` is the artifact: f(x) = W_L·h_{L−1} + V_L·h_{L−2} + b_L with hᵢ = ReLU(Wᵢ hᵢ₋₁ +
Vᵢ hᵢ₋₂ + bᵢ), h₀ = x (float64). The skip terms Vᵢ are zero for a network whose signs were all
resolved; they carry the linear part ReLU(−z) = ReLU(z) − z leaves where a layer's orientation is
still open (a stopped attack's partial network), so the model is exact either way.

`KnownLayers` is the attacker's prefix during extraction: layers 1..m, the top one in canonical
orientation (unit rows (Wⱼ, bⱼ), largest entry positive) until the next layer resolves its signs
(harness/attacks/extraction/cryptanalysis/layer_signs.py), every layer below in its true orientation. A neuron
of layer m + 1 is a hyperplane θ·φ(x) = 0 in the features φ(x) = (ReLU(u_m), h_{m−1}, 1), u_m the
canonical pre-activations (Carlini, Jagielski, Mironov 2020, Sec. 4: once layers 1..m are
known, they are peeled off and layer m + 1 is a first layer again, one level up; the h_{m−1}
block absorbs the open signs).
"""

from __future__ import annotations

import torch
from torch import nn


class DeepReluNet(nn.Module):
    """The extracted network (float64); `layers` holds (W, b, V) per layer, the last one the
    output layer; V (the skip from h_{i−2}) may be None."""

    def __init__(self, layers: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]]):
        super().__init__()
        self.depth = len(layers)
        for i, (w, b, v) in enumerate(layers):
            self.register_buffer(f"w{i}", w.detach().double().clone())
            self.register_buffer(f"b{i}", b.detach().double().clone())
            self.register_buffer(f"v{i}", None if v is None else v.detach().double().clone())

    def layer(self, i: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        return getattr(self, f"w{i}"), getattr(self, f"b{i}"), getattr(self, f"v{i}")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        w0 = self.layer(0)[0]
        x = x.reshape(len(x), -1).to(w0)
        prev, h = None, x
        for i in range(self.depth):
            w, b, v = self.layer(i)
            z = h @ w.T + b
            if v is not None and prev is not None:
                z = z + prev @ v.T
            if i == self.depth - 1:
                return z
            prev, h = h, torch.relu(z)
        return h

    def hidden_layers(self) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """(W, b) of every layer, the output layer last (CPU tensors), for parameter scoring."""
        return [(w.cpu(), b.cpu()) for w, b, _ in (self.layer(i) for i in range(self.depth))]

    def skip_norm(self) -> float:
        """Largest skip weight left (0 when every sign was resolved)."""
        vs = [v for _, _, v in (self.layer(i) for i in range(self.depth)) if v is not None]
        return max((float(v.abs().max()) for v in vs if v.numel()), default=0.0)


def canonical_rows(w: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Rows (w, b) scaled to unit norm of [w, b], largest |w| entry positive."""
    norm = torch.cat([w, b[:, None]], 1).norm(dim=1, keepdim=True).clamp_min(1e-300)
    w, b = w / norm, b / norm[:, 0]
    idx = w.abs().argmax(dim=1, keepdim=True)
    sign = torch.sign(w.gather(1, idx))
    sign[sign == 0] = 1
    return w * sign, b * sign[:, 0]


class KnownLayers:
    """Layers 1..m known so far (see the module docstring): weights Wₖ (dₖ × dₖ₋₁), biases bₖ."""

    def __init__(self, dim: int, device, dtype=torch.float64):
        self.dim, self.device, self.dtype = dim, device, dtype
        self.w: list[torch.Tensor] = []
        self.b: list[torch.Tensor] = []

    @property
    def depth(self) -> int:
        return len(self.w)

    def widths(self) -> list[int]:
        return [len(b) for b in self.b]

    def copy(self) -> KnownLayers:
        k = KnownLayers(self.dim, self.device, self.dtype)
        k.w, k.b = [w.clone() for w in self.w], [b.clone() for b in self.b]
        return k

    def prefix(self, depth: int) -> KnownLayers:
        """A copy of layers 1..depth."""
        k = KnownLayers(self.dim, self.device, self.dtype)
        k.w, k.b = [w.clone() for w in self.w[:depth]], [b.clone() for b in self.b[:depth]]
        return k

    def extend_top(self, w: torch.Tensor, b: torch.Tensor) -> None:
        """Add neurons (canonical orientation) to the top layer."""
        w, b = canonical_rows(w.to(self.device, self.dtype), b.to(self.device, self.dtype))
        self.w[-1] = torch.cat([self.w[-1], w])
        self.b[-1] = torch.cat([self.b[-1], b])

    def push(self, w: torch.Tensor, b: torch.Tensor) -> None:
        """Add a layer on top (canonical orientation)."""
        w, b = canonical_rows(w.to(self.device, self.dtype), b.to(self.device, self.dtype))
        self.w.append(w)
        self.b.append(b)

    @property
    def linear_on_top(self) -> bool:
        """Whether the linear block of φ is u_m itself (its d_m affine functions and the constant
        independent: d_m ≤ d_{m−1}, a row per flipped neuron's linear part) rather than h_{m−1}
        (an expanding layer, whose u_m are dependent)."""
        if self.depth == 0:
            return False
        w, b = self.w[-1], self.b[-1]
        aug = torch.cat([torch.cat([w, b[:, None]], 1),
                         torch.cat([w.new_zeros(1, w.shape[1]), w.new_ones(1, 1)], 1)])
        s = torch.linalg.svdvals(aug)
        return len(b) + 1 <= aug.shape[1] and float(s[-1] / s[0]) > 1e-8

    def feature_width(self, h_block: bool = False) -> int:
        """Length of φ (the constant included); `h_block`: the (ReLU(u_m), h_{m−1}, 1) form."""
        m = self.depth
        if m == 0:
            return self.dim + 1
        if self.linear_on_top and not h_block:
            return 2 * len(self.b[-1]) + 1
        below = self.dim if m == 1 else len(self.b[m - 2])
        return len(self.b[m - 1]) + below + 1

    def split(self, theta: torch.Tensor, h_block: bool = False
              ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """A next-layer neuron θ (…, D) as (p on ReLU(u_m), β on h_{m−1}, c): the u_m block of
        `linear_on_top` features rewritten through u_m = W_m h_{m−1} + b_m."""
        dm = len(self.b[-1])
        p, rest, c = theta[..., :dm], theta[..., dm:-1], theta[..., -1]
        if self.linear_on_top and not h_block:
            return p, rest @ self.w[-1], c + rest @ self.b[-1]
        return p, rest, c

    def pre(self, x: torch.Tensor) -> list[torch.Tensor]:
        """Pre-activations uₖ(x) of every known layer (N, dₖ), the top canonical."""
        out, h = [], x
        for w, b in zip(self.w, self.b, strict=True):
            u = h @ w.T + b
            out.append(u)
            h = torch.relu(u)
        return out

    def features(self, x: torch.Tensor, h_block: bool = False) -> torch.Tensor:
        """φ(x) (N, D): (x, 1) with no layer known, else (ReLU(u_m), u_m, 1) or
        (ReLU(u_m), h_{m−1}, 1) (see `linear_on_top`)."""
        one = x.new_ones(len(x), 1)
        if self.depth == 0:
            return torch.cat([x, one], 1)
        us = self.pre(x)
        if self.linear_on_top and not h_block:
            below = us[-1]
        else:
            below = x if self.depth == 1 else torch.relu(us[-2])
        return torch.cat([torch.relu(us[-1]), below, one], 1)

    def jacobians(self, x: torch.Tensor) -> tuple[list[torch.Tensor], torch.Tensor]:
        """(∂uₖ/∂x (N, dₖ, d) for every layer, ∂φ/∂x (N, D − 1, d)) at points off every known
        critical surface."""
        n, d = x.shape
        eye = torch.eye(d, dtype=x.dtype, device=x.device).expand(n, d, d)
        jac_u, h, jh = [], x, eye
        hs = [eye]
        for w, b in zip(self.w, self.b, strict=True):
            u = h @ w.T + b
            ju = torch.einsum("kj,njd->nkd", w, jh)
            jac_u.append(ju)
            on = (u > 0).to(x.dtype)
            h, jh = torch.relu(u), ju * on[..., None]
            hs.append(jh)
        if self.depth == 0:
            return jac_u, eye
        return jac_u, torch.cat([hs[-1], jac_u[-1] if self.linear_on_top else hs[-2]], 1)

    def straddle_points(self, gen: torch.Generator, delta: float = 0.05) -> torch.Tensor:
        """Two points per top-layer neuron, one on each side of its boundary (u_j = ±delta·|x|,
        reached by Newton steps from a Gaussian point; no queries): a fit on Gaussian points
        alone never sees a neuron that is on (or off) almost everywhere switch, and then cannot
        tell its ReLU from its linear part."""
        if self.depth == 0:
            return torch.zeros(0, self.dim, dtype=torch.float64, device=self.device)
        width = len(self.b[-1])
        start = torch.randn(width, self.dim, generator=gen, dtype=torch.float64).to(self.device)
        flat0 = sum(self.widths()[:-1])
        out = []
        for j in range(width):
            for side in (1.0, -1.0):
                x = start[j].clone()
                target = side * delta * max(1.0, float(x.norm()))
                for _ in range(30):
                    u = self.unit_value(x, flat0 + j)
                    if abs(u - target) <= 1e-3 * abs(target):
                        break
                    g = self.unit_gradient(x, flat0 + j)
                    if float(g.norm()) == 0:
                        break
                    x = x - (u - target) * g / (g @ g)
                out.append(x)
        return torch.stack(out)

    def neuron_values(self, x: torch.Tensor) -> torch.Tensor:
        """Every known neuron's pre-activation relative to its scale (N, total units): |·| ≈ 0
        on that neuron's critical surface."""
        vals, h = [], x
        for w, b in zip(self.w, self.b, strict=True):
            u = h @ w.T + b
            scale = h.norm(dim=1, keepdim=True) * w.norm(dim=1) + b.abs()
            vals.append(u / scale.clamp_min(1e-300))
            h = torch.relu(u)
        if not vals:
            return x.new_zeros(len(x), 0)
        return torch.cat(vals, 1)

    def first_crossing(self, x: torch.Tensor, w: torch.Tensor, s_min: float = 0.0
                       ) -> tuple[float, int]:
        """Smallest s > s_min at which x + s·w meets a known critical surface, and the flat index
        of that neuron (inf, −1 when none): every pre-activation is affine in s until the first
        crossing of a layer below it, so the earliest extrapolated zero is the true first one."""
        if self.depth == 0:
            return float("inf"), -1
        xs = (x + s_min * w)[None]
        us = torch.cat(self.pre(xs), 1)[0]
        jac, _ = self.jacobians(xs)
        du = torch.cat([j[0] @ w for j in jac])
        s = -us / du
        s[(s <= 1e-12 * (1 + abs(s_min))) | ~torch.isfinite(s)] = float("inf")
        i = int(torch.argmin(s))
        return float(s[i]) + s_min, (i if torch.isfinite(s[i]) else -1)

    def unit_gradient(self, x: torch.Tensor, flat: int) -> torch.Tensor:
        """∇ of known neuron `flat`'s pre-activation at x (d,)."""
        jac, _ = self.jacobians(x[None])
        return torch.cat([j[0] for j in jac])[flat]

    def unit_value(self, x: torch.Tensor, flat: int) -> float:
        return float(torch.cat(self.pre(x[None]), 1)[0, flat])
