"""Scenario checks for language-model victims (docs/contract.md, "LLM logit APIs"): which
interfaces and outputs go with `arch: lm` and `output: logprobs`."""

from __future__ import annotations

from typing import Any


def is_lm(s: Any) -> bool:
    """The scenario's victim is a language model: built here (`arch: lm`) or an openai endpoint."""
    ep = s.victim.endpoint
    return s.victim.model.arch == "lm" or (ep is not None and ep.protocol == "openai")


def check_lm_api(s: Any) -> None:
    """ValueError when a language model is asked for another API, or logprobs of a classifier."""
    lm, iface = is_lm(s), s.interface
    if lm and iface.kind != "prediction":
        raise ValueError(f"interface.kind: {iface.kind} is not served by a language model; allowed: "
                         "prediction (its next-token logprobs)")
    if lm and iface.output != "logprobs":
        raise ValueError(f"interface.output: {iface.output} is not what a language model returns; "
                         "allowed: logprobs (with top_logprobs: K for its top-K)")
    if not lm and iface.output == "logprobs":
        raise ValueError("interface.output: logprobs needs a language model (victim.model.arch: lm or "
                         "an endpoint with protocol: openai)")
    m = s.victim.model
    if m.arch == "lm" and iface.top_logprobs is not None and iface.top_logprobs > m.vocab:
        raise ValueError(f"interface.top_logprobs: {iface.top_logprobs} exceeds the vocabulary "
                         f"({m.vocab}); allowed: 0 to {m.vocab}, or null for all of it")
