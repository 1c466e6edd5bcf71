"""Shared machinery of the exact extraction attacks (paper 000 Alg. 1a/1b, App. C): searching
random lines for the kinks of a one-hidden-layer ReLU network, locating each kink exactly from
output values, fitting the output layer, and checking the result against fresh queries.

Model recovered: f(x) = Σᵢ pᵢ·ReLU(nᵢ·x + bᵢ) + qᵢ·(nᵢ·x + bᵢ) + c, with unit normals nᵢ and
offsets bᵢ (one per hidden unit, first-layer biases included) and K output rows (p, q, c).
Every one-hidden-layer ReLU network W·ReLU(Ax + β) + c has this form (the paper's sign vector
s of Alg. 1b is the pair (p, q) restricted to {−1, 0, 1} after scaling).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
from torch import nn

from harness.core.answers import logit_signals, readable
from harness.core.errors import AssumptionViolated


class OutOfBudget(Exception):
    """The next batch would not fit in the query budget (nothing was asked)."""


def ask(oracle, x: torch.Tensor, what: str = "predict") -> torch.Tensor:
    """One batched oracle call; OutOfBudget instead of a partial answer."""
    if len(x) == 0:
        # as wide as an answer would be (two-class probabilities give one signal, l₁ − l₀)
        k = (oracle.info.dim if what == "explain" else
             1 if output_space(oracle) == "difference" else max(1, oracle.info.n_outputs))
        return torch.zeros(0, k, dtype=torch.float64, device=oracle.device)
    if oracle.affordable(len(x)) < len(x):
        raise OutOfBudget(f"{len(x)} more queries needed, {oracle.remaining} left")
    if what == "explain":
        return oracle.explain(x)
    y = oracle.predict(x)
    out = logit_signals(y, oracle.output)
    if oracle.output == "probabilities":  # an underflowed or saturated probability: no logit
        out[~readable(y, out)] = float("nan")
    return out


def output_space(oracle) -> str:
    """What the extracted outputs are (harness/scoring/model.py `in_space`): `raw` when predict
    reveals the raw outputs; from probabilities only logits up to a constant: `centered` (K ≥ 3:
    logits − their mean) or `difference` (two classes: the one signal l₁ − l₀)."""
    if oracle.output == "probabilities" and oracle.info.n_outputs > 1:
        return "difference" if oracle.info.n_outputs == 2 else "centered"
    return "raw"


def sinh_grid(n: int, span: float, device, dtype=torch.float64) -> torch.Tensor:
    """n points on [−span, span], dense near 0 (t = sinh(s), s uniform): kinks on a Gaussian
    line are Cauchy distributed, so most lie near 0 but a few lie far out."""
    s = torch.linspace(-math.asinh(span), math.asinh(span), n, dtype=dtype, device=device)
    return torch.sinh(s)


def lstsq(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Minimum-norm least squares a·x ≈ b, solved on the CPU in float64 (the SVD-based `gelsd`
    driver exists only there) and returned on a's device: every device takes this one path."""
    sol = torch.linalg.lstsq(a.detach().cpu().double(), b.detach().cpu().double(), driver="gelsd")
    return sol.solution.to(a.device)


@dataclass
class Line:
    u: torch.Tensor
    v: torch.Tensor

    def at(self, t: torch.Tensor) -> torch.Tensor:
        return self.u[None, :] + t[:, None] * self.v[None, :]


def random_line(d: int, gen: torch.Generator, device, start: torch.Tensor | None = None) -> Line:
    """A Gaussian line u + t·v (u given or ~ N(0, I), v ~ N(0, I))."""
    u = torch.randn(d, generator=gen, dtype=torch.float64).to(device) if start is None else start
    v = torch.randn(d, generator=gen, dtype=torch.float64).to(device)
    return Line(u.to(device, torch.float64), v)


def differ(a: torch.Tensor, b: torch.Tensor, tol: float) -> torch.Tensor:
    """Rows of a and b that differ beyond the relative tolerance."""
    scale = a.abs().amax(dim=1) + b.abs().amax(dim=1) + 1e-300
    return (a - b).abs().amax(dim=1) > tol * scale


@dataclass
class Kinks:
    """Kinks found on one line: brackets [tl, tr] and the signals on each side."""

    tl: torch.Tensor
    tr: torch.Tensor
    left: torch.Tensor
    right: torch.Tensor
    rounds: int = 0
    complete: bool = True
    notes: list[str] = field(default_factory=list)


def bisect_gradients(oracle, line: Line, grid: torch.Tensor, w_min: float, tol: float,
                     max_open: int, max_rounds: int = 200) -> Kinks:
    """Paper 000 Alg. 1a, all brackets at once: keep every interval whose end gradients differ
    and halve it until it is narrower than w_min·max(1, |t|). One explain call per round."""
    g = ask(oracle, line.at(grid), "explain")
    ch = differ(g[:-1], g[1:], tol)
    tl, tr, gl, gr = grid[:-1][ch], grid[1:][ch], g[:-1][ch], g[1:][ch]
    done_l, done_r, done_gl, done_gr = [tl[:0]], [tr[:0]], [gl[:0]], [gr[:0]]  # none found: empty
    rounds = 0
    while len(tl) and rounds < max_rounds:
        narrow = (tr - tl) <= w_min * torch.maximum(tl.abs(), tr.abs()).clamp_min(1.0)
        done_l.append(tl[narrow]), done_r.append(tr[narrow])
        done_gl.append(gl[narrow]), done_gr.append(gr[narrow])
        tl, tr, gl, gr = tl[~narrow], tr[~narrow], gl[~narrow], gr[~narrow]
        if not len(tl):
            break
        if len(tl) > max_open:
            raise AssumptionViolated(
                f"more than {max_open} gradient changes on one line: the gradient is not piecewise "
                "constant (not a one-hidden-layer ReLU network, or noisy explanations)")
        tm = (tl + tr) / 2
        gm = ask(oracle, line.at(tm), "explain")
        rounds += 1
        left, right = differ(gl, gm, tol), differ(gm, gr, tol)
        tl, tr, gl, gr = (torch.cat([tl[left], tm[right]]), torch.cat([tm[left], tr[right]]),
                          torch.cat([gl[left], gm[right]]), torch.cat([gm[left], gr[right]]))
    k = Kinks(torch.cat(done_l), torch.cat(done_r), torch.cat(done_gl), torch.cat(done_gr), rounds)
    order = torch.argsort(k.tl)
    k.tl, k.tr, k.left, k.right = k.tl[order], k.tr[order], k.left[order], k.right[order]
    return k


def bisect_values(oracle, line: Line, grid: torch.Tensor, w_min: float, noise,
                  max_open: int, max_rounds: int = 200) -> Kinks:
    """Kinks of the piecewise-linear restriction F(u + t·v) from values alone (paper 001's
    critical points; the value analogue of Alg. 1a). An interval is bent when its midpoint
    leaves the chord of its ends by more than the answers' noise allows (20σ, σ estimated from
    the answers, `noise.at`: it grows with |x|); a bent interval is halved by asking its two
    quarter points (one predict call per round for all brackets) and kept while a half is
    still visibly bent. It is final when narrower than w_min·max(1, |t|), or when neither half
    shows the bend above the noise (the narrowest bracket the answers' precision allows:
    `locate` then intersects the pieces)."""
    f = ask(oracle, line.at(grid))
    scale = torch.nan_to_num(f, nan=0.0).abs().max().item() + 1e-300

    def bent(fa, fm, fb, tm):
        local = torch.maximum(fa.abs().amax(1), fb.abs().amax(1)) + scale * 1e-6
        dev = torch.nan_to_num((fm - (fa + fb) / 2).abs().amax(dim=1), nan=0.0)
        return dev > torch.maximum(1e-12 * local, 20 * noise.at(line.at(tm)))

    tm = (grid[:-1] + grid[1:]) / 2
    fm = ask(oracle, line.at(tm))
    keep = bent(f[:-1], fm, f[1:], tm)
    tl, tr, fl, fr, fm = grid[:-1][keep], grid[1:][keep], f[:-1][keep], f[1:][keep], fm[keep]
    done: list[tuple[torch.Tensor, ...]] = []
    rounds, complete = 1, True
    while len(tl):
        narrow = (tr - tl) <= w_min * torch.maximum(tl.abs(), tr.abs()).clamp_min(1.0)
        if rounds >= max_rounds:
            narrow[:] = True
            complete = False
        done.append((tl[narrow], tr[narrow], fl[narrow], fr[narrow]))
        tl, tr, fl, fr, fm = (a[~narrow] for a in (tl, tr, fl, fr, fm))
        if not len(tl):
            break
        if len(tl) > max_open:
            raise AssumptionViolated(
                f"more than {max_open} kinks on one line: the outputs are not piecewise linear "
                "(not a one-hidden-layer ReLU network, or noisy/rounded outputs)")
        mid = (tl + tr) / 2
        q = ask(oracle, line.at(torch.cat([(tl + mid) / 2, (mid + tr) / 2])))
        rounds += 1
        q1, q3 = q[: len(tl)], q[len(tl):]
        left, right = bent(fl, q1, fm, (tl + mid) / 2), bent(fm, q3, fr, (mid + tr) / 2)
        lost = ~left & ~right  # the bend sank into the noise: this bracket is as narrow as it gets
        done.append((tl[lost], tr[lost], fl[lost], fr[lost]))
        tl, tr, fl, fr, fm = (torch.cat([tl[left], mid[right]]), torch.cat([mid[left], tr[right]]),
                              torch.cat([fl[left], fm[right]]), torch.cat([fm[left], fr[right]]),
                              torch.cat([q1[left], q3[right]]))
    cols = [torch.cat(c) for c in zip(*done, strict=True)] if done else []
    if not cols or not len(cols[0]):
        z = grid[:0]
        return Kinks(z, z, f[:0], f[:0], rounds, complete)
    k = Kinks(*cols, rounds=rounds, complete=complete)
    order = torch.argsort(k.tl)
    k.tl, k.tr, k.left, k.right = k.tl[order], k.tr[order], k.left[order], k.right[order]
    touching = float((k.tr[:-1] >= k.tl[1:]).double().mean()) if len(k.tl) > 1 else 0.0
    if len(k.tl) >= 16 and touching > 0.5:
        raise AssumptionViolated(
            f"the outputs bend everywhere along the line ({len(k.tl)} bent intervals, {touching:.0%} "
            "touching the next): a smooth activation, not a piecewise-linear ReLU network")
    return k


def locate(oracle, line: Line, tl: torch.Tensor, tr: torch.Tensor,
           fl: torch.Tensor | None = None, fr: torch.Tensor | None = None,
           reach: float | torch.Tensor = 2.0, check=None
           ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """Exact kink positions inside narrow brackets: intersect the affine pieces of F on each
    side (each from two values: the bracket end and one more point `reach` bracket-widths
    outside; `reach` a number or one per bracket). Falls back to the bracket's midpoint when the
    intersection leaves the bracket. With `check` (the answers' noise), F is also asked at t* and
    at the middle of each outer segment, and the positions come back with a mask of those where
    all three lie on their pieces within 20σ. A kink inside an outer segment bends that piece
    into a chord: the intersection then still lies on the other, true piece (so F(t*) alone
    cannot tell), but the chord's middle leaves F."""
    w = (tr - tl).clamp_min(1e-300)
    far = reach * w  # (N,)
    ts = [tl - far, tr + far] if fl is not None else [tl - far, tl, tr, tr + far]
    vals = ask(oracle, line.at(torch.cat(ts))).reshape(len(ts), len(tl), -1)
    if fl is None:
        fll, fl, fr, frr = vals
    else:
        fll, frr = vals
    far_col = far[:, None]
    sl, sr = (fl - fll) / far_col, (frr - fr) / far_col
    ds = sl - sr
    rhs = fr - fl + sl * tl[:, None] - sr * tr[:, None]
    den = (ds * ds).sum(1)
    t = (ds * rhs).sum(1) / den.clamp_min(1e-300)
    ok = (den > 0) & (t >= tl - w) & (t <= tr + w)
    t = torch.where(ok, t, (tl + tr) / 2)
    if check is None:
        return t
    probes = torch.cat([t, tl - far / 2, tr + far / 2])
    x = line.at(probes)
    on = torch.cat([fl + sl * (t - tl)[:, None], fl - sl * far_col / 2, fr + sr * far_col / 2])
    miss = torch.nan_to_num((ask(oracle, x) - on).abs().amax(1), nan=float("inf"))
    fine = miss <= 20 * check.at(x) + 1e-12 * on.abs().amax(1)
    return t, ok & fine.reshape(3, len(t)).all(0)


def locate_sure(oracle, line: Line, tl: torch.Tensor, tr: torch.Tensor, fl: torch.Tensor,
                fr: torch.Tensor, noise, tries: int = 3) -> tuple[torch.Tensor, torch.Tensor]:
    """`locate` with its check on sorted brackets: the outer points stay within 45% of the room
    to the neighbouring brackets (where another kink lies), and move 16 times closer where a
    kink the search missed still bent a piece (up to `tries` times); returns (t, checked mask)."""
    w = (tr - tl).clamp_min(1e-300)
    inf = tl.new_full((1,), float("inf"))
    room = torch.minimum(tl - torch.cat([-inf, tr[:-1]]), torch.cat([tl[1:], inf]) - tr)
    reach = (0.45 * room / w).clamp(1 / 16, 2.0)  # brackets that touch: the check decides
    t, sure = locate(oracle, line, tl, tr, fl, fr, reach, check=noise)
    for _ in range(tries - 1):
        redo = ~sure
        if not bool(redo.any()):
            break
        reach = torch.where(redo, reach / 16, reach)
        t2, s2 = locate(oracle, line, tl[redo], tr[redo], fl[redo], fr[redo], reach[redo],
                        check=noise)
        t[redo], sure[redo] = t2, s2
    return t, sure


def canonical(normals: torch.Tensor, offsets: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Unit normals with their largest entry positive (a hyperplane has two orientations)."""
    norm = normals.norm(dim=1, keepdim=True).clamp_min(1e-300)
    n, b = normals / norm, offsets / norm[:, 0]
    idx = n.abs().argmax(dim=1, keepdim=True)
    sign = torch.sign(n.gather(1, idx))
    return n * sign, b * sign[:, 0]


def dedupe(n: torch.Tensor, b: torch.Tensor, tol: float) -> torch.Tensor:
    """Mask of hyperplanes to keep: each one not equal (within tol) to an earlier one."""
    keep = torch.ones(len(n), dtype=torch.bool, device=n.device)
    if len(n) == 0:
        return keep
    pts = torch.cat([n, b[:, None]], 1)
    dist = torch.cdist(pts, pts)
    later = torch.arange(len(n), device=n.device)
    for i in range(len(n)):  # O(h) over hyperplanes, not over queries
        if keep[i]:
            keep &= ~((dist[i] < tol) & (later > i))
    return keep


class ReluNet(nn.Module):
    """f(x) = P·ReLU(N x + b) + Q·(N x + b) + S·x + c: the extracted model (float64). S is a
    linear term for what the units found do not explain (zero for a complete extraction)."""

    def __init__(self, normals: torch.Tensor, offsets: torch.Tensor, p: torch.Tensor,
                 q: torch.Tensor, c: torch.Tensor, skip: torch.Tensor | None = None):
        super().__init__()
        if skip is None:
            skip = normals.new_zeros(p.shape[0], normals.shape[1])
        for name, val in dict(normals=normals, offsets=offsets, p=p, q=q, c=c, skip=skip).items():
            self.register_buffer(name, val.detach().to(torch.float64).clone())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.reshape(len(x), -1).to(self.normals)
        y = x @ self.normals.T + self.offsets
        return torch.relu(y) @ self.p.T + y @ self.q.T + x @ self.skip.T + self.c

    def first_layer(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Hidden units that matter (nonzero output weight): (normals, offsets)."""
        live = self.p.abs().amax(dim=0) > 1e-12 * (self.p.abs().max() + 1e-300)
        return self.normals[live], self.offsets[live]


def features(x: torch.Tensor, n: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    y = x @ n.T + b
    return torch.cat([torch.relu(y), y, x.new_ones(len(x), 1)], dim=1)


def fit_points(n: torch.Tensor, b: torch.Tensor, extra: int, gen: torch.Generator,
               scale: float = 1.0) -> torch.Tensor:
    """Points for the output-layer fit: two near each hyperplane (one per side, so every
    ReLU feature is both on and off somewhere) plus `extra` Gaussian points."""
    h, d = n.shape
    dev = n.device
    g = torch.randn(2 * h + extra, d, generator=gen, dtype=torch.float64).to(dev) * scale
    if h == 0:
        return g
    foot = -b[:, None] * n  # the point of each hyperplane closest to the origin
    side = torch.cat([torch.ones(h), -torch.ones(h)]).to(dev, torch.float64)
    near = foot.repeat(2, 1) + 0.5 * g[: 2 * h] + side[:, None] * n.repeat(2, 1) * 0.7 * scale
    return torch.cat([near, g[2 * h:]])


def fit_output(oracle, n: torch.Tensor, b: torch.Tensor, gen: torch.Generator,
               extra: int = 16, scale: float = 1.0) -> tuple[ReluNet, float]:
    """Least squares of the output layer on fresh queries; returns (model, condition number)."""
    x = fit_points(n, b, extra, gen, scale)
    y = ask(oracle, x)
    keep = ~y.isnan().any(1)
    x, y = x[keep], y[keep]
    phi = features(x, n, b)
    h = len(n)
    # a unit on (or off) at fewer than 3 answered points cannot be told from the linear part:
    # its ReLU column is left out (its output weight 0) rather than fitted to a point or two
    on = (phi[:, :h] > 0).sum(0)
    use = torch.cat([(on >= 3) & (on <= len(x) - 3), phi.new_ones(h + 1, dtype=torch.bool)])
    col = phi.norm(dim=0).clamp_min(1e-300)
    coef = phi.new_zeros(len(col), y.shape[1])
    coef[use] = lstsq(phi[:, use] / col[use], y) / col[use, None]
    s = torch.linalg.svdvals(phi[:, use] / col[use])
    cond = float(s[0] / s[-1]) if len(s) and s[-1] > 0 else float("inf")
    return ReluNet(n, b, coef[:h].T, coef[h:2 * h].T, coef[2 * h]), cond


def output_from_jumps(oracle, n: torch.Tensor, b: torch.Tensor, p: torch.Tensor,
                      gen: torch.Generator, points: int = 32) -> ReluNet:
    """A one-output network whose output layer comes from gradients (paper 000 Alg. 1b without
    the sign system): unit i's output weight is its gradient jump p (signed, see `jump_weights`),
    the linear term S is what one explained gradient leaves after the active units' p·n, and only
    the output bias c needs predictions (their median residual over `points` fresh queries, so
    rounded or noisy predictions cost the bias no more than their own error)."""
    x0 = torch.randn(1, n.shape[1], generator=gen, dtype=torch.float64).to(n.device)
    g0 = ask(oracle, x0, "explain")[0]
    on = ((x0 @ n.T + b)[0] > 0).to(p.dtype)
    skip = (g0 - (p * on) @ n)[None]
    zero = n.new_zeros(1, len(n))
    net = ReluNet(n, b, p[None], zero, n.new_zeros(1), skip)
    xc = torch.randn(points, n.shape[1], generator=gen, dtype=torch.float64).to(n.device)
    y = ask(oracle, xc)
    keep = ~y.isnan().any(1)
    with torch.no_grad():
        res = (y[keep] - net(xc[keep]))[:, 0]
    net.c.fill_(float(res.median()) if len(res) else 0.0)
    return net


def jump_weights(jumps: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Output weight of each unit from its gradient jump δ along direction v: p = |δ|·sign(δ·v)
    (crossing into the unit's active side along v adds p·n to the gradient, whichever way the
    normal n is oriented: ReLU(−z) = ReLU(z) − z)."""
    return jumps.norm(dim=1) * torch.sign(jumps @ v)


def self_check(oracle, net: ReluNet, x: torch.Tensor) -> tuple[float, torch.Tensor]:
    """The attacker's own check on fresh queries: max |f̂ − F| / RMS(F), and per-point errors."""
    y = ask(oracle, x)
    keep = ~y.isnan().any(1)
    x, y = x[keep], y[keep]
    if not len(y):
        return float("inf"), torch.zeros(0)
    with torch.no_grad():
        err = (net(x) - y).abs().amax(dim=1)
    rms = float(y.pow(2).mean().sqrt()) + 1e-300
    return float(err.max()) / rms, err / rms


def check_points(oracle, m: int, gen: torch.Generator) -> torch.Tensor:
    """Fresh check points: half from the attacker's pool (if any), half Gaussian."""
    d = oracle.info.dim
    g = torch.randn(m, d, generator=gen, dtype=torch.float64).to(oracle.device)
    pool = oracle.info.x_pool
    if pool is not None and len(pool):
        k = min(m // 2, len(pool))
        idx = torch.randperm(len(pool), generator=gen)[:k]
        g[:k] = pool.reshape(len(pool), -1)[idx.to(pool.device)].to(g)
    return g
