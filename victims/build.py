"""Build the deployed victim a scenario describes: in this process (victims/local.py: data,
model, training with DP-SGD when asked) or behind an HTTP endpoint (victims/http/endpoint.py)."""

from __future__ import annotations

from typing import Any

from victims.http.endpoint import build_remote_victim
from victims.local import build_local_victim
from victims.victim import Victim


def build_victim(s: Any) -> Victim:
    """The scenario's victim: its endpoint when it names one, else built and trained here."""
    if s.victim.endpoint is not None:
        return build_remote_victim(s)
    if s.victim.model.arch == "lm":
        from victims.models.lm import build_lm_victim

        return build_lm_victim(s)
    return build_local_victim(s)


def check_buildable(s: Any) -> None:
    """Everything `build_victim` would refuse as bad input, found without training anything or
    sending a request (`leakmeter validate`: "valid" means runnable): the dataset loads (installed,
    its files there and well-formed, `classes` among its labels, `n_train` within it), the model
    file's weights load into `spec` and are finite, and an endpoint's token and header variables
    are allowed and set. BadInput on the first problem."""
    from victims.http.endpoint import read_headers, read_token
    from victims.local import check_local

    if s.victim.endpoint is not None:
        read_token(s.victim.endpoint)
        read_headers(s.victim.endpoint)
        if "dataset" not in s.victim.data.model_fields_set and s.victim.model.arch != "file":
            return  # the endpoint alone: its shape is learnt from its answers
    if s.victim.model.arch == "lm":
        return  # the schema checked its shape; nothing to load
    check_local(s)
