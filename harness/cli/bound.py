"""`leakmeter bound`: ReRo bounds (paper 004, Sec. VII) for a stated prior and DP guarantee, without
a scenario. Prints κ and every bound the guarantee supports as a table; `--json` for scripts."""

from __future__ import annotations

import json
import math
import sys

import click

from harness.cli.common import THREADS, guarded
from harness.core.threads import pin_threads


def _need(value, flag: str, prior: str) -> None:
    from harness.core.errors import BadInput

    if value is None:
        raise BadInput(f"{flag}: required with --prior {prior}")


def _kappa(prior: str, dim, radius, sigma, eta, size, kappa) -> tuple[float, str, dict]:
    """κ and a description of the prior; BadInput when a needed option is missing."""
    from harness.rero import priors

    if kappa is not None:
        return kappa, "given κ", {}
    if prior == "finite":
        _need(size, "--size", prior)
        return priors.kappa_finite(size), f"finite(|Z|={size}, 0/1 loss)", {}
    _need(dim, "--dim", prior)
    _need(eta, "--eta", prior)
    if prior == "uniform-ball":
        _need(radius, "--radius", prior)
        return priors.kappa_uniform_ball(eta, radius, dim), f"uniform_ball(d={dim}, r={radius:g})", {}
    _need(sigma, "--sigma", prior)
    closed = priors.kappa_gaussian_closed_form(eta, sigma, dim)
    return (priors.kappa_gaussian(eta, sigma, dim), f"gaussian(d={dim}, σ={sigma:g})",
            {"kappa_closed_form": closed})


@click.command()
@click.option("--epsilon", type=click.FloatRange(min=0), help="ε of an (ε, δ)-DP guarantee.")
@click.option("--delta", type=click.FloatRange(0, 1), default=None, help="δ (default 0: pure ε-DP).")
@click.option("--noise-multiplier", type=click.FloatRange(min=0, min_open=True),
              help="DP-SGD noise multiplier σ (with --sample-rate and --steps).")
@click.option("--sample-rate", type=click.FloatRange(0, 1, min_open=True), help="DP-SGD sampling rate q.")
@click.option("--steps", type=click.IntRange(min=1), help="DP-SGD steps.")
@click.option("--rho", type=click.FloatRange(min=0), help="ρ of a ρ-zCDP guarantee.")
@click.option("--mu", type=click.FloatRange(min=0), help="μ of a μ-GDP guarantee.")
@click.option("--prior", type=click.Choice(["uniform-ball", "gaussian", "finite"]), default="uniform-ball",
              show_default=True, help="The adversary's prior on the target record.")
@click.option("--dim", type=click.IntRange(min=1), help="Dimension d of the records.")
@click.option("--radius", type=click.FloatRange(min=0, min_open=True), help="uniform-ball: radius r.")
@click.option("--sigma", type=click.FloatRange(min=0, min_open=True), help="gaussian: prior std σ.")
@click.option("--eta", type=click.FloatRange(min=0, min_open=True), help="ℓ2 success threshold η.")
@click.option("--size", type=click.IntRange(min=1), help="finite: number of candidate records |Z|.")
@click.option("--kappa", type=click.FloatRange(0, 1), help="Give κ directly (overrides the prior).")
@click.option("--rero-gamma", type=click.FloatRange(0, 1),
              help="Thm. 5: the δ implied by (η, γ)-ReRo against two-point priors (needs --epsilon).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@THREADS
@guarded
def bound(epsilon, delta, noise_multiplier, sample_rate, steps, rho, mu, prior, dim, radius, sigma, eta,
          size, kappa, rero_gamma, as_json, threads) -> None:
    """Bound the success of ANY reconstruction attack on a DP model (paper 004, Sec. VII)."""
    pin_threads(threads)
    from harness.core.errors import BadInput
    from harness.rero import bounds as B
    from harness.rero.accounting import Privacy
    from harness.rero.product import NO_GUARANTEE, all_bounds

    mech = [noise_multiplier, sample_rate, steps]
    if any(v is not None for v in mech) and not all(v is not None for v in mech):
        raise BadInput("--noise-multiplier, --sample-rate and --steps go together (a DP-SGD run)")
    if delta is not None and epsilon is None:
        raise BadInput("--delta: needs --epsilon")
    if rero_gamma is not None and epsilon is None:
        raise BadInput("--rero-gamma: needs --epsilon (Thm. 5 fixes the prior's p = 1/(e^ε + 1))")
    k, desc, extra = _kappa(prior, dim, radius, sigma, eta, size, kappa)
    has_dp = epsilon is not None or noise_multiplier is not None or rho is not None or mu is not None
    p = Privacy(epsilon=epsilon, delta=delta or 0.0, noise_multiplier=noise_multiplier,
                sample_rate=sample_rate, steps=steps, rho=rho, mu=mu) if has_dp else None
    bs = all_bounds(k, p)
    best = B.tightest(bs)
    out = {"prior": desc, "eta": eta, "kappa": k, **extra,
           "bounds": [{**b.as_dict(), "tightest": b is best} for b in bs],
           "gamma": best.gamma if best else 1.0, "tightest": best.kind if best else None}
    if not bs:
        out["note"] = NO_GUARANTEE
    if rero_gamma is not None:
        out["thm5_delta"] = B.delta_from_rero(epsilon, rero_gamma)
    if as_json:
        click.echo(json.dumps(out, indent=2, default=_jsonable))
        sys.exit(0)
    _table(out)


def _jsonable(v):
    return None if isinstance(v, float) and not math.isfinite(v) else str(v)


def _table(out: dict) -> None:
    eta = "" if out["eta"] is None else f", η = {out['eta']:g}"
    click.echo(f"prior: {out['prior']}{eta}")
    click.echo(f"κ (best oblivious attack) = {out['kappa']:.6g}")
    if "kappa_closed_form" in out:
        click.echo(f"κ, the paper's closed-form bound (Prop. 7) = {out['kappa_closed_form']:.6g}")
    if not out["bounds"]:
        click.echo(out["note"])
    else:
        click.echo(f"{'bound':<14} {'γ':>12}  {'':<8} detail")
        for b in out["bounds"]:
            flag = "vacuous" if b["vacuous"] else ("tightest" if b["tightest"] else "")
            if not b["rigorous"]:
                flag = (flag + " approx").strip()
            det = ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}"
                            for k, v in b["detail"].items())
            click.echo(f"{b['kind']:<14} {b['gamma']:>12.6g}  {flag:<8} {det}")
    if "thm5_delta" in out:
        click.echo(f"Thm. 5: ReRo γ against two-point priors implies δ = {out['thm5_delta']:.6g}")
