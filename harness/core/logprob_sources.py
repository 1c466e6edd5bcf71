"""Where full centred logit vectors come from, for the attack `logit_subspace`
(harness/attacks/extraction/logit_subspace.py) and for its black-box scorer
(harness/scoring/logits_blackbox.py), which rebuilds fresh vectors the same way; what the
answers' precision is; and the width rule.

Three sources, by what the API gives (Carlini et al. 2024; Finlayson et al. 2024):

- `FullSource`: the whole logprob vector per prompt (vLLM `--max-logprobs -1`), or a
  classifier's probabilities / logits: one query per prompt.
- `TopKSource`: top-K logprobs and a `logit_bias` that moves them: K−1 tokens biased by B per
  request, rebuilt against the reference token (the prompt's unbiased argmax, which every answer
  returns: unbiased as the K-th token, or biased in its own group), z_j − z_ref =
  (lp_j − b_j) − (lp_ref − b_ref); ⌈V/(K−1)⌉ queries per prompt.
- `SearchSource`: only the generated token, moved by the bias: a binary search on the bias of each
  token j ≠ ref for the smallest b making j the argmax (b* = z_ref − z_j); one range check and
  ⌈log₂(range/tol)⌉ steps per logit, one query each.

Every source returns logit vectors centred over the vocabulary (which removes softmax's
normaliser and the reference's offset) and keeps raw answers for `precision_of`.
"""

from __future__ import annotations

import math
from typing import Any

import torch

EPS32 = float(torch.finfo(torch.float32).eps)
EPS64 = float(torch.finfo(torch.float64).eps)


def centre(z: torch.Tensor) -> torch.Tensor:
    return z - z.mean(dim=1, keepdim=True)


class Source:
    path = ""
    per_logit = 1.0  # queries per recovered logit

    def __init__(self, oracle: Any, vocab: int):
        self.o, self.vocab = oracle, vocab
        self.raw: list[torch.Tensor] = []  # returned values, for the precision reading

    def cost(self, m: int) -> int:
        """Queries to rebuild m prompts' vectors."""
        raise NotImplementedError

    def vectors(self, prompts: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def entry_sigma(self, value_sigma: float) -> float:
        """Per-entry noise of a rebuilt vector for a given noise on returned values."""
        return value_sigma


class FullSource(Source):
    path = "full"

    def __init__(self, oracle: Any, vocab: int, api: str):
        super().__init__(oracle, vocab)
        self.api = api  # logprobs | probabilities | logits

    def cost(self, m: int) -> int:
        return m

    def vectors(self, prompts: torch.Tensor) -> torch.Tensor:
        if self.api == "logprobs":
            ans = self.o.logprobs(prompts)
            z = torch.full((len(prompts), self.vocab), float("nan"), dtype=torch.float64,
                           device=ans.val.device)
            z.scatter_(1, ans.idx, ans.val)
            self.raw.append(ans.val[:4].flatten())
        else:
            y = self.o.predict(prompts)
            self.raw.append(y[:4].flatten())
            z = torch.log(y.clamp_min(1e-300)) if self.api == "probabilities" else y
        return centre(z)


class TopKSource(Source):
    path = "top-k + logit_bias"

    def __init__(self, oracle: Any, vocab: int, k: int, bias: float):
        super().__init__(oracle, vocab)
        self.k, self.bias = k, float(bias)
        per = k - 1
        self.groups = [list(range(i, min(i + per, vocab))) for i in range(0, vocab, per)]
        self.per_logit = len(self.groups) / max(vocab - 1, 1)

    def cost(self, m: int) -> int:
        return m * len(self.groups)

    def entry_sigma(self, value_sigma: float) -> float:
        return math.sqrt(2.0) * value_sigma  # an entry and the reference, each answered with noise

    def vectors(self, prompts: torch.Tensor) -> torch.Tensor:
        m, dev = len(prompts), self.o.device
        rel = torch.full((m, self.vocab), float("nan"), dtype=torch.float64, device=dev)
        ref = None
        rows = torch.arange(m, device=dev)[:, None]
        for g in self.groups:
            ans = self.o.logprobs(prompts, {j: self.bias for j in g})
            in_group = (ans.idx >= g[0]) & (ans.idx <= g[-1])
            a = ans.val - self.bias * in_group  # z_j − lse of this request
            if ref is None:  # the prompt's unbiased argmax: the largest z among what came back
                ref = ans.idx.gather(1, a.argmax(dim=1, keepdim=True))
                self.raw.append(ans.val[:4].flatten())
            at_ref = ans.idx == ref
            found = at_ref.any(dim=1)
            a_ref = torch.where(at_ref, a, torch.zeros_like(a)).sum(dim=1, keepdim=True)
            d = a - a_ref
            d[~found] = float("nan")
            keep = in_group | at_ref
            r, c = rows.expand_as(ans.idx)[keep], ans.idx[keep]
            rel[r, c] = d[keep]
        return centre(rel)


class SearchSource(Source):
    path = "argmax + logit_bias (binary search)"

    def __init__(self, oracle: Any, vocab: int, span: float, tol: float):
        super().__init__(oracle, vocab)
        self.span, self.tol = float(span), float(tol)
        self.steps = max(1, math.ceil(math.log2(self.span / self.tol)))
        self.per_logit = self.steps + 1.0

    def cost(self, m: int) -> int:
        return m * (1 + (self.vocab - 1) * (self.steps + 1))

    def entry_sigma(self, value_sigma: float) -> float:
        return self.span / 2 ** self.steps / math.sqrt(12.0)

    def vectors(self, prompts: torch.Tensor) -> torch.Tensor:
        m, v, dev = len(prompts), self.vocab, self.o.device
        ref = self.o.logprobs(prompts).token.to(dev)  # the unbiased argmax
        others = torch.arange(v, device=dev)[None].expand(m, -1)
        others = others[others != ref[:, None]].reshape(m, v - 1)
        pid = torch.arange(m, device=dev)[:, None].expand(m, v - 1).reshape(-1)
        tok = others.reshape(-1)
        p = prompts.to(dev)[pid]

        def wins(b: torch.Tensor) -> torch.Tensor:
            ans = self.o.logprobs(p, (tok[:, None], b[:, None]))
            return ans.token.to(dev) == tok

        lo = torch.zeros(len(tok), dtype=torch.float64, device=dev)
        hi = torch.full_like(lo, self.span)
        inside = wins(hi)  # z_ref − z_j < span: the search can find it
        for _ in range(self.steps):
            mid = (lo + hi) / 2
            w = wins(mid)
            hi, lo = torch.where(w, mid, hi), torch.where(w, lo, mid)
        gap = (lo + hi) / 2
        gap[~inside] = float("nan")
        z = torch.zeros(m, v, dtype=torch.float64, device=dev)
        z[pid, tok] = -gap
        return centre(z)


def precision_of(raw: list[torch.Tensor]) -> tuple[float, str]:
    """(σ, how) of one returned value from the values alone: a rounding quantum q (every value a
    multiple of 10^-d: σ = q/√12), else float32 answers (every value a float32: σ = 2·ε₃₂·max|v|,
    two units in the last place of the largest value), else float64 (σ = 2·ε₆₄·max|v|)."""
    v = torch.cat([r.flatten() for r in raw]) if raw else torch.zeros(1, dtype=torch.float64)
    v = v[torch.isfinite(v)].double().cpu()
    if not len(v):
        return 0.0, "no values"
    big = float(v.abs().max()) or 1.0
    for d in range(13):
        scaled = v * 10.0**d
        if float((scaled - scaled.round()).abs().max()) <= 1e-6 * max(1.0, float(scaled.abs().max()) * 1e-9):
            return 10.0**-d / math.sqrt(12.0), f"answers rounded to {d} decimals"
    if torch.equal(v.float().double(), v):
        return 2 * EPS32 * big, "float32 answers"
    return 2 * EPS64 * big, "float64 answers"


def repeat_sigma(first: torch.Tensor, again: torch.Tensor) -> float:
    """σ of one answer from the same queries asked twice: std(a − b)/√2 over entries both have."""
    d = (first - again)
    d = d[torch.isfinite(d)]
    return float(d.std() / math.sqrt(2.0)) if d.numel() > 1 else 0.0


def width(s: torch.Tensor, tau: float, hi: float = 3.0, lo: float = 1.5, margin: float = 6.0
          ) -> tuple[int, str]:
    """The width rule: singular values above hi·τ are signal, at or below lo·τ noise (τ = the
    largest singular value pure noise of the measured σ would show, σ(√n + √V)). "unclear" (the
    width cannot be told from noise) when one lies in between, or when the weakest signal value is
    below margin·τ: noise moves a singular value by up to about τ, so a direction of the layer that
    weak may have a sibling hidden under the bar. Every row above the bar: more rows are needed
    ("rows")."""
    if tau <= 0:
        tau = float(s[0]) * 1e-12 if len(s) else 0.0
    r = int((s > hi * tau).sum())
    between = int(((s > lo * tau) & (s <= hi * tau)).sum())
    if between or (r and float(s[r - 1]) < margin * tau):
        return r, "unclear"
    if r == len(s):
        return r, "rows"
    return r, "clear"
