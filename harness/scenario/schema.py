"""The scenario schema: one strict pydantic model per section of the YAML (docs/contract.md)."""

from __future__ import annotations

import hashlib
import json
import math
import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

Activation = Literal["relu", "tanh", "sigmoid", "softplus", "elu", "leaky_relu"]
RiskLevel = Literal["low", "medium", "high"]


class Strict(BaseModel):
    """Base for every scenario section: unknown keys are errors."""

    model_config = ConfigDict(extra="forbid", protected_namespaces=())


class ModelSpec(Strict):
    arch: Literal["mlp", "cnn", "logistic", "linear", "file"] = "mlp"
    hidden: list[int] = Field(default_factory=lambda: [64])
    activation: Activation | list[Activation] = "relu"
    bias: bool | list[bool] = True
    channels: list[int] = Field(default_factory=lambda: [8, 16])
    init_std: float | list[float | None] | None = None
    path: str | None = None
    format: Literal["auto", "torchscript", "state_dict"] = "auto"
    spec: ModelSpec | None = None  # architecture of a state_dict file

    @field_validator("hidden")
    @classmethod
    def _positive_widths(cls, v: list[int]) -> list[int]:
        if any(w < 1 for w in v):
            raise ValueError("widths must be positive integers")
        return v

    @model_validator(mode="after")
    def _file_needs_path(self) -> ModelSpec:
        if self.arch == "file" and not self.path:
            raise ValueError("arch: file needs path: <model file>")
        return self


class DataSpec(Strict):
    dataset: Literal[
        "digits", "breast_cancer", "diabetes", "fashion_mnist", "idx", "gaussian", "npz"
    ] = "digits"
    path: str | None = None
    dim: int | None = Field(default=None, ge=1)
    n_train: int | None = Field(default=1000, ge=1)
    n_test: int | None = Field(default=None, ge=1)
    attacker_pool: int = Field(default=200, ge=0)
    task: Literal["multiclass", "binary", "regression"] | None = None
    classes: list[int] | None = None
    labels: Literal["victim", "teacher"] = "teacher"
    standardize: Literal["none", "standard", "minmax", "center", "minmax_center"] = "standard"

    @model_validator(mode="after")
    def _paths(self) -> DataSpec:
        if self.dataset in ("npz", "idx") and not self.path:
            raise ValueError(f"dataset: {self.dataset} needs path")
        if self.dataset == "gaussian" and not self.dim:
            raise ValueError("dataset: gaussian needs dim")
        return self


class TrainingSpec(Strict):
    optimizer: Literal["sgd", "adam", "lbfgs"] = "sgd"
    lr: float = Field(default=0.1, gt=0)
    momentum: float = Field(default=0.0, ge=0, lt=1)
    weight_decay: float = Field(default=0.0, ge=0)
    epochs: int = Field(default=30, ge=0)
    steps: int | None = Field(default=None, ge=0)  # full-batch steps; overrides epochs
    batch_size: int | None = Field(default=64, ge=1)  # null = full batch
    tol: float = Field(default=1e-10, gt=0)  # lbfgs: gradient tolerance for the ERM optimum
    dtype: Literal["float32", "float64"] = "float32"


class EndpointSpec(Strict):
    url: str
    protocol: Literal["mlflow", "json"] = "mlflow"
    auth_env: str | None = None
    auth_header: str = "Authorization"
    auth_scheme: str = "Bearer"
    timeout_s: float = Field(default=10.0, gt=0)
    max_batch: int = Field(default=256, ge=1)
    retries: int = Field(default=3, ge=0)
    backoff_s: float = Field(default=0.5, ge=0)
    verify_tls: bool = True
    input_dim: int | None = Field(default=None, ge=1)
    n_outputs: int | None = Field(default=None, ge=1)
    request_template: dict[str, Any] | None = None
    response_path: str | None = None


class ClaimedPrivacy(Strict):
    """A model's declared DP guarantee (add/remove neighbours), audited by `dp_audit`."""

    epsilon: float = Field(gt=0)
    delta: float = Field(default=1e-5, ge=0, lt=1)


class VictimSpec(Strict):
    model: ModelSpec = Field(default_factory=ModelSpec)
    data: DataSpec = Field(default_factory=DataSpec)
    training: TrainingSpec = Field(default_factory=TrainingSpec)
    endpoint: EndpointSpec | None = None
    claimed_privacy: ClaimedPrivacy | None = None


class SmoothGradSpec(Strict):
    sigma: float = Field(default=0.15, ge=0)
    samples: int = Field(default=50, ge=1)


class InterfaceSpec(Strict):
    kind: Literal["prediction", "gradient", "smoothgrad", "whitebox"] = "prediction"
    output: Literal["label", "probabilities", "logits"] = "probabilities"
    gradient_of: Literal["predicted", "class", "sum"] = "predicted"
    gradient_class: int = Field(default=0, ge=0)
    smoothgrad: SmoothGradSpec = Field(default_factory=SmoothGradSpec)


class DPSpec(Strict):
    epsilon: float | None = Field(default=None, gt=0)
    delta: float = Field(default=1e-5, gt=0, lt=1)
    noise_multiplier: float | None = Field(default=None, gt=0)
    max_grad_norm: float = Field(default=1.0, gt=0)
    accountant: Literal["rdp", "prv", "gdp"] = "rdp"

    @model_validator(mode="after")
    def _one_target(self) -> DPSpec:
        if (self.epsilon is None) == (self.noise_multiplier is None):
            raise ValueError("give exactly one of epsilon or noise_multiplier")
        return self


class NoiseSpec(Strict):
    sigma: float = Field(ge=0)


class RoundingSpec(Strict):
    decimals: int = Field(ge=0, le=12)


class DefensesSpec(Strict):
    dp_sgd: DPSpec | None = None
    query_budget: int | None = Field(default=None, ge=0)
    output_noise: NoiseSpec | None = None
    rounding: RoundingSpec | None = None
    explanation_noise: NoiseSpec | None = None
    top_k: int | None = Field(default=None, ge=1)


class AttackChoice(Strict):
    name: str
    params: dict[str, Any] = Field(default_factory=dict)


class PolicySpec(Strict):
    fail_on: Literal["low", "medium", "high", "never"] = "high"
    # an inconclusive verdict (an attack could not finish, or none ran) still fails CI by default
    on_inconclusive: Literal["fail", "pass"] = "fail"


class TrackingSpec(Strict):
    enabled: bool = True
    uri: str | None = None
    experiment: str = "leakmeter"


class PriorSpec(Strict):
    kind: Literal["empirical", "uniform_ball", "gaussian", "finite"] = "empirical"
    dim: int | None = Field(default=None, ge=1)
    radius: float | None = Field(default=None, gt=0)
    sigma: float | None = Field(default=None, gt=0)
    size: int | None = Field(default=None, ge=1)


class ReroSpec(Strict):
    priors: list[PriorSpec] = Field(default_factory=lambda: [PriorSpec()])
    eta: list[float] | None = None  # null = dataset defaults (NN-oracle distance)


class AttackerSpec(Strict):
    """What the attacker knows, declared (and reported with the results). Defaults are what a
    real attacker of the deployment would have."""

    # [low, high] of every input feature in the model's units; null = the dataset's documented
    # range (digits: pixels 0..16, mapped through the deployed preprocessing), else the pool's
    input_domain: list[float] | None = None
    # unlabelled in-distribution points the attacker holds (disjoint from training); null = the
    # value of victim.data.attacker_pool (where this setting lived before)
    pool: int | None = Field(default=None, ge=0)
    knows_architecture: bool = False  # widths and activations given to attacks that can use them
    seed: int | None = None  # attacker randomness; never derived from the defender's seeds

    @field_validator("input_domain")
    @classmethod
    def _domain(cls, v: list[float] | None) -> list[float] | None:
        if v is not None and (len(v) != 2 or not all(math.isfinite(x) for x in v) or v[0] >= v[1]):
            raise ValueError("must be [low, high] with finite low < high")
        return v


class Scenario(Strict):
    name: str
    seed: int = 0
    device: Literal["auto", "cpu", "cuda"] = "auto"
    victim: VictimSpec = Field(default_factory=VictimSpec)
    interface: InterfaceSpec = Field(default_factory=InterfaceSpec)
    defenses: DefensesSpec = Field(default_factory=DefensesSpec)
    attacks: Literal["all"] | list[AttackChoice] = "all"
    policy: PolicySpec = Field(default_factory=PolicySpec)
    tracking: TrackingSpec = Field(default_factory=TrackingSpec)
    rero: ReroSpec = Field(default_factory=ReroSpec)
    attacker: AttackerSpec = Field(default_factory=AttackerSpec)

    @model_validator(mode="after")
    def _one_pool_setting(self) -> Scenario:
        data, att = self.victim.data, self.attacker
        old_set = "attacker_pool" in data.model_fields_set
        if att.pool is not None:
            if old_set and data.attacker_pool != att.pool:
                raise ValueError(f"attacker.pool: {att.pool} disagrees with victim.data.attacker_pool: "
                                 f"{data.attacker_pool} (the setting moved to attacker.pool: keep "
                                 "only that one)")
            data.attacker_pool = att.pool
        return self

    def notes(self) -> list[str]:
        """Settings that still work but have moved (printed and reported once per run)."""
        if "attacker_pool" in self.victim.data.model_fields_set and self.attacker.pool is None:
            return ["victim.data.attacker_pool has moved to attacker.pool (both work; the old key "
                    "will be removed in a later release)"]
        return []

    @field_validator("attacks")
    @classmethod
    def _some_attacks(cls, v: Any) -> Any:
        if isinstance(v, list) and not v:
            raise ValueError("an empty list runs nothing; give `all` or at least one attack")
        return v

    @field_validator("name")
    @classmethod
    def _slug(cls, v: str) -> str:
        if not re.fullmatch(r"[a-z0-9-]+", v):
            raise ValueError("must match [a-z0-9-]+ (lower-case letters, digits, dashes)")
        return v

    def public_dump(self) -> dict[str, Any]:
        """The scenario as plain data, safe to log: credentials and query strings are removed
        from the endpoint URL (tokens never live in the scenario: they come from auth_env)."""
        data = self.model_dump(mode="json")
        ep = data["victim"].get("endpoint")
        if ep and ep.get("url"):
            ep["url"] = redact_url(ep["url"])
        return data

    def fingerprint(self) -> str:
        """Hash of the settings that make two runs comparable (all but tracking)."""
        data = self.model_dump(mode="json", exclude={"tracking"})
        return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]


def redact_url(url: str) -> str:
    """The URL without user:password@ and without its query string and fragment."""
    from urllib.parse import urlsplit, urlunsplit

    parts = urlsplit(url)
    host = parts.hostname or ""
    if parts.port:
        host = f"{host}:{parts.port}"
    return urlunsplit((parts.scheme, host, parts.path, "", ""))
