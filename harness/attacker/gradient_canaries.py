"""White-box gradient canaries (Nasr, Hayes, Steinke, Balle, Tramèr, Jagielski, Carlini, Terzis,
USENIX Security 2023: Dirac canaries) in the recipe's own Opacus DP-SGD steps.

Canary j is the gradient `magnitude`·C·e_{c_j}: zero except one parameter coordinate c_j (the
coordinates are drawn from the attacker's seed, distinct, so the canaries are orthogonal). When
its secret coin is heads it is an example of the run: sampled as the recipe samples examples
(Poisson at the loader's rate, or once per epoch when the loader shuffles), handed to the
optimizer's own clipping as extra per-example rows, summed and noised with the batch. The
auditor observes the privatised sum at the canary coordinates, less the base batch's contribution
there (it knows the base data; the canaries' coins are independent of it), in units of C: canary
j's sequence is its own clipped contribution when sampled plus the step's Gaussian noise —
whatever the other canaries and examples do. So the m canaries are m independent trials of the
mechanism the accountant accounts for, and a configuration that breaks the accountant (less noise,
no clipping, shuffling) shows in them. Everything secret (coins, sampling) stays here.
"""

from __future__ import annotations

import numpy as np
import torch


class GradientCanaries:
    """The tap `PrivateTraining.wrap` attaches to the private optimizer."""

    def __init__(self, coords: np.ndarray, included: np.ndarray, seed: int, magnitude: float = 10.0):
        self.coords = np.asarray(coords, dtype=np.int64)
        self.included = np.asarray(included, dtype=bool)
        self.rng = np.random.default_rng(seed)
        self.magnitude = float(magnitude)
        self.rows: list[np.ndarray] = []
        self.step = 0

    def attach(self, opt, loader, epochs: int) -> None:
        from opacus.data_loader import DPDataLoader

        self.opt = opt
        self.poisson = isinstance(loader, DPDataLoader)
        self.per_epoch = max(1, len(loader))
        self.q = float(loader.sample_rate) if self.poisson else 1.0 / self.per_epoch
        self.sigma_told = float(opt.noise_multiplier)
        self.clip_norm = float(opt.max_grad_norm)
        sizes = np.array([p.numel() for p in opt.params])
        offsets = np.concatenate([[0], np.cumsum(sizes)])
        self.where = np.searchsorted(offsets, self.coords, side="right") - 1  # parameter of each
        self.local = self.coords - offsets[self.where]
        self.positions = self.rng.integers(self.per_epoch, size=(max(1, epochs) + 1, len(self.coords)))
        self._nat = np.zeros(len(self.coords))
        clip, noise = opt.clip_and_accumulate, opt.add_noise
        opt.clip_and_accumulate = lambda: self._clip(clip)
        opt.add_noise = lambda: self._noise(noise)

    def _gather(self, tensors) -> np.ndarray:
        out = np.zeros(len(self.coords))
        for i, t in enumerate(tensors):
            sel = np.nonzero(self.where == i)[0]
            if len(sel):
                flat = t.detach().reshape(-1)
                out[sel] = flat[torch.as_tensor(self.local[sel], device=flat.device)].double().cpu().numpy()
        return out

    def _sampled(self) -> np.ndarray:
        if self.poisson:
            hit = self.rng.random(len(self.coords)) < self.q
        else:
            epoch = min(self.step // self.per_epoch, len(self.positions) - 1)
            hit = self.positions[epoch] == self.step % self.per_epoch
        return np.nonzero(hit & self.included)[0]

    def _clip(self, clip) -> None:
        clip()  # the base batch, with the optimizer's own clipping
        params = self.opt.params
        self._nat = self._gather([p.summed_grad for p in params])
        js = self._sampled()
        if len(js) == 0:
            return
        for i, p in enumerate(params):  # one per-example row per sampled canary, in every parameter
            rows = torch.zeros(len(js), p.numel(), dtype=p.dtype, device=p.device)
            mine = np.nonzero(self.where[js] == i)[0]
            if len(mine):
                rows[torch.as_tensor(mine), torch.as_tensor(self.local[js[mine]])] = \
                    self.magnitude * self.clip_norm
            p.grad_sample = rows.reshape(len(js), *p.shape)
        clip()  # the canaries through the same clipping, added to the summed gradient

    def _noise(self, noise) -> None:
        noise()  # p.grad = summed + noise (before Opacus divides by the expected batch)
        y = self._gather([p.grad for p in self.opt.params]) - self._nat
        self.rows.append(y / self.clip_norm)
        self.step += 1

    def observations(self) -> np.ndarray:
        """(steps, m): each canary's coordinate of every privatised step, in units of C."""
        return np.stack(self.rows) if self.rows else np.zeros((0, len(self.coords)))


def canary_scores(obs: np.ndarray, q: float, sigma: float, per_epoch: int,
                  view: str = "updates") -> dict[str, np.ndarray]:
    """Score sets per canary from its observations (z_t = (y_t − ½)/σ², the log likelihood ratio
    of one step that holds the canary against one that does not):
    `updates` — `poisson`: Σ_t log(1 − q + q·e^{z_t}), the recipe as declared (sampled at rate
    q), and `epoch`: Σ_epochs log(mean_{t ∈ epoch} e^{z_t}), a recipe that shows every example
    once per epoch (shuffling) — both fixed before any coin is read, so auditing both is honest;
    `final` — `final`: the summed displacement Σ_t y_t (what the final model shows of the canary)."""
    if view == "final":
        return {"final": obs.sum(axis=0)}
    s2 = max(float(sigma), 1e-6) ** 2
    z = (obs - 0.5) / s2
    poisson = np.logaddexp(np.log1p(-min(q, 1 - 1e-12)), np.log(q) + z).sum(axis=0)
    k = max(1, per_epoch)
    t = (len(z) // k) * k
    if t == 0:
        return {"poisson": poisson}
    zz = z[:t].reshape(t // k, k, -1)
    epoch = (np.logaddexp.reduce(zz, axis=1) - np.log(k)).sum(axis=0)
    return {"poisson": poisson, "epoch": epoch}


def whitebox_runs(provider, m: int, runs: int, seed: int) -> tuple[list[dict], list[str]]:
    """Train the victim's recipe `runs` times on its training split with m gradient canaries each
    (the truth side); returns (per run what the auditor observes: obs, q, σ told; notes; the
    coins of all runs; a run's DPRecord) — the caller keeps the last two with the truth."""
    from harness.core.errors import AttackFailed
    from harness.core.progress import stage
    from victims.models.training import train

    if not provider.trained_here:
        raise AttackFailed("white-box canaries retrain the victim: only for victims leakmeter trains")
    recipe = provider.recipe
    if recipe.dp is None:
        raise AttackFailed("white-box gradient canaries audit DP-SGD; this recipe trains without it")
    d = provider.victim.truth.data
    info = provider.victim.info
    x = torch.as_tensor(d.x_train, dtype=info.dtype, device=info.device)
    y = torch.as_tensor(d.y_train, device=info.device)
    y = y.to(info.dtype) if info.task == "regression" else y
    n_params = sum(p.numel() for p in recipe.build().parameters())
    m = min(m, n_params)
    secret = np.random.default_rng([provider.secret, seed, 36])  # coins the auditor never sees
    out, coins, rec = [], [], None
    for r in range(runs):
        coords = np.random.default_rng([seed, r, 4093]).choice(n_params, m, replace=False)  # public
        inc = secret.random(m) < 0.5
        tap = GradientCanaries(coords, inc, int(secret.integers(1 << 30)))
        model = recipe.build()
        torch.manual_seed(int(secret.integers(1 << 30)))
        stage(f"white-box canary run {r + 1}/{runs} ({m} gradient canaries)")
        rec = train(model, x, y, info.task, recipe.training, recipe.dp, int(secret.integers(1 << 30)),
                    bar=None, dp_tap=tap)
        out.append({"obs": tap.observations(), "q": tap.q, "sigma": tap.sigma_told,
                    "per_epoch": tap.per_epoch, "poisson": tap.poisson})
        coins.append(inc)
    notes = [f"white-box audit: {runs} run(s) × {m} Dirac gradient canaries (coordinates of "
             f"{n_params} parameters), each in the run by a secret coin; {len(out[0]['obs'])} steps "
             f"observed per run (sample rate {out[0]['q']:.4g}, σ told {out[0]['sigma']:.4g})"]
    return out, notes, np.concatenate(coins), rec.dp
