"""The scenario file: a typed, validated view of the YAML (see CONTRACT.md).

`load_scenario(path, overrides)` returns a `Scenario` or raises `ScenarioError` with one line
naming the file, the key path (``victim.model.hidden[1]``) and what is allowed.
"""

from __future__ import annotations

import copy
import hashlib
import json
import re
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from harness.errors import ScenarioError

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


# --------------------------------------------------------------------------- loading


def _format_loc(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif part in ("function-after", "function-before") or str(part).startswith(
            ("literal[", "list[", "function-")
        ):
            continue
        else:
            out += ("." if out else "") + str(part)
    return out or "<top level>"


def _model_at(loc: tuple[Any, ...]) -> type[BaseModel] | None:
    """The pydantic model class that holds the key at `loc` (for listing allowed keys)."""
    model: Any = Scenario
    for part in loc[:-1]:
        if isinstance(part, int) or not isinstance(part, str):
            continue
        fields = getattr(model, "model_fields", None)
        if not fields or part not in fields:
            continue
        ann = fields[part].annotation
        model = _unwrap_model(ann)
        if model is None:
            return None
    return model if isinstance(model, type) and issubclass(model, BaseModel) else None


def _unwrap_model(ann: Any) -> Any:
    if isinstance(ann, type) and issubclass(ann, BaseModel):
        return ann
    for arg in getattr(ann, "__args__", ()) or ():
        found = _unwrap_model(arg)
        if found is not None:
            return found
    return None


def _describe(err: dict[str, Any], source: str) -> str:
    loc = tuple(p for p in err["loc"])
    # drop pydantic's union-branch tags, keep real keys and indices
    clean = tuple(p for p in loc if isinstance(p, int) or not str(p).startswith(("literal[",)))
    path = _format_loc(clean)
    value = err.get("input")
    if err["type"] == "extra_forbidden":
        parent = _model_at(clean)
        allowed = ", ".join(parent.model_fields) if parent else "see CONTRACT.md"
        return f"{source}: {path}: unknown key; allowed keys here: {allowed}"
    if err["type"] == "missing":
        return f"{source}: {path}: required key is missing"
    msg = err["msg"].removeprefix("Value error, ")
    shown = json.dumps(value) if isinstance(value, str | int | float | bool | None) else None
    got = f" (got {shown})" if shown is not None else ""
    return f"{source}: {path}: {msg}{got}"


def _pick_error(errors: list[dict[str, Any]]) -> dict[str, Any]:
    """Prefer the most specific error (longest path) that is not a union-branch mismatch."""
    best = [e for e in errors if e["type"] != "literal_error" or len(e["loc"]) > 1]
    pool = best or errors
    for e in pool:
        if e["type"] == "extra_forbidden":
            return e
    return max(pool, key=lambda e: len(e["loc"]))


def parse_value(text: str) -> Any:
    """Coerce a command-line value with YAML rules (numbers, booleans, null/none, lists)."""
    if text.strip().lower() == "none":
        return None
    try:
        value = yaml.safe_load(text)
    except yaml.YAMLError:
        return text
    if isinstance(value, str):  # YAML reads "1e3" as a string; users mean a number
        try:
            num = float(value)
        except ValueError:
            return value
        return int(num) if num.is_integer() and "e" in value.lower() else num
    return value


def apply_overrides(data: dict[str, Any], overrides: list[str] | None) -> dict[str, Any]:
    """Apply ``dotted.path=value`` overrides to raw scenario data; returns a new dict."""
    data = copy.deepcopy(data)
    for item in overrides or []:
        if "=" not in item:
            raise ScenarioError(f"--set {item}: expected dotted.path=value")
        key, _, raw = item.partition("=")
        parts = [p for p in key.strip().split(".") if p]
        if not parts:
            raise ScenarioError(f"--set {item}: empty key")
        node = data
        for p in parts[:-1]:
            nxt = node.get(p) if isinstance(node, dict) else None
            if not isinstance(nxt, dict):
                nxt = {}
                node[p] = nxt
            node = nxt
        node[parts[-1]] = parse_value(raw)
    return data


def scenario_from_dict(data: Any, source: str = "<scenario>") -> Scenario:
    """Validate raw data into a Scenario; raises ScenarioError with one line."""
    if not isinstance(data, dict):
        raise ScenarioError(f"{source}: the file must hold a mapping of keys, got {type(data).__name__}")
    try:
        return Scenario.model_validate(data)
    except ValidationError as exc:
        raise ScenarioError(_describe(_pick_error(exc.errors()), source)) from None


def read_raw(path: str | Path) -> dict[str, Any]:
    """Read the YAML of a scenario file; raises ScenarioError when unreadable."""
    p = Path(path)
    if not p.is_file():
        raise ScenarioError(f"{p}: scenario file not found")
    try:
        data = yaml.safe_load(p.read_text())
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark else ""
        raise ScenarioError(f"{p}: not valid YAML{where}") from None
    if data is None:
        raise ScenarioError(f"{p}: the file is empty")
    return data


def load_scenario(path: str | Path, overrides: list[str] | None = None) -> Scenario:
    """Load, override and validate a scenario file; paths inside it resolve from its folder."""
    p = Path(path)
    data = apply_overrides(read_raw(p), overrides)
    scenario = scenario_from_dict(data, str(p))
    _resolve_paths(scenario, p.parent)
    return scenario


def _resolve_paths(s: Scenario, base: Path) -> None:
    m, d = s.victim.model, s.victim.data
    if m.path and not Path(m.path).is_absolute():
        m.path = str((base / m.path).resolve())
    if d.path and not Path(d.path).is_absolute():
        d.path = str((base / d.path).resolve())


def flatten(data: Any, prefix: str = "") -> dict[str, Any]:
    """Flatten nested dicts/lists into dotted keys (for MLflow params)."""
    out: dict[str, Any] = {}
    if isinstance(data, dict):
        for k, v in data.items():
            out.update(flatten(v, f"{prefix}.{k}" if prefix else str(k)))
    elif isinstance(data, list) and data and any(isinstance(v, dict | list) for v in data):
        for i, v in enumerate(data):
            out.update(flatten(v, f"{prefix}[{i}]"))
    else:
        out[prefix] = data
    return out
