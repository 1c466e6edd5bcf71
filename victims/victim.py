"""What a deployed victim is, whoever serves it: the public facts an attacker may know
(`PublicInfo`), the ground truth kept for scoring (`Truth`), and the `Victim` that pairs them with
the backend answering its API."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from victims.data.datasets import Dataset
from victims.models.training import TrainRecord


@dataclass
class PublicInfo:
    """What any attacker of this deployment knows without querying."""

    input_shape: tuple[int, ...]
    dim: int
    n_outputs: int
    n_classes: int
    task: str
    interface: str
    output: str
    gradient_of: str
    x_pool: torch.Tensor  # the attacker's own data from the same distribution (may be empty)
    input_low: float
    input_high: float
    device: torch.device
    dtype: torch.dtype
    input_domain_source: str = ""  # where input_low/high come from (declared, documented, pool)
    gradient_class: int = 0  # the class `gradient_of: class` explains (documented by the API)
    # what the scenario declares its model to be (victims/models/facts.py): which attacks apply;
    # a fact absent when nothing declares it (an endpoint: the attacks' own tests decide)
    declared: dict[str, bool] = field(default_factory=dict)
    declared_as: str = ""
    # a language model's completions API (task "lm"): logprobs returned per prompt (the
    # vocabulary size: all; 0: the generated token only) and whether it accepts logit_bias
    top_logprobs: int | None = None
    logit_bias: bool = False


@dataclass
class Truth:
    """The victim's ground truth: model and private data. Scorers only; never attacks."""

    model: nn.Module | None
    data: Dataset | None
    first_layer: torch.Tensor | None
    train_record: TrainRecord | None


@dataclass
class Victim:
    backend: Any
    truth: Truth
    info: PublicInfo
    utility: dict[str, float] = field(default_factory=dict)
    record: dict[str, Any] = field(default_factory=dict)
