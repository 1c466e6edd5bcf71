"""`leakmeter serve --protocol openai`: an `arch: lm` victim behind the OpenAI-compatible legacy
completions API that vLLM, TGI and llama.cpp serve (docs/contract.md, "LLM logit APIs").

    GET  /v1/models                        → {"object": "list", "data": [{"id": NAME, ...}]}
    POST /v1/completions {"model": NAME, "prompt": [ids] | [[ids], ...], "max_tokens": 1,
         "logprobs": K, "logit_bias": {"id": bias}}
         → {"object": "text_completion", "choices": [{"index", "text", "finish_reason",
            "logprobs": {"tokens", "token_logprobs", "top_logprobs": [{token: logprob}],
            "text_offset"}}], "usage": {...}}

Prompts are token ids; tokens come back as "token_id:N" (vLLM's --return-tokens-as-token-ids).
One token is generated (greedy: the argmax of the biased logits). The deployment's settings:
`interface.top_logprobs` caps K (vLLM's --max-logprobs; a larger request is refused, 400),
`interface.logit_bias: false` refuses logit_bias (400), `interface.logprobs_mode` says whether
the returned logprobs see the bias, and `defenses.output_noise` / `rounding` apply to every
returned logprob (noise keyed by the prompt and bias, so asking again returns the same answer).
One prompt is one query of the key's budget.
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from fastapi import Request  # at module level: FastAPI resolves the handlers' annotations here
from fastapi.responses import JSONResponse, Response

from victims.http.served import RequestError, ServedModel, keyed_normal, parse_json
from victims.models.lm_api import answer

MAX_PROMPTS = 4096  # prompts per request
MAX_BIAS = 100.0  # OpenAI's logit_bias range


@dataclass
class LMRequest:
    prompts: list[list[int]]
    k: int | None
    bias: dict[int, float] | None

    def __len__(self) -> int:
        return len(self.prompts)


def token_str(i: int) -> str:
    return f"token_id:{int(i)}"


class LMServed(ServedModel):
    """Answers completions requests for one `arch: lm` victim, the deployment's settings applied."""

    def parse(self, raw: bytes, name: str) -> LMRequest:
        body = parse_json(raw)
        if not isinstance(body, dict):
            raise RequestError(400, "BAD_REQUEST", "the body must be a JSON object")
        if body.get("model") != name:
            raise RequestError(404, "MODEL_NOT_FOUND", f"no model named {str(body.get('model'))[:64]!r}")
        p = body.get("prompt")
        if isinstance(p, list) and p and all(isinstance(t, int) and not isinstance(t, bool) for t in p):
            p = [p]
        vocab, ctx = self.meta["n_outputs"], self.meta["input_dim"]
        ok = isinstance(p, list) and 0 < len(p) <= MAX_PROMPTS and all(
            isinstance(r, list) and 0 < len(r) <= ctx and all(
                isinstance(t, int) and not isinstance(t, bool) and 0 <= t < vocab for t in r) for r in p)
        if not ok:
            raise RequestError(400, "BAD_REQUEST", f"prompt: token ids (0 to {vocab - 1}), a list or up to "
                               f"{MAX_PROMPTS} lists of 1 to {ctx} ids (text prompts are not served)")
        if body.get("max_tokens", 1) not in (1, None) or body.get("n", 1) != 1 or body.get("echo"):
            raise RequestError(400, "BAD_REQUEST", "this server answers one next token: max_tokens: 1, "
                               "n: 1, no echo")
        k = body.get("logprobs")
        cap = self.meta["top_logprobs"]
        if k is not None and (not isinstance(k, int) or isinstance(k, bool) or k < 0 or k > cap):
            raise RequestError(400, "BAD_REQUEST", f"logprobs: an integer 0 to {cap} (this deployment's "
                               "most logprobs per token)")
        bias = body.get("logit_bias")
        if bias:
            if not self.meta["logit_bias"]:
                raise RequestError(400, "BAD_REQUEST", "logit_bias is not accepted by this deployment")
            try:
                bias = {int(t): float(v) for t, v in dict(bias).items()}
            except (TypeError, ValueError):
                raise RequestError(400, "BAD_REQUEST", "logit_bias: {token id: bias}") from None
            if any(not 0 <= t < vocab for t in bias) or any(not abs(v) <= MAX_BIAS for v in bias.values()):
                raise RequestError(400, "BAD_REQUEST", f"logit_bias: token ids 0 to {vocab - 1}, biases "
                                   f"-{MAX_BIAS:g} to {MAX_BIAS:g}")
        return LMRequest(p, k, bias or None)

    def answer(self, req: Any, explain: str | None = None) -> dict:
        """The choices of one request: per prompt the generated token and its top-K logprobs."""
        out: list[dict | None] = [None] * len(req)
        by_len: dict[int, list[int]] = {}
        for i, r in enumerate(req.prompts):
            by_len.setdefault(len(r), []).append(i)
        salt = int.from_bytes(hashlib.sha256(repr(sorted((req.bias or {}).items())).encode()).digest()[:7],
                              "big")
        for rows in by_len.values():
            p = torch.tensor([req.prompts[i] for i in rows], dtype=torch.long)
            zu, inv = self.backend.next_logits(p)
            k = req.k or 0
            a = answer(zu, inv, req.bias, max(k, 1), self.backend.mode)
            val = a.val.double().cpu().numpy()
            x = p.double().numpy()
            if self.defenses.noise_sigma:
                val = val + self.defenses.noise_sigma * keyed_normal(x, val.shape[1], self.salt ^ salt)
            if self.defenses.decimals is not None:
                val = np.round(val, self.defenses.decimals)
            tok = a.token.cpu().numpy()
            idx = a.idx.cpu().numpy()
            for j, i in enumerate(rows):
                out[i] = self._choice(i, int(tok[j]), idx[j], val[j], req.k)
        return {"choices": out, "prompt_tokens": sum(len(r) for r in req.prompts)}

    @staticmethod
    def _choice(i: int, tok: int, idx: np.ndarray, val: np.ndarray, k: int | None) -> dict:
        choice: dict[str, Any] = {"index": i, "text": token_str(tok), "finish_reason": "length",
                                  "logprobs": None}
        if k is not None:
            top = {token_str(t): float(v) for t, v in zip(idx[:k], val[:k], strict=True)}
            own = float(val[0]) if int(idx[0]) == tok else None
            choice["logprobs"] = {"tokens": [token_str(tok)], "token_logprobs": [own],
                                  "top_logprobs": [top], "text_offset": [0]}
        return choice


def build_lm_served(s: Any) -> tuple[LMServed, Any]:
    """Build the scenario's `arch: lm` victim here (ignoring `victim.endpoint`) and wrap it for
    serving; returns (served, victim)."""
    from victims.models.lm import build_lm_victim

    local = s.model_copy(deep=True)
    local.victim.endpoint = None
    victim = build_lm_victim(local)
    return lm_served(s, victim), victim


def lm_served(s: Any, victim: Any) -> LMServed:
    from victims.http.served import ServedDefenses

    info = victim.info
    meta = {"scenario": s.name, "input_dim": info.dim, "n_outputs": info.n_outputs,
            "n_classes": info.n_classes, "task": "lm", "interface": "prediction", "output": "logprobs",
            "top_logprobs": int(info.top_logprobs or 0), "logit_bias": bool(info.logit_bias)}
    return LMServed(victim.backend, meta, ServedDefenses.from_spec(s.defenses))


def add_openai_routes(app: Any, served: LMServed, name: str, handle: Any) -> None:
    """Register /v1/models and /v1/completions; `handle(request, parse, shape)` authenticates,
    reads, charges len(request) queries and answers."""

    @app.get("/v1/models")
    async def models() -> Response:
        return JSONResponse({"object": "list", "data": [{"id": name, "object": "model", "created": 0,
                                                         "owned_by": "leakmeter"}]})

    def shape(y: dict, _explain: Any, _want: Any) -> dict:
        n = len(y["choices"])
        return {"id": f"cmpl-{time.time_ns():x}", "object": "text_completion", "created": int(time.time()),
                "model": name, "choices": y["choices"],
                "usage": {"prompt_tokens": y["prompt_tokens"], "completion_tokens": n,
                          "total_tokens": y["prompt_tokens"] + n}}

    @app.post("/v1/completions")
    async def completions(request: Request) -> Response:
        return await handle(request, lambda raw, sv: (sv.parse(raw, name), None, None), shape)
