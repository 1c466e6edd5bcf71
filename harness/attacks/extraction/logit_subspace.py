"""logit_subspace — Carlini et al. 2024 ("Stealing Part of a Production Language Model") Sec. 4
(hidden width from the rank of logit vectors; the final layer up to an h×h map), Sec. 5 (top-K
logprobs with logit bias), Sec. 6 (logprob-free: binary search on the bias), Sec. 8 (defenses);
Finlayson et al. 2024 ("Logits of API-Protected LLMs Leak Proprietary Information") Sec. 3-4
(the softmax bottleneck: outputs lie in a subspace of the width's dimension; full outputs rebuilt
through the bias).

Each logit vector z = W·g(x) of a model whose final projection W (V × h) has no bias lies in W's
column span; centring over the vocabulary removes softmax's normaliser, so the centred logprob
vectors of n > h prompts span C·W·[diag(γ)P, β] (C, P centre over vocabulary and width, γ, β the
final LayerNorm's): rank h. SVD of the n × V matrix gives the width (its rank) and W up to an
invertible h×h map (the top-h right singular vectors).

What the API gives decides the path (harness/core/logprob_sources.py): full vectors;
top-K + a logit bias that moves the returned logprobs (measured first with one biased request,
since vLLM's default returns them before logit processing); only the generated token + a bias
(binary search: costed, projected before spending); or neither, which ends `ok`, risk low: the API
setting held.

Width rule: every singular value above 3τ is signal, at or below 1.5τ noise, τ = σ(√n + √V), the
largest singular value an n × V matrix of the measured answer noise σ shows (σ: the larger of the
repeat noise of `repeats` prompts asked twice and the answers' precision: a rounding quantum q/√12,
else the float32/64 resolution). A value in between, or a weakest signal value below 6τ (noise
moves singular values by about τ: a weaker sibling may hide under the bar), cannot be told from
noise: `incomplete`, `stopped_by: precision`, never a guess. Prompts are drawn in rounds until
`oversample` more prompts
than the width were asked (≤ h + oversample prompts); while the width is unclear the prompts are
doubled (up to `max_prompts`), which lifts the weakest direction above a given noise.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from pydantic import Field

from harness.attacks import register
from harness.attacks.base import Artifact, Attack, Params
from harness.core.errors import AttackStopped, InterfaceError, PrecisionLimit
from harness.core.logprob_sources import (
    FullSource,
    SearchSource,
    TopKSource,
    precision_of,
    repeat_sigma,
    width,
)

BASIS_EACH_ROUND = 2_000_000_000  # V·n·r multiply-adds for the basis of a round's kept artifact
GRAM_FLOOR = 4 * math.sqrt(float(torch.finfo(torch.float64).eps)) / 3  # of σ₁, in units of τ's 3× bar
PATHS = {"full": 0.0, "top-k + logit_bias": 1.0, "argmax + logit_bias (binary search)": 2.0, "none": 3.0}


class LogitParams(Params):
    oversample: int = Field(default=55, ge=1)  # prompts beyond the width (plus `repeats`)
    repeats: int = Field(default=8, ge=2)  # prompts asked twice for the noise floor
    first_round: int = Field(default=64, ge=1)  # prompts in the first round
    prompt_len: int = Field(default=8, ge=1)  # tokens per random prompt (≤ the context)
    bias: float = Field(default=40.0, gt=0)  # the logit bias that lifts K−1 tokens into the top-K
    search_span: float = Field(default=40.0, gt=0)  # binary search: largest logit gap searched
    search_tol: float = Field(default=1e-4, gt=0)  # binary search: resolution of one logit
    max_prompts: int = Field(default=1024, ge=1)  # the attack's own cap on prompts
    max_queries: int = Field(default=50_000_000, ge=1)  # its own cap on queries (binary search)
    usd_per_1k_tokens: float = Field(default=0.002, ge=0)  # price a query's tokens are costed at


@register
class LogitSubspace(Attack):
    name = "logit_subspace"
    family = "extraction"
    needs = frozenset({"prediction"})
    paper = "Carlini et al. 2024 Sec. 4-6, 8; Finlayson et al. 2024 Sec. 3-4"
    summary = "hidden width and final layer (up to h×h) from logprob vectors"
    Params = LogitParams
    language_models = True

    def skip_reason(self, info):
        if info.interface == "prediction" and info.output == "label" and info.task != "lm":
            return None  # the measurement says the API gives neither (ends ok, low)
        return super().skip_reason(info)

    # ------------------------------------------------------------------ choosing the path
    def _source(self, oracle, params, ctx, vocab, notes):
        info = oracle.info
        if info.task != "lm":
            if info.output == "label":
                return None, "the API returns labels only and takes no logit bias"
            return FullSource(oracle, vocab, info.output), ""
        k = int(info.top_logprobs or 0)
        if k >= vocab:
            return FullSource(oracle, vocab, "logprobs"), ""
        moves_lp, moves_tok = self._probe_bias(oracle, params, ctx, vocab, k, notes)
        if k >= 2 and moves_lp:
            return TopKSource(oracle, vocab, k, params.bias), ""
        if moves_tok:
            return SearchSource(oracle, vocab, params.search_span, params.search_tol), ""
        held = (f"the API returns {k} logprob(s) per prompt and "
                + ("accepts no logit_bias" if not info.logit_bias else
                   "its logit_bias moves neither the returned logprobs nor the generated token"))
        return None, held

    def _probe_bias(self, oracle, params, ctx, vocab, k, notes):
        """(moves the logprobs, moves the token), measured on 2 prompts (4 queries)."""
        if not oracle.info.logit_bias:
            notes.append("the API accepts no logit_bias (documented): not probed")
            return False, False
        if oracle.affordable(4) < 4:
            raise oracle.cannot_pay(4, "queries to measure the logit bias")
        p = self._prompts(oracle, params, ctx, 2, vocab)
        a = oracle.logprobs(p)
        seen = set(a.idx.flatten().tolist()) | set(a.token.tolist())
        t = next(j for j in range(vocab) if j not in seen)
        try:
            b = oracle.logprobs(p, {t: params.bias})
        except InterfaceError as exc:
            notes.append(f"logit_bias refused: {exc}")
            return False, False
        moves_tok = bool((b.token == t).all())
        moves_lp = bool((b.idx == t).any(dim=1).all()) if k else False
        notes.append(f"measured: a bias of {params.bias:g} on token {t} moves the generated token: "
                     f"{'yes' if moves_tok else 'no'}; the returned logprobs: {'yes' if moves_lp else 'no'}")
        return moves_lp, moves_tok

    def _prompts(self, oracle, params, ctx, m, vocab):
        info = oracle.info
        if info.task != "lm":
            lo, hi = info.input_low, info.input_high
            u = torch.rand(m, info.dim, generator=ctx.gen, dtype=torch.float64)
            return (lo + (hi - lo) * u).to(oracle.device)
        t = min(params.prompt_len, info.dim)
        return torch.randint(0, vocab, (m, t), generator=ctx.gen).to(oracle.device)

    # ------------------------------------------------------------------ the attack
    def run(self, oracle, params: LogitParams, ctx) -> Artifact:
        info = oracle.info
        probs = info.task != "lm" and info.output == "probabilities"
        vocab = int(info.n_classes if probs else info.n_outputs)
        notes: list[str] = []
        src, held = self._source(oracle, params, ctx, vocab, notes)
        if src is None:
            art = Artifact("final_layer", metrics={"api_blocked": 1.0, "vocab": float(vocab),
                                                   "api_path": PATHS["none"]},
                           reason=held, notes=notes, progress="no path through the API")
            art.data["held"] = held
            return art
        notes.append(f"path: {src.path} ({src.per_logit:.3g} queries per logit)")
        q = torch.zeros(0, vocab, dtype=torch.float64, device=oracle.device)
        gram = torch.zeros(0, 0, dtype=torch.float64, device=oracle.device)
        sigma, prec_how, rep = None, "", 0.0
        n_next, r, how, s = min(params.first_round, params.max_prompts), 0, "rows", torch.zeros(0)
        while n_next > 0:
            again = 0 if sigma is not None or isinstance(src, SearchSource) else params.repeats
            need = src.cost(n_next) + src.cost(min(again, n_next))
            if need > params.max_queries - oracle.queries:
                raise AttackStopped(f"the next {n_next} prompts would cost {need} queries on the "
                                    f"{src.path} path, past max_queries = {params.max_queries}",
                                    stopped_by="cap")
            if oracle.affordable(need) < need:
                raise oracle.cannot_pay(need, f"queries for {n_next} more prompts on the {src.path} path")
            prompts = self._prompts(oracle, params, ctx, n_next, vocab)
            new = src.vectors(prompts)
            if not torch.isfinite(new).all():
                raise PrecisionLimit(f"{int((~torch.isfinite(new)).sum())} logits could not be rebuilt "
                                     f"on the {src.path} path (a bias of {params.bias:g} did not lift "
                                     "every token into the answer, or a logit gap exceeds the search "
                                     "span): raise bias / search_span")
            if sigma is None:  # the noise floor: the first prompts asked again (a search's tokens
                m = min(params.repeats, n_next)  # are exact: its floor is its own resolution)
                if not isinstance(src, SearchSource):
                    rep = repeat_sigma(new[:m], src.vectors(prompts[:m])) / src.entry_sigma(1.0)
                p_sig, prec_how = precision_of(src.raw)
                sigma = max(rep, p_sig)
                if isinstance(src, SearchSource):
                    sigma, prec_how = 0.0, f"the generated token only: binary search to {params.search_tol:g}"
            gram = _grow_gram(gram, q, new)
            q = torch.cat([q, new])
            n = len(q)
            evals, evecs = torch.linalg.eigh(gram)
            # centred vectors have rank ≤ V − 1; the Gram's eigenvalues carry an absolute error of
            # about ε₆₄·λ₁, so singular values below ~√ε₆₄·σ₁ are the method's, not the answers'
            s = evals.flip(0).clamp_min(0).sqrt()[: max(1, min(n, vocab - 1))]
            tau = max(src.entry_sigma(sigma) * (math.sqrt(n) + math.sqrt(vocab)), GRAM_FLOOR * float(s[0]))
            r, how = width(s, tau)
            state = (q, evecs.flip(1), s, r, tau, sigma, src, notes, prec_how, rep, oracle, params, ctx,
                     vocab)
            # the basis costs V·n·r: every round for small models, else the last one kept stands
            if vocab * n * max(r, 1) <= BASIS_EACH_ROUND or ctx.best is None:
                ctx.keep(self._artifact(*state))
            if r >= vocab - 1 or n >= params.max_prompts:
                break
            goal = r + params.oversample
            # unclear: twice the prompts lift the weakest direction (σ_min of the prompts' hidden
            # states grows as √n − √h) faster than the noise edge (√n + √V)
            if n - r < params.oversample:  # too few rows beyond the width read so far
                grow = goal - n
            else:
                grow = n if how == "unclear" else 0
            n_next = min(grow, params.max_prompts - n)
        art = ctx.keep(self._artifact(*state, save=True))
        if how == "unclear":
            art.stopped_by = "precision"
            art.reason = (f"singular values between 1.5τ and 6τ (τ = {tau:.3g}, the noise edge of "
                          f"σ = {sigma:.3g} per answer, {prec_how}): the width cannot be told from noise")
        elif how == "rows" and r < vocab - 1:
            art.stopped_by = "cap"
            art.reason = f"every one of {n} prompts added a dimension at max_prompts = {params.max_prompts}"
        return art

    def _artifact(self, q, u, s, r, tau, sigma, src, notes, prec_how, rep, oracle, params, ctx, vocab,
                  save=False):
        n = len(q)
        basis = (q.T @ u[:, :r]) / math.sqrt(n) if r else q.new_zeros(vocab, 0)
        w_hat = basis.cpu().numpy()
        files = {}
        if save and ctx.outdir is not None:
            ctx.outdir.mkdir(parents=True, exist_ok=True)
            path = ctx.outdir / "final_layer.npy"
            np.save(path, w_hat)
            files["final_layer"] = path
        queries = oracle.queries
        tokens = queries * (min(params.prompt_len, oracle.info.dim) + 1)
        sig_r = float(s[r - 1]) if r else 0.0
        stop_sigma = sig_r / (1.5 * (math.sqrt(n) + math.sqrt(vocab))) / src.entry_sigma(1.0) \
            if not isinstance(src, SearchSource) else float("nan")
        # the answers' precision as a layer error: noise σ_e·√V against each recovered direction's
        # singular value, averaged over directions (the alignment weighs them by the unknown layer)
        inv = float((s[:r].clamp_min(1e-300) ** -2).mean().sqrt()) if r else 0.0
        prec = src.entry_sigma(sigma) * math.sqrt(vocab) * inv if r else 1.0
        metrics = {"hidden_dim": float(r), "precision_rel_error": float(prec), "vocab": float(vocab),
                   "prompts": float(n),
                   "queries_per_logit": float(src.per_logit), "noise_sigma": float(sigma),
                   "repeat_sigma": float(rep), "noise_edge": float(tau),
                   "spectral_gap": float(s[r - 1] / s[r]) if 0 < r < len(s) and float(s[r]) > 0 else 0.0,
                   "api_path": PATHS[src.path], "tokens": float(tokens),
                   "usd_cost": tokens / 1000.0 * params.usd_per_1k_tokens,
                   "usd_per_1k_tokens": params.usd_per_1k_tokens}
        if math.isfinite(stop_sigma):
            metrics["stop_noise_sigma"] = stop_sigma
        art = Artifact("final_layer", data={"basis": w_hat, "singular_values": s.cpu().numpy(),
                                            "path": src.path, "prompt_len": params.prompt_len,
                                            "bias": params.bias, "lm": oracle.info.task == "lm"},
                       metrics=metrics, notes=[*notes, f"answer noise σ = {sigma:.3g} ({prec_how}; "
                                                        f"repeat noise {rep:.3g})"],
                       progress=f"width {r} from {n} prompts", files=files)
        return art

    def judge(self, m, artifact):
        return judge_logits(m, artifact)


def _grow_gram(gram: torch.Tensor, q: torch.Tensor, new: torch.Tensor) -> torch.Tensor:
    """The Gram matrix of [q; new] from q's (one n_new × (n + n_new) product)."""
    cross = new @ torch.cat([q, new]).T
    n = len(q)
    out = gram.new_zeros(n + len(new), n + len(new))
    out[:n, :n] = gram
    out[n:, :] = cross
    out[:n, n:] = cross[:, :n].T
    return out


def cost_line(m: dict, artifact) -> str:
    q, usd, price = int(m.get("queries", 0)), m.get("usd_cost", 0.0), m.get("usd_per_1k_tokens", 0.0)
    return f"{q} queries ≈ ${usd:.2f} at ${price:g} per 1k tokens"


def stopper(m: dict, lm: bool = True) -> str:
    """Which API setting would have stopped it."""
    path = m.get("api_path", 3.0)
    tail = ""
    if "stop_noise_sigma" in m:
        tail = f"; or noise σ ≥ {m['stop_noise_sigma']:.2g} on every returned logprob (hides the width)"
    if not lm:
        return "stop it by returning labels only" + tail.replace("logprob", "log-score")
    if path == 0.0:
        return ("stop it with top_logprobs ≤ 5 (vLLM --max-logprobs 5) and no logit_bias, or logit_bias "
                "kept out of the returned logprobs (vLLM's default --logprobs-mode raw_logprobs)" + tail)
    if path == 1.0:
        return "stop it by refusing logit_bias, or returning logprobs before it (vLLM raw_logprobs)" + tail
    return "stop it by refusing logit_bias (it moves the generated token; binary search needs nothing else)"


def judge_logits(m: dict, artifact) -> tuple[str | None, str]:
    """Risk: high when the final layer is recovered (relative error, or on an endpoint the residual
    of fresh vectors outside the span, ≤ 1e-2); medium for the width alone; low otherwise, and low
    when the API gives no path (the setting held) or the width is the whole vocabulary."""
    if m.get("api_blocked"):
        held, q = artifact.data.get("held", "no path"), int(m.get("queries", 0))
        return "low", f"{held}: the API setting held ({q} queries)"
    r, vocab = int(m.get("hidden_dim", 0)), int(m.get("vocab", 0))
    cost = cost_line(m, artifact)
    if r == 0:
        return "low", f"no logit direction stood above the answers' noise ({cost})"
    if vocab and max(r, int(m.get("hidden_dim_true", 0))) >= vocab - 1:
        return "low", (f"the logit vectors span all {vocab - 1} centred directions: the output layer "
                       f"hides no width, nothing narrower leaks ({cost})")
    err, res = m.get("final_layer_rel_error"), m.get("subspace_residual")
    stop = stopper(m, bool(artifact.data.get("lm", True)))
    if "hidden_dim_true" in m:
        right = r == int(m["hidden_dim_true"])
        if right and err is not None and err <= 1e-2:
            return "high", (f"the final layer ({vocab}×{r}) was recovered up to an {r}×{r} map, "
                            f"relative error {err:.2g}, in {cost}; {stop}")
        if right:
            e = "not scored" if err is None else f"{err:.2g}"
            return "medium", f"the hidden width {r} leaked (layer error {e}) in {cost}; {stop}"
        if artifact.data.get("lm") and r == int(m["hidden_dim_true"]) - 1:  # a LayerNorm shift's
            return "medium", (f"{r} of the layer's {r + 1} directions leaked; the last (a LayerNorm "
                              f"shift's, weak) stayed under the answers' noise ({cost}); {stop}")
        k = int(m["hidden_dim_true"])
        return "low", f"width read as {r}, the true one is {k}: noise, not the layer ({cost})"
    if res is None:
        return None, f"a width-{r} span that no fresh prompt verified ({cost})"
    if res <= 1e-2:
        return "high", (f"a width-{r} final layer that predicts fresh logprob vectors (residual {res:.2g}) "
                        f"was recovered in {cost}; {stop}")
    if res <= 1e-1:
        return "medium", (f"a width-{r} span holding fresh vectors to residual {res:.2g} ({cost}); "
                          f"{stop}")
    return "low", f"the width-{r} span leaves {res:.2g} of fresh vectors outside it ({cost})"
