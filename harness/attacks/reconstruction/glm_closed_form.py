"""glm_closed_form — paper 004 (Balle, Cherubin, Hayes, S&P 2022), Sec. III, Thm. 1 and Thm. 8.

Informed adversary (Def. 1): it knows D₋, the recipe, and a released GLM θ = (W, b) trained to
the ERM optimum on D₋ ∪ {z}. The stationarity condition of the training objective
    (1/n) Σ_i r_i [x_i; 1]ᵀ + wd·[W, 0] = 0,   r_i = g⁻¹(W x_i + b) − e(y_i)
(mean loss, ½·wd·‖W‖² on the weights only: victims/models/training.py) gives, from the intercept
column, the target's residual r* = −Σ_{D₋} r_j, and from the weight columns the rank-one system
r* xᵀ = −(Σ_{D₋} r_j x_jᵀ + n·wd·W): x = Mᵀr*/‖r*‖² (Thm. 1; for softmax r* is a K-vector, an
extension of the paper's scalar case). The label follows from r*: y = g⁻¹(Wx+b) − r* (binary,
regression) or argmax(softmax(Wx+b) − r*) (multiclass). The paper's λ‖θ‖² penalises the
intercept too; here it does not, matching the trainer.

Without an intercept (regression only) Thm. 8 applies, given the target's label y as side
knowledge: x = α·u with u = Σ_{D₋} r_j x_j + n·wd·w and α² uᵀw − α y + 1 = 0; both roots are
returned as candidates (the scorer reports the better one, as the theorem promises only the pair).
Exact only at the ERM optimum: the scorer reports the released models' gradient norms.
"""

from __future__ import annotations

import torch

from harness.attacks import register
from harness.attacks.base import Artifact, Attack, Params
from harness.core.errors import AttackFailed, AttackSkipped


class GLMParams(Params):
    targets: int = 10  # released models (one target each)


def glm_weights(state: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(W, b) of a one-layer model's state_dict; AttackSkipped when it is not a GLM (the closed
    form does not apply: the attack declines rather than failing)."""
    mats = [v for v in state.values() if v.dim() == 2]
    vecs = [v for v in state.values() if v.dim() == 1]
    if len(mats) != 1 or len(vecs) > 1:
        raise AttackSkipped(f"the released model is not a GLM (it has {len(mats)} weight "
                           "matrices); glm_closed_form needs arch: logistic or linear")
    return mats[0].double(), (vecs[0].double() if vecs else None)


def residuals(z: torch.Tensor, y: torch.Tensor, task: str, k: int) -> torch.Tensor:
    """r = g⁻¹(z) − e(y): (N, K)."""
    if task == "multiclass":
        return torch.softmax(z, 1) - torch.nn.functional.one_hot(y.long(), k).double()
    if task == "binary":
        return torch.sigmoid(z) - y.double().reshape(-1, 1)
    return z - y.double().reshape(-1, 1)


def closed_form(w: torch.Tensor, b: torch.Tensor | None, x_minus: torch.Tensor,
                y_minus: torch.Tensor, task: str, wd: float, y_aux: torch.Tensor | None = None
                ) -> tuple[torch.Tensor, torch.Tensor]:
    """(x̂, ŷ) for one released GLM: x̂ (d,) (Thm. 1) or (2, d) (Thm. 8), ŷ () or (2,)."""
    xm = x_minus.double()
    n = len(xm) + 1
    z = xm @ w.T + (b if b is not None else 0.0)
    r = residuals(z, y_minus, task, w.shape[0])  # (n-1, K)
    m = -(r.T @ xm + n * wd * w)  # (K, d) = r* xᵀ
    if b is not None:
        rs = -r.sum(0)  # (K,)
        if float(rs.norm()) == 0.0:
            raise AttackFailed("the target's residual is zero: it carries no signal (Thm. 1)")
        x = m.T @ rs / (rs @ rs)
        zt = w @ x + b
        if task == "multiclass":
            y = torch.argmax(torch.softmax(zt, 0) - rs)
        else:
            y = ((torch.sigmoid(zt) if task == "binary" else zt) - rs)[0]
        return x, y
    if task != "regression" or y_aux is None:
        raise AttackFailed("without an intercept only linear regression with a known label is "
                           "covered (Thm. 8)")
    u = -m[0]  # Σ r_j x_j + n·wd·w
    a, yy = float(u @ w[0]), float(y_aux)
    if a == 0.0:
        raise AttackFailed("Thm. 8 is degenerate: uᵀθ = 0")
    disc = max(yy * yy - 4 * a, 0.0) ** 0.5
    alphas = torch.tensor([(yy + disc) / (2 * a), (yy - disc) / (2 * a)], dtype=torch.float64)
    return alphas[:, None] * u[None, :], torch.tensor([yy, yy], dtype=torch.float64)


@register
class GLMClosedForm(Attack):
    name = "glm_closed_form"
    family = "reconstruction"
    needs = frozenset({"whitebox"})
    paper = "004 Sec. III-B, Thm. 1, Thm. 8"
    summary = "informed adversary: exact target from a released GLM at its ERM optimum"
    Params = GLMParams

    def run(self, oracle, params: GLMParams, ctx) -> Artifact:
        kn = ctx.knowledge
        if kn is None or not kn.available:
            raise AttackFailed("an informed adversary needs a locally trained victim")
        glm_weights(oracle.weights())  # decline non-GLMs before training anything
        t = max(1, min(params.targets, kn.max_targets()))
        _, b0 = glm_weights(oracle.weights())
        rel = kn.release(t, side_labels=b0 is None)  # Thm. 8 (no intercept) is given y
        wd = float(rel.recipe.training.weight_decay)
        task = rel.recipe.task
        xs, ys = [], []
        for i, view in enumerate(rel.views):
            w, b = glm_weights(view.weights())
            y_aux = rel.aux_y[i] if rel.aux_y is not None and b is None else None
            x, y = closed_form(w, b, rel.x_minus, rel.y_minus, task, wd, y_aux)
            xs.append(x)
            ys.append(y)
        x_hat = torch.stack(xs).cpu()
        art = Artifact("reconstruction", data={
            "x_hat": x_hat, "y_hat": torch.stack(ys).cpu(), "y_kind": task,
            "outdir": ctx.outdir, "eta_spec": ctx.threat.rero_eta if ctx.threat else None},
            metrics={"released_models": float(t), "n_minus": float(len(rel.x_minus))},
            notes=rel.notes + ([] if rel.recipe.training.optimizer == "lbfgs" else [
                "the recipe is not L-BFGS: θ may be far from the ERM optimum"]))
        if x_hat.dim() == 3:
            art.notes.append("Thm. 8: two candidates per target; the scorer uses the closer")
        if rel.recipe.dp is not None:
            art.notes.append("DP-SGD release: θ is not the ERM optimum, expect no exact recovery")
        return art

    def judge(self, m, artifact):
        if "success_rate" not in m:
            return None, "closed-form reconstructions made; no truth to score them (not verified)"
        k, t = int(m["reconstructed"]), int(m["targets"])
        err = m.get("rel_error_max", float("nan"))
        if k > 0:
            return "high", (f"{k} of {t} targets rebuilt from the released GLM "
                            f"(max relative error {err:.2g}) by an informed adversary")
        return "low", f"no target beat the nearest-neighbour oracle (max relative error {err:.2g})"
