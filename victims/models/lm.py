"""A small decoder-only language model built here (`victim.model: {arch: lm}`), and the backend
that answers its next-token API (docs/contract.md, "LLM logit APIs").

`TinyLM` is GPT-2's shape in plain torch: token and position embeddings, pre-LayerNorm blocks
(causal self-attention, a 4×-wide GELU MLP), a final LayerNorm and a final projection to the
vocabulary **without bias** (GPT-2, Llama). Weights are drawn from the scenario's seed as GPT-2
initialises them (N(0, 0.02²)); it is not trained. The final LayerNorm's scale and shift are drawn
around 1 and 0 (σ 0.1) instead of PyTorch's exact 1 and 0, as after training: with a zero shift
the logits would span one dimension less than the width.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

from victims import devices
from victims.models.lm_api import LogprobAnswer, answer

CACHE_MB = 256  # logits of distinct prompts kept between queries
# the decoder's work a run is expected to ask, for the device policy (victims/devices.py): distinct
# prompts (logit_subspace's own cap; fewer when the query budget is smaller) of up to this many
# tokens (its random prompts have 8; a cached prompt runs the model once however often it is asked)
PROMPTS_EXPECTED = 1024
TOKENS_EXPECTED = 16


class Block(nn.Module):
    def __init__(self, hidden: int, heads: int):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(hidden), nn.LayerNorm(hidden)
        self.qkv, self.proj = nn.Linear(hidden, 3 * hidden), nn.Linear(hidden, hidden)
        self.up, self.down = nn.Linear(hidden, 4 * hidden), nn.Linear(4 * hidden, hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n, t, h = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(h, dim=2)
        q, k, v = (a.reshape(n, t, self.heads, h // self.heads).transpose(1, 2) for a in (q, k, v))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(n, t, h))
        return x + self.down(F.gelu(self.up(self.ln2(x))))


class TinyLM(nn.Module):
    """Next-token logits (N, vocab) of token-id prompts (N, T), T ≤ context."""

    def __init__(self, vocab: int, hidden: int, layers: int, heads: int, context: int):
        super().__init__()
        self.vocab, self.hidden, self.context = vocab, hidden, context
        self.tok, self.pos = nn.Embedding(vocab, hidden), nn.Embedding(context, hidden)
        self.blocks = nn.ModuleList(Block(hidden, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(hidden)
        self.head = nn.Linear(hidden, vocab, bias=False)
        for m in self.modules():
            if isinstance(m, nn.Linear | nn.Embedding):
                nn.init.normal_(m.weight, 0.0, 0.02)
                if getattr(m, "bias", None) is not None:
                    nn.init.zeros_(m.bias)
        with torch.no_grad():
            self.ln_f.weight.copy_(1 + 0.1 * torch.randn(hidden))
            self.ln_f.bias.copy_(0.1 * torch.randn(hidden))

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        ids = ids.long()
        pos = torch.arange(ids.shape[1], device=ids.device)
        x = self.tok(ids) + self.pos(pos)[None]
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.ln_f(x[:, -1]))

    def centred_image(self) -> torch.Tensor:
        """(vocab, h+1) float64: a matrix whose column span is that of every centred logit vector
        this model can output: C·W·[diag(γ)·P, β] (C centres over the vocabulary, P over the width:
        LayerNorm's output has mean zero before its scale γ and shift β)."""
        w = self.head.weight.detach().double().cpu()
        g, b = self.ln_f.weight.detach().double().cpu(), self.ln_f.bias.detach().double().cpu()
        h = len(g)
        p = torch.eye(h, dtype=torch.float64) - 1.0 / h
        m = w @ torch.cat([g[:, None] * p, b[:, None]], dim=1)
        return m - m.mean(dim=0, keepdim=True)

    def final_layer(self) -> torch.Tensor:
        """The final projection (vocab, h), float64 on the CPU."""
        return self.head.weight.detach().double().cpu()


def prompt_flop(vocab: int, hidden: int, layers: int, tokens: int) -> float:
    """Estimated flop of one prompt's forward pass: per layer and token the four h×h attention
    projections and the 4×-wide MLP (12·h² multiply-adds), attention scores and mixing (2·T·h),
    then the final projection of the last token (V·h); embeddings are look-ups."""
    return 2.0 * (layers * tokens * (12 * hidden * hidden + 2 * tokens * hidden) + vocab * hidden)


def lm_work(spec: Any, budget: int | None) -> tuple[float, str]:
    """(flop, note): the decoder's expected work in a run (`PROMPTS_EXPECTED` prompts, fewer under a
    smaller query budget, of `TOKENS_EXPECTED` tokens at most), for the device policy."""
    prompts = min(PROMPTS_EXPECTED, budget) if budget else PROMPTS_EXPECTED
    tokens = min(spec.context, TOKENS_EXPECTED)
    flop = prompt_flop(spec.vocab, spec.hidden[0], spec.layers, tokens) * prompts
    return flop, (f"arch: lm, forward passes of ~{prompts} prompts of ≤{tokens} tokens "
                  f"(vocab {spec.vocab}, hidden {spec.hidden[0]}, {spec.layers} layers)")


def build_lm(spec: Any, seed: int) -> TinyLM:
    torch.manual_seed(seed)
    return TinyLM(spec.vocab, spec.hidden[0], spec.layers, spec.heads, spec.context)


class LMBackend:
    """Answers next-token queries from an in-process `TinyLM`: `complete` (the completions API:
    generated token and top-K logprobs under a logit bias) and `predict` (full logprobs). Logits of
    distinct prompts are cached, so one prompt asked under many biases runs the model once."""

    remote = False

    def __init__(self, model: TinyLM, device: torch.device, mode: str = "processed"):
        self.model, self.device, self.mode = model, device, mode
        self._cache: dict[bytes, torch.Tensor] = {}
        self._cache_cap = max(1, CACHE_MB * 2**20 // (8 * model.vocab))

    def next_logits(self, prompts: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(zu, inv): logits of the distinct prompts (in the model's dtype) and each query's row."""
        prompts = torch.as_tensor(prompts).to(self.device).long()
        uniq, inv = torch.unique(prompts, dim=0, return_inverse=True)
        keys = [bytes(r.cpu().numpy().astype("int64").tobytes()) for r in uniq]
        todo = [i for i, k in enumerate(keys) if k not in self._cache]
        if todo:
            # blocks of exactly `rows` prompts (the last padded with token 0, its rows dropped), as
            # a deployed victim answers (victims/devices.py): a prompt's logits are the same bits
            # whatever else was asked with it; `rows` depends only on the device and the prompts'
            # length, and stays within ~2²² logits or activations per block (memory)
            per = 2**22 // max(self.model.vocab, self.model.hidden * uniq.shape[1])
            rows = max(1, min(devices.answer_rows(self.device), per))
            with torch.no_grad():
                for s in range(0, len(todo), rows):
                    idx = todo[s:s + rows]
                    block = uniq[idx]
                    if len(idx) < rows:
                        block = torch.cat([block, block.new_zeros((rows - len(idx), block.shape[1]))])
                    z = self.model(block)[:len(idx)]  # the model's own precision, as a server answers
                    for j, row in zip(idx, z, strict=True):
                        if len(self._cache) >= self._cache_cap:
                            self._cache.pop(next(iter(self._cache)))
                        self._cache[keys[j]] = row
        zu = torch.stack([self._cache[k] for k in keys]) if keys else \
            torch.zeros(0, self.model.vocab, dtype=self.model.head.weight.dtype, device=self.device)
        return zu, inv

    def complete(self, prompts: torch.Tensor, bias: Any, k: int) -> LogprobAnswer:
        zu, inv = self.next_logits(prompts)
        return answer(zu, inv, bias, k, self.mode)

    def predict(self, x: torch.Tensor, kind: str) -> torch.Tensor:
        """Full next-token logprobs (N, vocab); `label`: the argmax token."""
        zu, inv = self.next_logits(x)
        if kind == "label":
            return zu.argmax(dim=1)[inv]
        return torch.log_softmax(zu, dim=1)[inv]

    def explain(self, x, kind, gen):
        raise NotImplementedError("a language model's API offers no input gradients")

    def weights(self) -> dict[str, torch.Tensor]:
        return {k: v.detach().clone() for k, v in self.model.state_dict().items()}


def build_lm_victim(s: Any):
    """The scenario's `arch: lm` victim: built from the seed, random-initialised, on the device the
    run's policy gives its forward passes (victims/devices.py; recorded for the report)."""
    from victims.models.training import TrainRecord
    from victims.victim import PublicInfo, Truth, Victim

    dtype = torch.float64 if s.victim.training.dtype == "float64" else torch.float32
    spec = s.victim.model
    flop, note = lm_work(spec, s.defenses.query_budget)
    device = devices.current(s.device).place("victim", flop, note)
    model = build_lm(spec, s.seed).to(device, dtype).eval()
    for p in model.parameters():
        p.requires_grad_(False)
    iface = s.interface
    k = spec.vocab if iface.top_logprobs is None else iface.top_logprobs
    if s.defenses.top_k:
        k = min(k, s.defenses.top_k)
    info = PublicInfo(
        input_shape=(spec.context,), dim=spec.context, n_outputs=spec.vocab, n_classes=spec.vocab,
        task="lm", interface=iface.kind, output=iface.output, gradient_of=iface.gradient_of,
        x_pool=torch.zeros(0, spec.context, dtype=torch.float64, device=device), input_low=0.0,
        input_high=float(spec.vocab - 1), device=device, dtype=dtype,
        input_domain_source="token ids 0 to vocab-1", top_logprobs=k, logit_bias=iface.logit_bias)
    record = TrainRecord(notes=["random initialisation from the seed (GPT-2's N(0, 0.02²)); not trained"])
    params = sum(p.numel() for p in model.parameters())
    rec = {"parameters": params, "train_seconds": 0.0, "train_steps": 0, "notes": record.notes,
           "device": str(device), "dtype": str(dtype).removeprefix("torch."),
           "lm": {"vocab": spec.vocab, "hidden": spec.hidden[0], "layers": spec.layers,
                  "heads": spec.heads, "context": spec.context, "top_logprobs": k,
                  "logit_bias": iface.logit_bias, "logprobs_mode": iface.logprobs_mode}}
    backend = LMBackend(model, device, iface.logprobs_mode)
    return Victim(backend, Truth(model, None, None, record), info, {}, rec)
