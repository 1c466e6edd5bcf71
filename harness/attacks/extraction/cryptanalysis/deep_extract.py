"""The layer-by-layer driver of the cryptanalytic attack (Carlini, Jagielski, Mironov 2020,
Sec. 4: critical points, signatures of one layer, its signs, then peel it off and repeat; the
output layer by least squares; the model checked on fresh queries).

Layer 1: the critical points on a long Gaussian line (every first-layer hyperplane crosses it),
each with its gradient jump; a point whose hyperplane is confirmed far away (3 points) is a
first-layer neuron. Layer m + 1: every critical point the known layers do not explain is followed
along its surface (neuron_walk.py); a surface that is a hyperplane in (ReLU(u_m), h_{m−1}, 1) and
checks out far away is a neuron of layer m + 1; one that fails is deeper and waits for the next
layer. A layer is complete when `quiet_lines` new lines bring no new neuron (or, with a declared
architecture, when it has its declared width); its neurons then fix layer m's signs
(layer_signs.py), and it goes on top. After each layer the output layer is fitted on fresh
queries (least squares on (ReLU(u_top), h_{top−1}, 1)); the model that passes the self-check on
fresh queries is the answer, and every model on the way is kept (`ctx.keep`) so a stopped attack
is scored on the layers it had.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import torch

from harness.attacks.base import Artifact
from harness.attacks.extraction.cryptanalysis import kink_search as ks
from harness.attacks.extraction.cryptanalysis import relu_lines as rl
from harness.attacks.extraction.cryptanalysis.deep_model import DeepReluNet, KnownLayers
from harness.attacks.extraction.cryptanalysis.layer_signs import apply_signs, solve_signs
from harness.attacks.extraction.cryptanalysis.neuron_walk import SurfaceFollower
from harness.core.errors import AttackStopped, PrecisionLimit, TimeLimit
from harness.core.gradients import AnswerNoise


@dataclass
class Candidate:
    """A critical point the known layers do not explain: where, its jump, the deepest layer tried."""

    x: torch.Tensor
    normal: torch.Tensor
    failed_at: int = -1


@dataclass
class Progress:
    """What the driver has: layers, the current model and its check, counts, notes."""

    known: KnownLayers
    model: DeepReluNet | None = None
    check_error: float = float("inf")
    lines: int = 0
    walks: int = 0
    deeper: int = 0
    layer_queries: list[int] = field(default_factory=list)
    layer_seconds: list[float] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    signs_clean: bool = True
    rebuilds: int = 0
    capped: list[str] = field(default_factory=list)  # own limits reached while still finding neurons


class DeepExtraction:
    """One run of the attack against `oracle` (see the module docstring)."""

    def __init__(self, oracle, ctx, p, noise: AnswerNoise, explain: bool, check_tol: float):
        self.oracle, self.ctx, self.p, self.noise = oracle, ctx, p, noise
        self.explain, self.check_tol = explain, check_tol
        self.d = oracle.info.dim
        self.gen = ctx.gen
        self.state = Progress(KnownLayers(self.d, oracle.device))
        self.pending: list[Candidate] = []
        self.layer: list[torch.Tensor] = []
        self.archive: list[Candidate] = []  # every critical point walked from, kept for rebuilds
        self.t0 = time.perf_counter()
        self.stale = False
        arch = getattr(getattr(ctx, "threat", None), "architecture", None)
        self.widths = list(arch.hidden) if arch is not None and getattr(arch, "hidden", None) else None

    # ----------------------------------------------------------------- budget and time
    def _clock(self) -> None:
        if self.p.max_seconds and time.perf_counter() - self.t0 > self.p.max_seconds:
            raise TimeLimit(f"the attack's own time limit ({self.p.max_seconds:g} s) was reached "
                            f"with {self.state.known.depth} layer(s) extracted")

    # ----------------------------------------------------------------- lines
    def new_line(self, start: torch.Tensor | None = None) -> list[Candidate]:
        """Critical points of one long Gaussian line (through `start` when given) that the known
        layers and the layer under construction do not explain, each with its gradient jump."""
        self._clock()
        self.state.lines += 1
        line = rl.random_line(self.d, self.gen, self.oracle.device, start)
        grid = rl.sinh_grid(self.p.grid, self.p.span, self.oracle.device)
        t, sure = ks.line_kinks(self.oracle, line, grid, self.noise, self.p.max_units)
        t = t[sure]
        if not len(t):
            return []
        x = line.at(t)
        fresh = ~self.explained(x)
        idx = torch.nonzero(fresh).flatten()
        if not len(idx):
            return []
        normals = ks.kink_normals(self.oracle, line, t, idx, self.noise, self.explain)
        good = normals.norm(dim=1) > 0
        out = [Candidate(x[i], n) for i, n, g in zip(idx.tolist(), normals, good, strict=True) if g]
        return sorted(out, key=lambda c: float(c.x.norm()))  # near the origin first

    def explained(self, x: torch.Tensor) -> torch.Tensor:
        """Points on a known neuron's boundary or on one of the layer being built."""
        known = self.state.known
        vals = known.neuron_values(x)
        hit = (vals.abs() < 1e-7).any(1) if vals.numel() else torch.zeros(len(x), dtype=torch.bool,
                                                                              device=x.device)
        if self.layer:
            th = torch.stack(self.layer)
            phi = known.features(x)
            rel = (phi @ th.T).abs() / (phi.norm(dim=1, keepdim=True) * th.norm(dim=1))
            hit |= (rel < 1e-7).any(1)
        return hit

    # ----------------------------------------------------------------- one layer
    def extract_layer(self) -> int:
        """Neurons of the next layer (into self.layer); returns how many were found."""
        known = self.state.known
        self.layer = []
        self.follower = SurfaceFollower(self.oracle, known, self.noise, self.explain, self.gen)
        self.open_walks: list[tuple[Candidate, object]] = []
        want = self.widths[known.depth] if self.widths and known.depth < len(self.widths) else None
        queue = [c for c in self.pending if c.failed_at < known.depth]
        self.pending = [c for c in self.pending if c.failed_at >= known.depth]
        for cand in queue:
            self.consider(cand)
        self.reopen()
        quiet, lines = 0, 0
        while quiet < self.p.quiet_lines and lines < self.p.max_lines:
            if want is not None and len(self.layer) >= want:
                break
            before = len(self.layer)
            for cand in self.new_line():
                self.consider(cand)
            self.reopen()
            lines += 1
            quiet = 0 if len(self.layer) > before else quiet + 1
        if quiet < self.p.quiet_lines and not (want is not None and len(self.layer) >= want):
            self.state.capped.append(f"max_lines = {self.p.max_lines} lines for layer {known.depth + 1} "
                                     f"while its last {quiet + 1} line(s) still brought new neurons")
        return len(self.layer)

    def consider(self, cand: Candidate) -> None:
        """Follow one unexplained critical point: a neuron of this layer, or a deeper one kept."""
        self._clock()
        if bool(self.explained(cand.x[None])[0]):
            return
        if cand.failed_at < 0 and not any(c.x is cand.x for c in self.archive):
            self.archive.append(cand)
        if not self.follower.flat_in_region(cand.x, cand.normal):
            cand.failed_at = self.state.known.depth
            self.pending.append(cand)
            self.state.deeper += 1
            return
        self.state.walks += 1
        walk = self.follower.follow(cand.x, cand.normal)
        if walk.theta is not None and self.accept(walk):
            return
        if walk.theta is None and walk.reason.startswith(("no boundary", "undetermined")):
            self.open_walks.append((cand, walk))  # may close once more orientations are known
            return
        cand.failed_at = self.state.known.depth
        self.pending.append(cand)
        self.state.deeper += 1

    @staticmethod
    def verified(follower, walk) -> tuple[bool, list[torch.Tensor]]:
        """(Does θ hold where it predicts critical points far away — 3 checks on it, none off it,
        one missing at most; four more when the first saw too little —, the points located)."""
        passed, off, missing, located = follower.verify(walk.theta, near=walk.points)
        if passed < 3 and off == 0 and missing <= 1:  # checks that saw nothing: four more
            p2, o2, m2, l2 = follower.verify(walk.theta, near=walk.points)
            passed, off, missing, located = passed + p2, off + o2, missing + m2, located + l2
        return passed >= 3 and off == 0 and missing <= 1, located

    def accept(self, walk) -> bool:
        """Check a determined surface far away; keep it (polished) as a neuron of the layer."""
        ok, located = self.verified(self.follower, walk)
        if ok:
            self.layer.append(self._polish(walk, located))
            self.follower.signs = self.known_signs()
            return True
        return False

    def known_signs(self) -> torch.Tensor | None:
        """The top layer's orientations the neurons found so far fix (NaN where none does):
        w_j = −q_j/p_j from any neuron with a clear weight on j ((ReLU(u), u, 1) features), or
        all at once from solve_signs when the features are (ReLU(u), h, 1)."""
        known = self.state.known
        if known.depth == 0 or not self.layer:
            return None
        dm = len(known.b[-1])
        th = torch.stack(self.layer)
        signs = torch.full((dm,), float("nan"), dtype=torch.float64, device=th.device)
        if known.linear_on_top:
            p, q = th[:, :dm], th[:, dm:2 * dm]
            big = p.abs() > 1e-6 * th.abs().amax(1, keepdim=True)
            ratio = torch.where(big, -q / torch.where(big, p, torch.ones_like(p)), torch.nan)
            for j in range(dm):
                r = ratio[:, j][~torch.isnan(ratio[:, j])]
                if len(r) and float((r - r.round()).abs().max()) < 1e-6 and len(set(r.round().tolist())) == 1:
                    if float(r.round()[0]) in (0.0, 1.0):
                        signs[j] = r.round()[0]
            return signs
        p, beta, _ = known.split(th)
        fix = solve_signs(p, beta, known.w[-1])
        if fix.clean and bool(fix.used.all()):
            signs = fix.flip.to(torch.float64)
        return signs

    def reopen(self) -> None:
        """Walks left undetermined, given the orientations known now (no queries but the far check)."""
        signs = self.follower.signs
        if signs is None or not self.open_walks:
            return
        still = []
        for cand, walk in self.open_walks:
            if bool(self.explained(cand.x[None])[0]):
                continue
            walk.system.add_signs(self.state.known, signs)
            sol = walk.system.solve()
            if sol.determined and not sol.inconsistent:
                walk.theta = sol.theta
                if self.accept(walk):
                    continue
            still.append((cand, walk))
        self.open_walks = still

    def _polish(self, walk, located: list[torch.Tensor]) -> torch.Tensor:
        """θ re-solved with the far, precisely located critical points of the check added."""
        theta = walk.theta
        if not located or walk.system is None:
            return theta
        walk.system.add_location(self.state.known.features(torch.stack(located)))
        sol = walk.system.solve()
        if not sol.determined:
            return theta
        return sol.theta if float(sol.theta @ theta) >= 0 else -sol.theta

    # ----------------------------------------------------------------- signs, push, output
    def push_layer(self) -> None:
        """Resolve the top layer's signs with the new layer's neurons, then put it on top."""
        known = self.state.known
        th = torch.stack(self.layer)
        if known.depth == 0:
            known.push(th[:, :-1], th[:, -1])
            return
        p, beta, c = known.split(th)
        fix = solve_signs(p, beta, known.w[-1])
        if not fix.clean:
            self.state.signs_clean = False
            self.state.notes.append(f"layer {known.depth} signs unclear (w off by {fix.deviation:.1e}, "
                                    f"residual {fix.residual:.1e})")
        w_m, b_m, p, beta, c = apply_signs(fix, known.w[-1], known.b[-1], p, beta, c)
        known.w[-1], known.b[-1] = w_m, b_m
        known.push(p, c)

    def fit_output(self) -> tuple[DeepReluNet, float]:
        net, err, worst = self._fit_output()
        self.worst = worst
        return net, err

    def _fit_output(self) -> tuple[DeepReluNet, float, torch.Tensor]:
        """The output layer by least squares on fresh queries, the top layer's signs from it, and
        the model's self-check (max relative error on fresh queries)."""
        known = self.state.known
        # the linear block on h_{m−1}: it also absorbs a top-layer neuron that is on wherever the
        # lines went (never crossed, so never found), whose output is then linear in h_{m−1}
        width = known.feature_width(h_block=True)
        n = max(2 * width, width + 32)
        x = torch.randn(n, self.d, generator=self.gen, dtype=torch.float64).to(self.oracle.device)
        x = torch.cat([x, known.straddle_points(self.gen)])
        y = rl.ask(self.oracle, x)
        keep = ~y.isnan().any(1)
        phi = known.features(x[keep], h_block=True)
        col = phi.norm(dim=0)
        # a feature (nearly) zero on every fit point carries no information here: left out, or
        # least squares scales it up to fit one point and the model explodes where it is active
        used = col > 1e-9 * float(col.max())
        coef = torch.zeros(y.shape[1], phi.shape[1], dtype=phi.dtype, device=phi.device)
        coef[:, used] = (rl.lstsq(phi[:, used] / col[used], y[keep]) / col[used, None]).T
        layers = [(w, b, None) for w, b in zip(known.w, known.b, strict=True)]
        if known.depth == 0:
            layers = [(coef[:, :-1], coef[:, -1], None)]
        else:
            p, beta, c = known.split(coef, h_block=True)
            fix = solve_signs(p, beta, known.w[-1])
            w_m, b_m, p, beta, c = apply_signs(fix, known.w[-1], known.b[-1], p, beta, c)
            layers[-1] = (w_m, b_m, None)
            skip = beta if float(beta.abs().max()) > 0 else None
            layers.append((p, c, skip))
            if not fix.clean:
                self.state.notes.append(f"output-layer signs unclear (w off by {fix.deviation:.1e})")
        net = DeepReluNet(layers)
        # a first check on a few fresh queries; a model that passes it is checked on many (a
        # neuron active on few inputs, never met by a line, shows only there)
        first = min(self.p.check_points, 256)
        xc = rl.check_points(self.oracle, first, self.gen)
        err, per = rl.self_check(self.oracle, net, xc)
        if err <= self.check_tol and self.p.check_points > first:
            more = rl.check_points(self.oracle, self.p.check_points - first, self.gen)
            err2, per2 = rl.self_check(self.oracle, net, more)
            xc, per, err = torch.cat([xc, more]), torch.cat([per, per2]), max(err, err2)
        worst = xc[int(per.argmax())] if len(per) else xc[0]
        return net, err, worst

    def complete_layer(self, before: KnownLayers):
        """Put the new layer on top and fit the output; while the model misses fresh queries,
        look for neurons the lines missed on a line through the worst check point (where a
        missing neuron shows): first of the new layer (then refit), then of a layer below.
        Returns (depth, θ, prefix) for a neuron of layer depth + 1 < the new one (every layer
        above it must then be rebuilt), else None."""
        st = self.state
        for attempt in range(self.p.recover_lines + 1):
            st.known = before.copy()
            self.push_layer()
            st.model, st.check_error = self.fit_output()
            self.keep()
            if st.check_error <= self.check_tol:
                return None
            if attempt == self.p.recover_lines:  # every line so far found neurons: more may
                st.capped.append(f"recover_lines = {self.p.recover_lines} lines through the worst "
                                 f"check point of layer {before.depth + 1}, each finding neurons")
                return None
            st.known = before.copy()
            self.follower = SurfaceFollower(self.oracle, st.known, self.noise, self.explain, self.gen)
            count = len(self.layer)
            near = sorted(self.new_line(start=self.worst),
                          key=lambda c: float((c.x - self.worst).norm()))[:self.p.recover_walks]
            for cand in near:
                self.consider(cand)
            if len(self.layer) > count:
                st.notes.append(f"layer {before.depth + 1}: {len(self.layer) - count} neuron(s) "
                                "found on a line through the worst check point")
                continue
            for cand in near:
                hit = self.lower_neuron(cand, before)
                if hit is not None:
                    return hit
            st.known = before.copy()
            self.push_layer()
            st.model, st.check_error = self.fit_output()
            return None
        return None

    def missing_below(self):
        """When no neuron of a next layer was found and the model misses fresh queries: the
        critical points near the worst check point, tried as neurons of the known layers."""
        st = self.state
        if st.known.depth == 0 or st.check_error <= self.check_tol or not hasattr(self, "worst"):
            return None
        before = st.known.copy()
        self.layer = []
        near = sorted(self.new_line(start=self.worst),
                      key=lambda c: float((c.x - self.worst).norm()))[:self.p.recover_walks]
        for cand in near:
            hit = self.lower_neuron(cand, before)
            if hit is not None:
                return hit
        return None

    def lower_neuron(self, cand: Candidate, before: KnownLayers):
        """Is the critical point a neuron of a layer below the new one (missed there: active on
        few inputs, or seldom visible)? Tried from the layer just below downward."""
        if bool(self.explained(cand.x[None])[0]):
            return None
        for depth in range(before.depth - 1, -1, -1):
            sub = before.prefix(depth)
            follower = SurfaceFollower(self.oracle, sub, self.noise, self.explain, self.gen)
            if depth:  # every layer of the prefix has its orientation already
                follower.signs = torch.zeros(len(sub.b[-1]), dtype=torch.float64, device=cand.x.device)
            if not follower.flat_in_region(cand.x, cand.normal):
                continue
            self.state.walks += 1
            walk = follower.follow(cand.x, cand.normal)
            if walk.theta is None:
                continue
            if self.verified(follower, walk)[0]:  # as a neuron of this layer is accepted
                return depth, walk.theta, sub
        return None

    def rebuild(self, depth: int, theta: torch.Tensor, sub: KnownLayers, before: KnownLayers) -> None:
        """Add the neuron found below to layer depth + 1 and drop every layer above it: they are
        extracted again (from the critical points met so far, then new lines)."""
        st = self.state
        if depth == 0:
            row, bias = theta[None, :-1], theta[-1:]
        else:
            row, _, bias = sub.split(theta[None])
        st.known = before.prefix(depth + 1)
        st.known.extend_top(row, bias)
        self.stale = True  # the model (and its check) are of the layers before the rebuild
        st.rebuilds += 1
        st.notes.append(f"layer {depth + 1}: a neuron missed there was found through the worst "
                        f"check point; the layers above it were extracted again")
        self.pending = [Candidate(c.x, c.normal) for c in self.archive]
        del st.layer_queries[depth + 1:], st.layer_seconds[depth + 1:]

    def keep(self) -> None:
        """Keep the current network for the runner (a stop scores it) and, apart, the best-matching
        one so far (a rebuild that made things worse is not what a failed run reports)."""
        art = self.artifact()
        self.ctx.keep(art)
        if self.state.check_error < getattr(self, "best_error", float("inf")):
            self.best_error, self.best_art = self.state.check_error, art

    def stopped(self, stopped_by: str | None, reason: str) -> Artifact:
        """The end's artifact: the best-matching network so far if the current one is worse."""
        best = getattr(self, "best_art", None)
        if best is None or self.state.check_error <= self.best_error:
            return self.artifact(stopped_by, reason)
        best.stopped_by, best.reason = stopped_by, reason
        best.notes.append(f"the network kept matched fresh queries best ({self.best_error:.3g}); the "
                          f"current one missed them by {self.state.check_error:.3g}")
        return best

    # ----------------------------------------------------------------- the run
    def artifact(self, stopped_by: str | None = None, reason: str = "") -> Artifact:
        st = self.state
        widths = st.known.widths()
        metrics = {"layers_found": float(st.known.depth), "units_found": float(sum(widths)),
                   "lines": float(st.lines), "walks": float(st.walks),
                   "deeper_candidates": float(st.deeper), "self_check_error": st.check_error,
                   "log2_queries": math.log2(max(self.oracle.queries, 1)),
                   "self_check_tolerance": self.check_tol}
        for i, (q, s) in enumerate(zip(st.layer_queries, st.layer_seconds, strict=True), 1):
            metrics[f"layer{i}_queries"] = float(q)
            metrics[f"layer{i}_seconds"] = float(s)
        data = {"model": st.model, "space": rl.output_space(self.oracle),
                "layers": st.model.hidden_layers() if st.model is not None else None,
                "signs_resolved": st.signs_clean}
        notes = [self.noise.describe(), f"hidden widths found: {widths}",
                 f"gradient jumps from {'explain' if self.explain else 'finite differences'}",
                 *st.notes]
        return Artifact("model", data=data, metrics=metrics, notes=notes, stopped_by=stopped_by,
                        reason=reason, progress=f"{st.known.depth} layer(s), widths {widths}")

    def run(self) -> Artifact:
        st = self.state
        try:
            while st.known.depth < self.p.max_depth:
                q0, t0 = self.oracle.queries, time.perf_counter()
                if not self.extract_layer():
                    if self.stale:  # the top layer was rebuilt with a missed neuron: refit the output
                        self.stale = False
                        st.model, st.check_error = self.fit_output()
                        self.keep()
                        if st.check_error <= self.check_tol:
                            return self.artifact()
                    # nothing on top of these layers: maybe one of them misses a neuron
                    hit = self.missing_below() if st.rebuilds < self.p.max_rebuilds else None
                    if hit is None:
                        if st.rebuilds >= self.p.max_rebuilds:
                            st.capped.append(f"max_rebuilds = {self.p.max_rebuilds}")
                        break
                    self.rebuild(*hit, st.known.copy())
                    continue
                before = st.known.copy()
                hit = self.complete_layer(before)
                st.layer_queries.append(self.oracle.queries - q0)
                st.layer_seconds.append(time.perf_counter() - t0)
                if hit is not None and st.rebuilds < self.p.max_rebuilds:
                    self.rebuild(*hit, before)
                    continue
                if hit is not None:
                    st.capped.append(f"max_rebuilds = {self.p.max_rebuilds} with a missed neuron of "
                                     f"layer {hit[0] + 1} found")
                if st.check_error <= self.check_tol:
                    return self.artifact()
            else:
                st.capped.append(f"max_depth = {self.p.max_depth} hidden layers")
            if st.known.depth == 0:
                st.model, st.check_error = self.fit_output()
        except rl.OutOfBudget as exc:
            return self.stopped("budget", f"query budget exhausted with {st.known.depth} layer(s) "
                                          f"extracted ({exc})")
        except TimeLimit as exc:
            exc.artifact = self.stopped("time", str(exc))
            raise
        art = self.stopped(None, "")  # fewer layers or neurons, but closer to the API than the last try
        if art is getattr(self, "best_art", None):
            st.check_error = self.best_error
        if not st.check_error <= self.check_tol and st.capped:  # NaN fails too
            # its own limits, not the answers: more lines, depth or rebuilds might have finished it
            raise AttackStopped(
                f"stopped at its own limits ({'; '.join(dict.fromkeys(st.capped))}) with the extracted "
                f"network missing fresh queries (max relative error {st.check_error:.3g} > "
                f"{self.check_tol:.3g}) after {st.known.depth} layer(s)", stopped_by="cap", artifact=art)
        if not st.check_error <= self.check_tol:
            raise PrecisionLimit(
                f"the extracted network disagrees with the API on fresh queries (max relative error "
                f"{st.check_error:.3g} > {self.check_tol:.3g}) after {st.known.depth} layer(s): "
                "neurons missed, answers too coarse, or not a ReLU MLP", artifact=art)
        return art
