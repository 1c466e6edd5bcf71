"""One neuron of the next layer, recovered by following its critical surface (Rolnick & Kording,
ICML 2020: a later-layer neuron's boundary bends where it crosses an earlier layer's boundary,
and the bend reveals the weight between them; Carlini, Jagielski, Mironov 2020, Sec. 4: a
critical point gives only a partial signature, completed across regions where other neurons
are active).

With layers 1..m known, the neuron is θ·φ(x) = 0, φ = (ReLU(u_m), h_{m−1}, 1)
(cryptanalysis/deep_model.py). Each critical point x of it gives one linear equation
θ·φ(x) = 0, and a gradient jump ν at x gives d more: ν ∥ (∂φ/∂x)ᵀθ. One point determines only
the part of θ on the neurons active there, so the surface is followed: from the current critical
point, a step along the surface's tangent plane toward a known neuron's boundary, just across it;
there the surface is a plane hinged on the boundary (its normal gains a multiple μ of that
neuron's gradient), so one critical point on a short search line fixes μ; the new plane is
checked at a second point of the new region (6 queries) or, with exact gradients, by the jump
itself (2 queries). Steps go toward the boundaries of neurons not yet seen on both sides, until
the equations leave one solution (SVD). The solution is then checked where it predicts critical
points far away, in other regions: a deeper neuron, whose surface also bends at unknown
boundaries, fails there and is left for the next layer.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from harness.attacks.extraction.cryptanalysis import kink_search as ks
from harness.attacks.extraction.cryptanalysis import relu_lines as rl
from harness.attacks.extraction.cryptanalysis.deep_model import KnownLayers
from harness.attacks.extraction.cryptanalysis.neuron_system import NeuronSystem
from harness.core.gradients import AnswerNoise

FALLBACK_BELOW = 2  # fewer check points than this on Gaussian lines: look around the walk's points
FALLBACK_REACH = 3.0  # ... through random points 3|x| from them (crossings far from the walk)


@dataclass
class Walk:
    """The outcome of following one surface: θ when determined and verified, the critical points
    visited, and why it stopped."""

    theta: torch.Tensor | None
    points: list[torch.Tensor] = field(default_factory=list)
    reason: str = ""
    steps: int = 0
    system: NeuronSystem | None = None


def unit(v: torch.Tensor) -> torch.Tensor:
    return v / v.norm().clamp_min(1e-300)


class SurfaceFollower:
    """Follows critical surfaces for layer m + 1 given the known layers (see the module
    docstring). `explain`: exact gradients are available for jumps."""

    def __init__(self, oracle, known: KnownLayers, noise: AnswerNoise, explain: bool,
                 gen: torch.Generator, max_steps: int | None = None):
        self.oracle, self.known, self.noise, self.explain, self.gen = oracle, known, noise, explain, gen
        widths = known.widths()
        m = known.depth
        self.top = list(range(sum(widths[:-1]), sum(widths))) if m else []
        # the layer below matters only when φ's linear block is h_{m−1}
        self.below = (list(range(sum(widths[:-2]), sum(widths[:-1])))
                      if m >= 2 and not known.linear_on_top else [])
        self.max_steps = max_steps or 3 * (known.feature_width()) + 10
        self.signs: torch.Tensor | None = None  # the top layer's orientations known so far
        self.patience = 8  # steps toward one boundary before another is tried
        self.max_misses = 3  # steps that lose the surface before it is called a deeper neuron
        self.reach = 2e-3  # how far past a boundary the surface is searched (× |x|)
        self.last = -1  # the boundary crossed last

    # ----------------------------------------------------------------- measurements
    def check_width(self, scale: torch.Tensor) -> torch.Tensor:
        """Half-spacing of a 6-point check: narrow (another boundary between the probes would
        pass for this one), yet wide enough that the answers' noise does not hide the bend."""
        floor = 1e6 * self.noise.sigma / max(self.noise.scale, 1e-300)
        return torch.as_tensor(scale, dtype=torch.float64).clamp_min(1.0) * max(1e-6, floor)

    def jump(self, x: torch.Tensor, nu: torch.Tensor) -> torch.Tensor | None:
        """The explained gradient jump across the surface at x along nu (2 queries); None when
        the gradient does not change there (no kink at x: a bracket that held two of them)."""
        eps = 1e-7 * max(1.0, float(x.norm()))
        g = rl.ask(self.oracle, torch.stack([x + eps * nu, x - eps * nu]), "explain")
        jump = g[0] - g[1]
        if not float(jump.norm()) > 1e-9 * float(g.norm(dim=1).sum()):
            return None
        return jump

    def region(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat(self.known.pre(x[None]), 1)[0] > 0 if self.known.depth else x[:0].bool()

    def on_known(self, x: torch.Tensor) -> bool:
        """Is x on a known neuron's boundary (a kink the known layers explain)?"""
        vals = self.known.neuron_values(x[None])
        return bool(vals.numel()) and float(vals.abs().min()) < 1e-7

    def room(self, x: torch.Tensor, direction: torch.Tensor) -> float:
        """Distance from x along ±direction to the nearest known boundary."""
        a, _ = self.known.first_crossing(x, direction)
        b, _ = self.known.first_crossing(x, -direction)
        return min(a, b)

    def plane_holds(self, x: torch.Tensor, nu: torch.Tensor, reach: float) -> bool | None:
        """Does the surface pass through x with normal nu, judged at a point of the same known
        region on that plane (values, 6 queries)? None when the check cannot see it there."""
        r = torch.randn(x.shape, generator=self.gen, dtype=x.dtype).to(x.device)
        r = unit(r - (r @ nu) * nu)
        s, _ = self.known.first_crossing(x, r)
        delta = min(0.5 * s, reach)
        y = x + delta * r
        w = min(float(self.check_width(y.norm())), self.room(y, nu) / 4, delta / 4)
        tau, visible, straight = ks.check_kinks(self.oracle, y[None], nu[None],
                                                torch.tensor([w], dtype=y.dtype, device=y.device),
                                                self.noise)
        if not bool(visible[0] and straight[0]):
            return None
        return abs(float(tau[0])) <= 0.1 * w

    # ----------------------------------------------------------------- is it this layer?
    def flat_in_region(self, x0: torch.Tensor, nu0: torch.Tensor, probes: int = 4) -> bool:
        """A cheap test before a walk: inside the known region around x0, a neuron of the next
        layer is the plane (x0, ν0) everywhere, while a deeper one bends wherever it crosses an
        unknown boundary of the next layer. The plane is checked at `probes` points spread over
        the region (6 queries each); False when the surface is not where the plane puts it at
        two of them or more (a visible kink off the plane counts as two)."""
        if self.known.depth == 0:
            return True
        nu = unit(nu0)
        pts, widths = [], []
        for _ in range(probes):
            r = torch.randn(x0.shape, generator=self.gen, dtype=x0.dtype).to(x0.device)
            r = unit(r - (r @ nu) * nu)
            s, _ = self.known.first_crossing(x0, r)
            s = min(s, 10.0 * max(1.0, float(x0.norm())))
            y = x0 + 0.8 * s * r
            pts.append(y)
            widths.append(min(float(self.check_width(y.norm())), self.room(y, nu) / 4))
        x = torch.stack(pts)
        w = torch.tensor(widths, dtype=x.dtype, device=x.device)
        tau, visible, straight = ks.check_kinks(self.oracle, x, nu.expand_as(x), w, self.noise)
        on_plane = visible & straight & (tau.abs() <= 0.1 * w)
        off_plane = visible & straight & ~on_plane
        missing = straight & ~visible
        return int(missing.sum()) + 2 * int(off_plane.sum()) < 2 or bool(on_plane.sum() >= probes - 1)

    # ----------------------------------------------------------------- the walk
    def follow(self, x0: torch.Tensor, nu0: torch.Tensor) -> Walk:
        known = self.known
        system = NeuronSystem(known.feature_width(), x0.device)
        _, jphi = known.jacobians(x0[None])
        system.add_location(known.features(x0[None]))
        system.add_jump(jphi[0], nu0)
        system.add_signs(known, self.signs)
        walk = Walk(None, [x0], system=system)
        if known.depth == 0:
            walk.theta = system.solve().theta
            return walk
        n_units = sum(known.widths())
        seen_on = torch.zeros(n_units, dtype=torch.bool, device=x0.device)
        seen_off = torch.zeros_like(seen_on)
        on = self.region(x0)
        seen_on |= on
        seen_off |= ~on
        failed = torch.zeros_like(seen_on)
        if self.signs is not None and known.linear_on_top:
            # an orientation known: the neuron's weight shows where it is truly active, so that
            # side is all the walk needs to see
            top = torch.tensor(self.top, device=x0.device)
            known_sign = ~torch.isnan(self.signs)
            self.need_on = torch.zeros_like(seen_on)
            self.need_off = torch.zeros_like(seen_on)
            self.need_on[top[known_sign & (self.signs == 0)]] = True
            self.need_off[top[known_sign & (self.signs == 1)]] = True
        else:
            self.need_on = self.need_off = torch.zeros_like(seen_on)
        # every critical point reached is a launch point: (x, unit normal, boundary it was
        # reached across); a step toward a boundary starts from the one nearest it along its
        # plane, so one fold of the surface cannot trap the walk
        visited = [(x0, unit(nu0), -1)]
        tried: set[tuple[int, int]] = set()
        target, tries, misses = -1, 0, 0
        for step in range(self.max_steps):
            walk.steps = step
            sol = system.solve()
            if sol.inconsistent:
                walk.reason = f"inconsistent equations (σ_min {sol.rel_min:.1e}): not one hyperplane here"
                return walk
            if sol.determined:
                break
            if target < 0 or self._done(target, seen_on, seen_off) or tries >= self.patience:
                if target >= 0 and not self._done(target, seen_on, seen_off):
                    failed[target] = True
                target = self._target(visited[-1][0], visited[-1][1], seen_on, seen_off, failed)
                if target < 0:
                    walk.reason = "no boundary left to cross"
                    break
                tries = 0
            tries += 1
            launch = self._launch(visited, target, tried)
            if launch < 0:
                failed[target] = True
                target = -1
                continue
            tried.add((launch, target))
            x, nu, entry = visited[launch]
            heading = self._heading(x, nu, target)
            self.last = entry
            moved = None if heading is None else self._step(x, nu, heading, system)
            if moved is None:
                misses += 1
                if misses > self.max_misses:
                    # a neuron of the next layer is found again just past every boundary; a
                    # deeper one also bends at boundaries of the next layer, unknown here, and
                    # is lost at such steps
                    walk.reason = f"the surface was lost {misses} times: a deeper neuron"
                    return walk
                continue
            x, nu = moved
            visited.append((x, nu, self.last))
            walk.points.append(x)
            on = self.region(x)
            seen_on |= on
            seen_off |= ~on
        sol = system.solve()
        if sol.determined:
            walk.theta = sol.theta
        elif not walk.reason:
            walk.reason = (f"undetermined after {walk.steps} steps (σ {sol.rel_min:.1e} / "
                           f"{sol.rel_next:.1e})")
        return walk

    def _done(self, t: int, seen_on, seen_off) -> bool:
        return bool((seen_on[t] & seen_off[t]) | (self.need_on[t] & seen_on[t])
                    | (self.need_off[t] & seen_off[t]))

    def _target(self, x, nu, seen_on, seen_off, failed) -> int:
        """The known neuron to cross next: of the top layer, then the one below, a neuron not yet
        seen on both sides, the nearest along the tangent plane."""
        us = torch.cat(self.known.pre(x[None]), 1)[0]
        jac, _ = self.known.jacobians(x[None])
        g = torch.cat([j[0] for j in jac])
        gt = g - (g @ nu)[:, None] * nu[None, :]
        dist = us.abs() / gt.norm(dim=1).clamp_min(1e-300)
        for group in (self.top, self.below):
            if not group:
                continue
            idx = torch.tensor(group, device=x.device)
            done = (seen_on[idx] & seen_off[idx]) | (self.need_on[idx] & seen_on[idx]) | (
                self.need_off[idx] & seen_off[idx])
            todo = ~done & ~failed[idx]
            if bool(todo.any()):
                cand = idx[todo]
                return int(cand[torch.argmin(dist[cand])])
        return -1

    def _launch(self, visited, target: int, tried) -> int:
        """The visited critical point nearest `target`'s boundary along its own plane, not yet
        launched toward it (−1: none left)."""
        free = [i for i in range(len(visited)) if (i, target) not in tried]
        if not free:
            return -1
        x = torch.stack([visited[i][0] for i in free])
        nu = torch.stack([visited[i][1] for i in free])
        jac, _ = self.known.jacobians(x)  # all visited points in one batch
        g = torch.cat([j for j in jac], 1)[:, target]
        gt = g - (g * nu).sum(1, keepdim=True) * nu
        u = torch.cat(self.known.pre(x), 1)[:, target]
        d = u.abs() / gt.norm(dim=1).clamp_min(1e-300)
        return free[int(torch.argmin(d))]

    def _heading(self, x, nu, target: int) -> torch.Tensor | None:
        """A direction on the surface's plane at x toward `target`'s boundary that keeps every
        other boundary it would meet first at its distance (their gradients projected out, as in
        an active-set method): the walk reaches the target directly when its region borders it,
        instead of zigzagging into a corner. Falls back to the plain projected gradient."""
        known = self.known
        us = torch.cat(known.pre(x[None]), 1)[0]
        jac, _ = known.jacobians(x[None])
        g = torch.cat([j[0] for j in jac])
        sign = -1.0 if float(us[target]) > 0 else 1.0
        want = sign * g[target]
        plain = want - (want @ nu) * nu
        if float(plain.norm()) < 1e-8 * float(want.norm()):
            return None
        block: list[int] = []
        w = plain
        for _ in range(min(len(us), known.dim - 2)):
            rate = g @ w
            dist = -us / rate
            dist[(dist <= 0) | ~torch.isfinite(dist)] = float("inf")
            reach = float(dist[target])
            dist[target] = float("inf")
            dist[block] = float("inf") if block else dist[block]
            k = int(torch.argmin(dist))
            if not float(dist[k]) < reach:
                return unit(w)
            block.append(k)
            basis = torch.linalg.qr(torch.stack([nu, *[g[b] for b in block]], 1))[0]
            w = want - basis @ (basis.T @ want)
            if float(w.norm()) < 1e-6 * float(want.norm()) or float(w @ want) <= 0:
                break
        return unit(plain)

    def _step(self, x, nu, heading: torch.Tensor, system: NeuronSystem):
        """Cross the first known boundary along the heading projected on the tangent plane; the
        new critical point and normal, its equations added, or None."""
        known = self.known
        w = heading - (heading @ nu) * nu
        if float(w.norm()) < 1e-6:
            return None
        w = unit(w)
        s1, who = known.first_crossing(x, w)
        if who >= 0 and who == self.last:
            # back across the boundary just crossed: the surface folds there, so slide along
            # the ridge where they meet (the heading also orthogonal to that boundary's normal)
            g = known.unit_gradient(x, who)
            basis = torch.linalg.qr(torch.stack([nu, g], 1))[0]
            w = heading - basis @ (basis.T @ heading)
            if float(w.norm()) < 1e-6:
                return None
            w = unit(w)
            s1, who = known.first_crossing(x, w)
        if who < 0 or s1 > 1e3 * max(1.0, float(x.norm())):
            return None
        s2, _ = known.first_crossing(x, w, s_min=s1)
        # just across: few other boundaries meet the short search line there; the hinge then
        # fixes μ to ~1e-15·|x|/r, provided the old plane is known near the boundary: with values
        # (normals derived, not measured) the surface is located again just before it (6 queries),
        # or an old normal's error would grow by s1/r at every step
        r = min(0.5 * (s2 - s1), self.reach * max(1.0, float(x.norm())), 0.5 * s1)
        before = x + (s1 - r) * w
        if not self.explain:
            width = min(float(self.check_width(before.norm())), self.room(before, nu) / 4, r / 4)
            tau, visible, straight = ks.check_kinks(
                self.oracle, before[None], nu[None],
                torch.tensor([width], dtype=x.dtype, device=x.device), self.noise)
            if not bool(visible[0] and straight[0]) or abs(float(tau[0])) > 3 * width:
                return None
            before = before + float(tau[0]) * nu
            system.add_location(known.features(before[None]))
        y, xc = before + 2 * r * w, before + r * w
        gw = known.unit_gradient(y, who)
        here = self.region(x)
        for span in (4 * r + 1e-9, 32 * r + 1e-9):  # a steep bend puts the surface farther out
            found = self._catch(x, nu, y, xc, r, span, who, gw, here, system)
            if found is not None:
                self.last = who
                return found
        return None

    def _catch(self, x, nu, y, xc, r, span, who, gw, here, system):
        """The surface's critical point on y + τ·ν, |τ| ≤ span, checked against the bend it can
        have (see `_step`); its equations added."""
        known = self.known
        taus = ks.search_kinks(self.oracle, y, nu, span, self.noise)
        for tau in sorted(taus.tolist(), key=abs)[:4]:
            xq = y + tau * nu
            if self.on_known(xq):
                continue
            toggled = torch.nonzero(self.region(xq) != here).flatten()
            if self.explain and 1 <= len(toggled) <= 4:
                # measured: the jump must be the old normal plus multiples of the gradients of
                # the boundaries crossed (the surface bends only there)
                jump = self.jump(xq, nu)
                if jump is None:
                    continue
                grads = torch.stack([known.unit_gradient(xq, int(k)) for k in toggled] + [nu], 1)
                q = torch.linalg.qr(grads)[0]
                j = unit(jump)
                if float((j - q @ (q.T @ j)).norm()) > 1e-7:
                    continue
                nq = j if float(j @ nu) >= 0 else -j
                _, jphi = known.jacobians(xq[None])
                system.add_location(known.features(xq[None]))
                system.add_jump(jphi[0], jump)
            elif not self.explain and len(toggled) == 1 and int(toggled[0]) == who:
                # the hinge: the new plane contains the old one's trace on the boundary
                d = xq - xc
                denom = float(gw @ d)
                if abs(denom) < 1e-9 * float(gw.norm() * d.norm()):
                    continue
                nq = unit(nu - float(nu @ d) / denom * gw)
                if not self.plane_holds(xq, nq, reach=r):
                    continue
                system.add_location(known.features(xq[None]))
            else:
                continue
            return xq, nq
        return None

    # ----------------------------------------------------------------- the check far away
    def surface_points(self, theta: torch.Tensor, count: int, tries: int = 24,
                       near: list[torch.Tensor] | None = None) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Up to `count` points of the predicted surface θ·φ = 0 on random Gaussian lines (one per
        line, off every known boundary), with the predicted normal there; no queries. A surface
        that no Gaussian line crosses (a neuron on, or off, almost everywhere) is sought on
        lines through random points around the critical points `near` (those the walk visited)
        too, 3|x| away, so the crossings are far from where its equations came from."""
        known, d, dev = self.known, self.known.dim, theta.device
        grid = torch.linspace(-4.0, 4.0, 257, dtype=torch.float64, device=dev)
        out = []
        for k in range(2 * tries if near else tries):
            if len(out) >= count:
                break
            u = torch.randn(d, generator=self.gen, dtype=torch.float64).to(dev)
            v = torch.randn(d, generator=self.gen, dtype=torch.float64).to(dev)
            if k >= tries and len(out) >= FALLBACK_BELOW:  # Gaussian lines met it often enough
                break
            if k >= tries:  # Gaussian lines missed it everywhere: around the walk's points
                x0 = near[k % len(near)]
                u = x0 + u / u.norm() * FALLBACK_REACH * max(1.0, float(x0.norm()))
            z = known.features(u[None] + grid[:, None] * v[None]) @ theta
            change = torch.nonzero(torch.sign(z[:-1]) * torch.sign(z[1:]) < 0).flatten()
            if not len(change):
                continue
            i = int(change[torch.randint(len(change), (1,), generator=self.gen)])
            lo, hi = float(grid[i]), float(grid[i + 1])
            zlo = float(z[i])
            for _ in range(200):  # bisection on the known function: no queries
                mid = 0.5 * (lo + hi)
                zm = float(known.features((u + mid * v)[None])[0] @ theta)
                if (zm > 0) == (zlo > 0):
                    lo, zlo = mid, zm
                else:
                    hi = mid
                if hi - lo <= 1e-15 * max(1.0, abs(mid)):
                    break
            x = u + 0.5 * (lo + hi) * v
            if bool((known.neuron_values(x[None]).abs() < 1e-6).any()):
                continue  # on a known boundary: the check would straddle two regions
            _, jphi = known.jacobians(x[None])
            normal = jphi[0].T @ theta[:-1]
            if float(normal.norm()) > 0:
                out.append((x, unit(normal)))
        return out

    def verify(self, theta: torch.Tensor, count: int = 4, near: list[torch.Tensor] | None = None
               ) -> tuple[int, int, int, list[torch.Tensor]]:
        """(passed, off, missing, located points): the predicted surface checked at `count` points far
        from where it was found (6 queries each). A visible, straight kink off its predicted
        place is a failure (`off`); so, more weakly, is a place with no kink at all where the check
        could have seen one (`missing`): a neuron of the next layer is there, unless no output
        depends on it at that point."""
        pts = self.surface_points(theta, count, near=near)
        if not pts:
            return 0, 0, 0, []
        x = torch.stack([p for p, _ in pts])
        n = torch.stack([q for _, q in pts])
        room = torch.tensor([self.room(xi, ni) for xi, ni in zip(x, n, strict=True)],
                            dtype=x.dtype, device=x.device)
        w = torch.minimum(self.check_width(x.norm(dim=1)), room / 4)
        tau, visible, straight = ks.check_kinks(self.oracle, x, n, w, self.noise)
        good = visible & straight & (tau.abs() <= 0.1 * w)
        located = [xi + ti * ni for xi, ti, ni, gi in zip(x, tau, n, good, strict=True) if gi]
        off = visible & straight & ~good
        missing = straight & ~visible
        return int(good.sum()), int(off.sum()), int(missing.sum()), located
