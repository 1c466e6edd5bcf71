"""`protocol: openai`: an LLM behind the OpenAI-compatible legacy completions API (vLLM, TGI,
llama.cpp; docs/contract.md, "LLM logit APIs").

`POST {url}/completions` with {"model", "prompt": [[ids], ...], "max_tokens": 1, "logprobs": K,
"logit_bias": {"id": bias}}; each choice's `logprobs.top_logprobs[0]` maps tokens to logprobs and
`logprobs.tokens[0]` (else `text`) is the generated token. Tokens are read as "token_id:N" (vLLM's
`--return-tokens-as-token-ids`) or through `victim.endpoint.vocab`, a JSON list of the token
strings. Several prompts travel in one request (up to `max_batch`); prompts asked under different
biases go in different requests. Retries, deadlines, size limits, auth and budget charging are the
endpoint client's (victims/http/client.py; its LLM side in victims/http/openai_backend.py): one
prompt is one query.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from victims.errors import BadInput
from victims.http.wire_base import AnswerError, WireProtocol, answer_field

TOKEN_ID = re.compile(r"^token_id:(\d+)$")


class OpenAIProtocol(WireProtocol):
    name = "openai"

    def __init__(self, spec: Any):
        self.model = spec.model

    def target(self, explain: str | None) -> str:
        return f"{self.url.rstrip('/')}/completions"

    def body(self, rows: list, explain: str | None, k: int | None = None, bias: dict | None = None) -> Any:
        out: dict[str, Any] = {"model": self.model, "prompt": rows, "max_tokens": 1, "temperature": 0,
                               "logprobs": k}
        if bias:
            out["logit_bias"] = {str(t): float(b) for t, b in bias.items()}
        return out

    def answer(self, payload: Any, explain: str | None = None) -> Any:
        choices = answer_field(payload, "choices", "OpenAI completions")
        if not isinstance(choices, list):
            raise AnswerError("choices is not a list")
        return choices

    def offers_explain(self) -> bool:
        return False


def read_vocab(path: str | None) -> dict[str, int] | None:
    """{token string: id} from a JSON list of token strings; BadInput when unreadable."""
    if path is None:
        return None
    try:
        tokens = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise BadInput(f"victim.endpoint.vocab: {path} is not a readable JSON list ({type(exc).__name__})") \
            from None
    if not isinstance(tokens, list) or not all(isinstance(t, str) for t in tokens) or len(tokens) < 2:
        raise BadInput(f"victim.endpoint.vocab: {path} must hold a JSON list of token strings")
    return {t: i for i, t in enumerate(tokens)}
