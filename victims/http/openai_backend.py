"""The endpoint client's LLM side (`protocol: openai`, wire format in victims/http/wire_openai.py):
`OpenAIBackend.complete` answers the oracle's `logprobs` by completions requests, several prompts
per request and one request per distinct logit bias; `build_openai_victim` checks the endpoint
with one prompt and states the public facts."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import torch

from victims.errors import BadInput
from victims.http.client import EndpointError, RemoteBackend
from victims.http.wire_openai import TOKEN_ID, read_vocab
from victims.models.lm_api import LogprobAnswer, bias_rows

PROMPT_MAX = 64  # tokens per prompt the attacks may send (the endpoint's context is not public)


class OpenAIBackend(RemoteBackend):
    """The endpoint client for an LLM's completions API: `complete` is what the oracle's
    `logprobs` asks."""

    def setup_lm(self, vocab: dict[str, int] | None, vocab_size: int) -> None:
        self.vocab_map, self.vocab_size = vocab, vocab_size

    def token_id(self, tok: Any) -> int:
        if isinstance(tok, str):
            m = TOKEN_ID.match(tok)
            if m:
                i = int(m.group(1))
            elif self.vocab_map is not None and tok in self.vocab_map:
                i = self.vocab_map[tok]
            else:
                raise EndpointError(self.scrub(f"{self.where}: token {tok[:40]!r} is neither token_id:N nor "
                                               "in victim.endpoint.vocab"))
            if 0 <= i < self.vocab_size:
                return i
        raise EndpointError(f"{self.where}: a token outside the vocabulary (0 to {self.vocab_size - 1})")

    def _request(self, prompts: list, k: int, bias: dict | None) -> list:
        data = json.dumps(self.protocol.body(prompts, None, k, bias)).encode()
        choices = self._send(self.protocol.target(None), data, len(prompts), None)
        if len(choices) != len(prompts):
            raise EndpointError(f"{self.where}: {len(choices)} choices for {len(prompts)} prompts")
        return sorted(choices, key=lambda c: c.get("index", 0) if isinstance(c, dict) else 0)

    def _parse(self, c: Any, k: int) -> tuple[int, list[int], list[float]]:
        try:
            lp = c.get("logprobs") or {}
            tok = (lp.get("tokens") or [None])[0] if lp else None
            tok = self.token_id(tok if tok is not None else c["text"])
            top = (lp.get("top_logprobs") or [{}])[0] or {} if k else {}
            pairs = sorted(((self.token_id(t), float(v)) for t, v in top.items()), key=lambda p: -p[1])[:k]
        except (AttributeError, KeyError, TypeError, ValueError, IndexError):
            raise EndpointError(f"{self.where}: a choice without the completion's token or "
                                "logprobs") from None
        if k and not pairs:
            raise EndpointError(f"{self.where}: no top_logprobs in a choice (logprobs: {k} asked)")
        while len(pairs) < k:  # fewer than asked: the first one repeated (harmless to the attack)
            pairs.append(pairs[0])
        return tok, [p[0] for p in pairs], [p[1] for p in pairs]

    def complete(self, prompts: torch.Tensor, bias: Any, k: int) -> LogprobAnswer:
        n = len(prompts)
        b = bias_rows(bias, n, self.vocab_size, torch.device("cpu"))
        rows = prompts.cpu().tolist()
        groups: dict[Any, list[int]] = {}
        for i in range(n):
            key = None if b is None else tuple(zip(b[0][i].tolist(), b[1][i].tolist(), strict=True))
            groups.setdefault(key, []).append(i)
        tok = np.zeros(n, dtype=np.int64)
        idx = np.zeros((n, k), dtype=np.int64)
        val = np.zeros((n, k), dtype=np.float64)
        for key, members in groups.items():
            bmap = None
            if key:
                bmap = {}
                for t, v in key:
                    bmap[t] = bmap.get(t, 0.0) + v
                bmap = {t: v for t, v in bmap.items() if v != 0.0} or None
            for s in range(0, len(members), self.spec.max_batch):
                part = members[s:s + self.spec.max_batch]
                for i, c in zip(part, self._request([rows[i] for i in part], k, bmap), strict=True):
                    tok[i], ids, vals = self._parse(c, k)
                    idx[i], val[i] = ids, vals
        if not np.isfinite(val).all():
            raise EndpointError(f"{self.where}: answered logprobs that are not finite")
        return LogprobAnswer(torch.as_tensor(tok), torch.as_tensor(idx), torch.as_tensor(val))

    def predict(self, x: torch.Tensor, kind: str) -> torch.Tensor:
        raise EndpointError("an LLM endpoint answers completions (oracle.logprobs), not predict")


def build_openai_victim(s: Any, truth_cls: Any, token: str | None, headers: dict[str, str]) -> Any:
    """The Victim behind an openai endpoint: the start-up check (one prompt), the public facts
    (vocabulary size, top_logprobs, logit_bias as documented) and a black-box truth (`truth_cls`,
    victims/http/endpoint.py's BlackBoxTruth; the token and headers read there)."""
    from victims import devices
    from victims.http.protocol import display_url
    from victims.victim import PublicInfo, Victim

    ep, iface = s.victim.endpoint, s.interface
    device = devices.current(s.device).place("victim", 0.0, "an LLM endpoint: answers arrive over HTTP")
    vocab = read_vocab(ep.vocab)
    size = ep.vocab_size or (len(vocab) if vocab else None)
    if size is None:
        raise BadInput("victim.endpoint.vocab_size: required for protocol openai without a vocab file "
                       "(public for open models: the tokenizer's size)")
    if vocab is not None and len(vocab) != size:
        raise BadInput(f"victim.endpoint.vocab_size: {size} disagrees with the vocab file "
                       f"({len(vocab)} tokens)")
    k = size if iface.top_logprobs is None else min(iface.top_logprobs, size)
    backend = OpenAIBackend(ep, dim=PROMPT_MAX, task="lm", n_classes=size, n_outputs=size, token=token,
                            budget=ep.max_rows, headers=headers)
    backend.setup_lm(vocab, size)
    try:
        backend.bill(1)
        backend.complete(torch.zeros(1, 1, dtype=torch.long), None, k)
    except EndpointError as exc:
        raise BadInput(f"victim.endpoint: {backend.scrub(str(exc))}") from None
    info = PublicInfo(
        input_shape=(PROMPT_MAX,), dim=PROMPT_MAX, n_outputs=size, n_classes=size, task="lm",
        interface=iface.kind, output=iface.output, gradient_of=iface.gradient_of,
        x_pool=torch.zeros(0, PROMPT_MAX, dtype=torch.float64, device=device), input_low=0.0,
        input_high=float(size - 1), device=device, dtype=torch.float64,
        input_domain_source="token ids 0 to vocab_size-1", top_logprobs=k, logit_bias=iface.logit_bias)
    where = display_url(ep.url)
    record = {"endpoint": {"url": where, "protocol": "openai", "model": ep.model, "max_batch": ep.max_batch,
                           "auth": bool(token), "stats": backend.stats.__dict__},
              "notes": [f"remote endpoint {where}: defenses are applied by the endpoint, not by leakmeter",
                        "truth unavailable: black-box scoring only"],
              "device": str(device), "dtype": "float64", "lm": {"vocab": size, "top_logprobs": k,
                                                                "logit_bias": iface.logit_bias}}
    truth = truth_cls(None, None, None, None, endpoint=backend, info=info, seed=s.seed)
    return Victim(backend, truth, info, {}, record)
