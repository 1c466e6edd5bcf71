"""The scenario schema: one strict pydantic model per section of the YAML (docs/contract.md)."""

from __future__ import annotations

import hashlib
import json
import math
import re
from typing import Annotated, Any, Literal

from pydantic import Field, field_validator, model_validator

from harness.scenario.endpoint_spec import EndpointSpec
from harness.scenario.limits import (
    KNOWN_CLASSES,
    LM_MAX_CONTEXT,
    LM_MAX_VOCAB,
    MAX_COUNT,
    MAX_WIDTH,
    check_lm_shape,
    check_path_text,
    check_template,
)
from harness.scenario.lm_keys import check_lm_api
from harness.scenario.strict import Strict
from victims.http.protocol import template_has

Activation = Literal["relu", "tanh", "sigmoid", "softplus", "elu", "leaky_relu", "gelu", "silu"]
RiskLevel = Literal["low", "medium", "high"]


class ModelSpec(Strict):
    arch: Literal["mlp", "cnn", "logistic", "linear", "file", "lm"] = "mlp"
    hidden: list[Annotated[int, Field(ge=1, le=MAX_WIDTH)]] = Field(default_factory=lambda: [64],
                                                                    max_length=64)
    activation: Activation | list[Activation] = "relu"
    norm: Literal["none", "batch", "layer"] = "none"  # after each hidden Linear layer (mlp)
    bias: bool | list[bool] = True
    channels: list[Annotated[int, Field(ge=1, le=4096)]] = Field(default_factory=lambda: [8, 16],
                                                                 max_length=16)
    init_std: float | list[float | None] | None = None
    path: str | None = None
    # auto never runs code; torchscript also needs --trust-model-code (victims/models/files.py)
    format: Literal["auto", "state_dict", "safetensors", "onnx", "torchscript"] = "auto"
    spec: ModelSpec | None = None  # architecture of a state_dict file
    # which output of a model file is the API's answer (null: its floating-point scores)
    output_name: str | None = Field(default=None, pattern=r"^[A-Za-z0-9_.:/\-]{1,128}$")
    # arch: lm (a decoder-only LM built here, victims/models/lm.py): hidden is its width
    vocab: int | None = Field(default=None, ge=2, le=LM_MAX_VOCAB)
    layers: int = Field(default=2, ge=1, le=64)
    heads: int = Field(default=4, ge=1, le=256)
    context: int = Field(default=64, ge=1, le=LM_MAX_CONTEXT)

    @model_validator(mode="before")
    @classmethod
    def _lm_width(cls, data: Any) -> Any:
        """`hidden: 128` (one width) is the LM's; the list form stays the MLP's."""
        if isinstance(data, dict) and data.get("arch") == "lm" and isinstance(data.get("hidden"), int) \
                and not isinstance(data.get("hidden"), bool):
            data = {**data, "hidden": [data["hidden"]]}
        return data

    @field_validator("path")
    @classmethod
    def _path_text(cls, v: str | None) -> str | None:
        return check_path_text(v)

    @model_validator(mode="after")
    def _lm_shape(self) -> ModelSpec:
        if self.arch == "lm":
            check_lm_shape(self)
        return self

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
    dim: int | None = Field(default=None, ge=1, le=MAX_WIDTH)
    n_train: int | None = Field(default=1000, ge=1, le=MAX_COUNT)
    n_test: int | None = Field(default=None, ge=1, le=MAX_COUNT)
    attacker_pool: int = Field(default=200, ge=0, le=MAX_COUNT)
    task: Literal["multiclass", "binary", "regression"] | None = None
    classes: list[Annotated[int, Field(ge=0, le=100_000)]] | None = Field(default=None,
                                                                          max_length=100_000)
    labels: Literal["victim", "teacher"] = "teacher"
    # null: `none` for a model leakmeter did not train (a user's file, an endpoint: its inputs as
    # they are), `standard` for a model leakmeter trains (resolved by Scenario)
    standardize: Literal["none", "standard", "minmax", "center", "minmax_center"] | None = None

    @field_validator("path")
    @classmethod
    def _path_text(cls, v: str | None) -> str | None:
        return check_path_text(v)

    @field_validator("classes")
    @classmethod
    def _distinct(cls, v: list[int] | None) -> list[int] | None:
        if v is not None and len(set(v)) != len(v):
            raise ValueError(f"{v} lists a class twice")
        if v is not None and len(v) < 2:
            raise ValueError(f"{v} selects one class; a classifier needs at least two")
        return v

    @model_validator(mode="after")
    def _paths(self) -> DataSpec:
        if self.dataset in ("npz", "idx") and not self.path:
            raise ValueError(f"dataset: {self.dataset} needs path")
        if self.dataset == "gaussian" and not self.dim:
            raise ValueError("dataset: gaussian needs dim")
        return self


class TrainingSpec(Strict):
    optimizer: Literal["sgd", "adam", "lbfgs"] = "sgd"
    lr: float = Field(default=0.1, gt=0, le=100)
    momentum: float = Field(default=0.0, ge=0, lt=1)
    weight_decay: float = Field(default=0.0, ge=0, le=1000)
    epochs: int = Field(default=30, ge=0, le=100_000)
    steps: int | None = Field(default=None, ge=0, le=100_000_000)  # full-batch steps; overrides epochs
    batch_size: int | None = Field(default=64, ge=1, le=MAX_COUNT)  # null = full batch
    tol: float = Field(default=1e-10, gt=0, le=1)  # lbfgs: gradient tolerance for the ERM optimum
    dtype: Literal["float32", "float64"] = "float32"


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
    sigma: float = Field(default=0.15, ge=0, le=1e6)
    samples: int = Field(default=50, ge=1, le=10_000)


class InterfaceSpec(Strict):
    kind: Literal["prediction", "gradient", "smoothgrad", "whitebox"] = "prediction"
    output: Literal["label", "probabilities", "logits", "logprobs"] = "probabilities"
    # output: logprobs (an LLM's next-token API): how many logprobs it returns per prompt (null:
    # the whole vocabulary; 0: the generated token only), whether it accepts logit_bias, and
    # whether the bias is applied before the returned logprobs are computed (processed: OpenAI's
    # API before March 2024; raw: vLLM's default --logprobs-mode raw_logprobs)
    top_logprobs: int | None = Field(default=None, ge=0, le=LM_MAX_VOCAB)
    logit_bias: bool = True
    logprobs_mode: Literal["processed", "raw"] = "processed"
    gradient_of: Literal["predicted", "class", "sum"] = "predicted"
    gradient_class: int = Field(default=0, ge=0, le=100_000)
    smoothgrad: SmoothGradSpec = Field(default_factory=SmoothGradSpec)


class DPSpec(Strict):
    # below ε = 0.01 the accountant's search tolerance (0.01) is the whole target
    epsilon: float | None = Field(default=None, ge=0.01, le=1000)
    delta: float = Field(default=1e-5, ge=1e-30, lt=1)
    noise_multiplier: float | None = Field(default=None, gt=0, le=1000)
    max_grad_norm: float = Field(default=1.0, gt=0, le=1e6)
    accountant: Literal["rdp", "prv", "gdp"] = "rdp"

    @model_validator(mode="after")
    def _one_target(self) -> DPSpec:
        if (self.epsilon is None) == (self.noise_multiplier is None):
            raise ValueError("give exactly one of epsilon or noise_multiplier")
        return self


class NoiseSpec(Strict):
    sigma: float = Field(ge=0, le=1e6)


class RoundingSpec(Strict):
    decimals: int = Field(ge=0, le=12)


class DefensesSpec(Strict):
    dp_sgd: DPSpec | None = None
    query_budget: int | None = Field(default=None, ge=0, le=10**12)
    request_budget: int | None = Field(default=None, ge=1, le=10**12)  # HTTP requests per client
    output_noise: NoiseSpec | None = None
    rounding: RoundingSpec | None = None
    explanation_noise: NoiseSpec | None = None
    top_k: int | None = Field(default=None, ge=1, le=100_000)


class AttackChoice(Strict):
    name: str = Field(max_length=100)
    params: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="before")
    @classmethod
    def _bare_name(cls, v: Any) -> Any:
        """`attacks: [surrogate, mia_lira]` (or `--set attacks=[surrogate]`): names alone."""
        return {"name": v} if isinstance(v, str) else v

    @field_validator("params")
    @classmethod
    def _small(cls, v: dict[str, Any]) -> dict[str, Any]:
        return check_template(v, "params")


class PolicySpec(Strict):
    fail_on: Literal["low", "medium", "high", "never"] = "high"
    # an inconclusive verdict (an attack could not finish, or none ran) still fails CI by default
    on_inconclusive: Literal["fail", "pass"] = "fail"


class TrackingSpec(Strict):
    enabled: bool = True
    uri: str | None = Field(default=None, max_length=2000)
    experiment: str = Field(default="leakmeter", min_length=1, max_length=250)


class PriorSpec(Strict):
    kind: Literal["empirical", "uniform_ball", "gaussian", "finite"] = "empirical"
    dim: int | None = Field(default=None, ge=1, le=MAX_WIDTH)
    radius: float | None = Field(default=None, gt=0, le=1e12)
    sigma: float | None = Field(default=None, gt=0, le=1e12)
    size: int | None = Field(default=None, ge=1, le=10**15)


class ReroSpec(Strict):
    priors: list[PriorSpec] = Field(default_factory=lambda: [PriorSpec()], max_length=16)
    # null = dataset defaults (NN-oracle distance)
    eta: list[Annotated[float, Field(gt=0, le=1e12)]] | None = Field(default=None, max_length=64)


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


class MembershipSpec(Strict):
    """Where membership attacks train their reference models (the numbers are the same either way)."""

    executor: Literal["local", "ray"] = "local"  # ray: batches of reference models as Ray tasks
    # ray only: null = a local Ray started for the run; HOST:PORT, ray://HOST:PORT or auto = a cluster
    ray_address: str | None = Field(default=None, max_length=300)
    ray_workers: int | None = Field(default=None, ge=1, le=100_000)  # a local Ray's CPUs (null: all)
    models_per_task: int | None = Field(default=None, ge=1, le=100_000)  # null: spread over the CPUs

    @model_validator(mode="after")
    def _ray_keys_need_ray(self) -> MembershipSpec:
        if self.executor != "ray":
            for key in ("ray_address", "ray_workers", "models_per_task"):
                if getattr(self, key) is not None:
                    raise ValueError(f"{key} is for executor: ray (executor is {self.executor})")
        elif self.ray_address and self.ray_workers is not None:
            raise ValueError("ray_workers sizes a local Ray; a cluster at ray_address has its own")
        return self


SECTIONS = ("victim", "interface", "defenses", "policy", "tracking", "rero", "attacker", "membership")


class Scenario(Strict):
    name: str = Field(max_length=100)
    seed: int = Field(default=0, ge=0, le=2**31 - 1)  # numpy and torch seeds are derived from it
    device: Literal["auto", "cpu", "cuda"] = "auto"
    victim: VictimSpec = Field(default_factory=VictimSpec)
    interface: InterfaceSpec = Field(default_factory=InterfaceSpec)
    defenses: DefensesSpec = Field(default_factory=DefensesSpec)
    attacks: Literal["all"] | list[AttackChoice] = "all"
    policy: PolicySpec = Field(default_factory=PolicySpec)
    tracking: TrackingSpec = Field(default_factory=TrackingSpec)
    rero: ReroSpec = Field(default_factory=ReroSpec)
    attacker: AttackerSpec = Field(default_factory=AttackerSpec)
    membership: MembershipSpec = Field(default_factory=MembershipSpec)

    @model_validator(mode="before")
    @classmethod
    def _empty_sections(cls, data: Any) -> Any:
        """A section whose keys are all commented out (`defenses:` alone reads as null) is the
        section with its defaults."""
        if isinstance(data, dict):
            data = {k: v for k, v in data.items()
                    if not (v is None and k in SECTIONS)}
            vic = data.get("victim")
            if isinstance(vic, dict):
                data["victim"] = {k: v for k, v in vic.items()
                                  if not (v is None and k in ("model", "data", "training"))}
        return data

    @model_validator(mode="after")
    def _inputs_as_they_are(self) -> Scenario:
        """A model leakmeter did not train (a user's file, an endpoint) sees its inputs as they are
        unless standardising is asked for; a model leakmeter trains sees them standardised."""
        d = self.victim.data
        if d.standardize is None:
            theirs = self.victim.model.arch == "file" or self.victim.endpoint is not None
            d.standardize = "none" if theirs else "standard"
        return self

    @model_validator(mode="after")
    def _no_batch_norm_under_dp(self) -> Scenario:
        """DP-SGD clips per-example gradients; BatchNorm mixes examples (Opacus refuses it)."""
        m = self.victim.model
        if self.defenses.dp_sgd is not None and m.arch == "mlp" and m.norm == "batch":
            raise ValueError("victim.model.norm: batch mixes examples, which DP-SGD's per-example "
                             "clipping does not allow; allowed with defenses.dp_sgd: layer, none")
        return self

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

    @model_validator(mode="after")
    def _template_explains(self) -> Scenario:
        """An explanation API over a json template needs somewhere to ask for explanations."""
        ep = self.victim.endpoint
        if ep is not None and ep.protocol == "json" and self.interface.kind in ("gradient", "smoothgrad") \
                and not template_has(ep.request_template or {"inputs": "$inputs"}, "$explain"):
            raise ValueError(f"victim.endpoint.request_template: the {self.interface.kind} interface needs a "
                             '"$explain" placeholder in the template (where the request asks for an '
                             "explanation)")
        if self.defenses.request_budget is not None and ep is None:
            raise ValueError("defenses.request_budget: counts HTTP requests, which only an endpoint "
                             "(victim.endpoint) is sent; use query_budget for a local model")
        return self

    @model_validator(mode="after")
    def _lm_api(self) -> Scenario:
        """A language model answers logprobs through a prediction API, and only it does."""
        check_lm_api(self)
        return self

    @model_validator(mode="after")
    def _class_indices(self) -> Scenario:
        """Class indices the interface or defenses name must exist (known datasets)."""
        d = self.victim.data
        n = len(d.classes) if d.classes else KNOWN_CLASSES.get(d.dataset)
        if d.dataset == "gaussian":
            n = {"binary": 2, "regression": None}.get(d.task or "multiclass", n)
        if n is not None and self.interface.gradient_class >= n:
            raise ValueError(f"interface.gradient_class: {self.interface.gradient_class} is not a class "
                             f"of {d.dataset} (allowed: 0 to {n - 1})")
        return self

    @field_validator("name")
    @classmethod
    def _slug(cls, v: str) -> str:
        if not re.fullmatch(r"[a-z0-9-]+", v):
            raise ValueError("must match [a-z0-9-]+ (lower-case letters, digits, dashes)")
        return v

    def public_dump(self) -> dict[str, Any]:
        """The scenario as plain data, safe to log: credentials and query strings are removed
        from the endpoint URL (tokens never live in the scenario: they come from auth_env)."""
        return public_data(self.model_dump(mode="json"))

    def fingerprint(self) -> str:
        """Hash of the settings that make two runs comparable (all but tracking and where
        reference models train, which changes no number)."""
        data = self.model_dump(mode="json", exclude={"tracking", "membership"})
        return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]


def public_data(data: dict[str, Any]) -> dict[str, Any]:
    """Scenario data (validated or raw, e.g. a sweep's base file) safe to log: the endpoint URL
    without credentials or query, the tracking URI without user:password@. Returns a copy."""
    import copy

    data = copy.deepcopy(data)
    victim = data.get("victim") if isinstance(data.get("victim"), dict) else {}
    ep = victim.get("endpoint")
    if isinstance(ep, dict) and isinstance(ep.get("url"), str):
        ep["url"] = redact_url(ep["url"])
    tracking = data.get("tracking") if isinstance(data.get("tracking"), dict) else {}
    uri = tracking.get("uri") if isinstance(tracking.get("uri"), str) else ""
    if "@" in uri.partition("://")[2].split("/", 1)[0]:  # a tracking server's user:password@
        tracking["uri"] = redact_url(uri)
    return data


def redact_url(url: str) -> str:
    """The URL without user:password@ and without its query string and fragment."""
    from urllib.parse import urlsplit, urlunsplit

    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:  # e.g. a bad port: cut the credentials and the query by hand
        return re.sub(r"//[^/@]*@", "//", url.split("?", 1)[0].split("#", 1)[0])
    host = parts.hostname or ""
    if port:
        host = f"{host}:{port}"
    return urlunsplit((parts.scheme, host, parts.path, "", ""))
