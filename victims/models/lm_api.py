"""What an OpenAI-compatible completions API returns for the next token, computed from the
model's logits: the generated token (greedy: the argmax of the biased logits), and the top-K
log-probabilities (docs/contract.md, "LLM logit APIs").

`logit_bias` is added to the logits before the token is chosen. Whether the returned logprobs
see it is the server's `mode`: `processed` (OpenAI's API before March 2024: log-softmax of the
biased logits) or `raw` (vLLM's default `--logprobs-mode raw_logprobs`: of the logits before any
processing). Defenses (noise, rounding) are applied by whoever serves the answer.

Answers are computed on unique prompts (`zu`, one row per distinct prompt) and an index `inv`
mapping each query to its prompt, so thousands of queries of the same prompts under different
biases never materialise a query × vocabulary matrix beyond one chunk.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

CHUNK_ELEMENTS = 1 << 23  # query × vocabulary entries per dense chunk


@dataclass
class LogprobAnswer:
    """N answers: the generated token (N,), the returned token ids (N, K), their logprobs (N, K)."""

    token: torch.Tensor
    idx: torch.Tensor
    val: torch.Tensor


def bias_rows(bias: Any, n: int, vocab: int, device: torch.device
              ) -> tuple[torch.Tensor, torch.Tensor] | None:
    """A bias as (ids (N, m), values (N, m)): None; one {id: bias} map for every query (one
    request's `logit_bias`); or a pair of tensors, one row per query (rows padded with bias 0)."""
    if bias is None or (isinstance(bias, dict) and not bias):
        return None
    if isinstance(bias, dict):
        ids = torch.tensor([int(k) for k in bias], dtype=torch.long, device=device)[None]
        vals = torch.tensor([float(v) for v in bias.values()], dtype=torch.float64, device=device)[None]
        ids, vals = ids.expand(n, -1), vals.expand(n, -1)
    else:
        ids, vals = bias
        ids = torch.as_tensor(ids, dtype=torch.long, device=device).reshape(n, -1)
        vals = torch.as_tensor(vals, dtype=torch.float64, device=device).reshape(n, -1)
    if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= vocab):
        raise ValueError(f"logit_bias names a token outside the vocabulary (0 to {vocab - 1})")
    if not torch.isfinite(vals).all():
        raise ValueError("logit_bias values must be finite")
    return ids, vals


def answer(zu: torch.Tensor, inv: torch.Tensor, bias: Any, k: int, mode: str = "processed"
           ) -> LogprobAnswer:
    """The API's answers to len(inv) queries: zu (U, V) logits of the distinct prompts (their dtype
    is the answers' precision),
    inv (N,) the prompt of each query, `bias` as `bias_rows` takes it, k logprobs per answer."""
    n, vocab = len(inv), zu.shape[1]
    b = bias_rows(bias, n, vocab, zu.device)
    k = min(k, vocab)
    if k == 0 and b is not None:  # the token alone: no dense matrix needed
        return LogprobAnswer(_sparse_argmax(zu, inv, *b), _empty(n, zu, torch.long), _empty(n, zu))
    if mode == "raw" and b is not None:  # logprobs before the bias: per distinct prompt
        top = torch.topk(torch.log_softmax(zu, dim=1), k, dim=1)
        return LogprobAnswer(_sparse_argmax(zu, inv, *b), top.indices[inv], top.values[inv])
    per = max(1, CHUNK_ELEMENTS // max(vocab, 1))
    tok, ids, vals = [], [], []
    for i in range(0, n, per):
        z = zu[inv[i:i + per]]
        zb = z.scatter_add(1, b[0][i:i + per], b[1][i:i + per].to(z.dtype)) if b is not None else z
        tok.append(zb.argmax(dim=1))
        if k:
            lp = torch.log_softmax(zb if mode == "processed" else z, dim=1)
            top = torch.topk(lp, k, dim=1) if k < vocab else None
            every = torch.arange(vocab, device=z.device).expand(len(z), -1)
            ids.append(top.indices if top is not None else every)
            vals.append(top.values if top is not None else lp)
    if not tok:
        return LogprobAnswer(_empty(0, zu, torch.long)[:, 0], _empty(0, zu, torch.long), _empty(0, zu))
    token = torch.cat(tok)
    if not k:
        return LogprobAnswer(token, _empty(n, zu, torch.long), _empty(n, zu))
    return LogprobAnswer(token, torch.cat(ids), torch.cat(vals))


def _empty(n: int, like: torch.Tensor, dtype=torch.float64) -> torch.Tensor:
    return torch.zeros(n, 0, dtype=dtype, device=like.device)


def _sparse_argmax(zu: torch.Tensor, inv: torch.Tensor, ids: torch.Tensor, vals: torch.Tensor
                   ) -> torch.Tensor:
    """argmax(z + b) per query for a bias on m tokens: the best biased token against the best
    unbiased one (the largest of each prompt's top m+1 logits not among the biased ids)."""
    m = ids.shape[1]
    top = torch.topk(zu, min(m + 1, zu.shape[1]), dim=1)
    tv, ti = top.values[inv], top.indices[inv]
    taken = (ti[:, :, None] == ids[:, None, :]).any(-1)
    tv = tv.masked_fill(taken, float("-inf"))
    best_free = tv.argmax(dim=1)
    free_v, free_i = tv.gather(1, best_free[:, None])[:, 0], ti.gather(1, best_free[:, None])[:, 0]
    biased = zu[inv[:, None], ids] + vals
    bj = biased.argmax(dim=1)
    bv, bi = biased.gather(1, bj[:, None])[:, 0], ids.gather(1, bj[:, None])[:, 0]
    return torch.where(bv > free_v, bi, free_i)
