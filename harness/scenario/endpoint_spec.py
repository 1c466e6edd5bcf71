"""`victim.endpoint`: where a deployed model answers and how leakmeter talks to it (protocols,
credentials, TLS, limits); docs/endpoints.md explains each key."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, field_validator, model_validator

from harness.scenario.endpoint_keys import PATH, AuthSpec, check_headers, check_protocol_keys
from harness.scenario.limits import (
    LM_MAX_VOCAB,
    MAX_WIDTH,
    check_template,
    check_template_secrets,
    check_url,
)
from harness.scenario.strict import Strict
from victims.http.protocol import template_has


class EndpointSpec(Strict):
    url: str
    # docs/endpoints.md: mlflow | json (a template) | kserve-v2 (Open Inference Protocol: KServe,
    # Triton, MLServer) | kserve-v1 (KServe V1, TF Serving REST) | torchserve | auto (probed)
    protocol: Literal["mlflow", "json", "kserve-v2", "kserve-v1", "torchserve", "auto", "openai"] = "mlflow"
    auth_env: str | None = Field(default=None, pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
    auth_header: str = Field(default="Authorization", pattern=r"^[!#$%&'*+\-.^_`|~0-9A-Za-z]{1,64}$")
    auth_scheme: str = Field(default="Bearer", pattern=r"^[!#$%&'*+\-.^_`|~0-9A-Za-z]{0,32}$")
    timeout_s: float = Field(default=10.0, gt=0, le=3600)  # per socket operation (connect, each read)
    # a whole request, connect to last byte (null: max(60, 3 × timeout_s)); a trickled answer ends here
    deadline_s: float | None = Field(default=None, gt=0, le=86400)
    max_response_mb: float = Field(default=64.0, gt=0, le=4096)  # largest answer read (MiB)
    max_batch: int = Field(default=256, ge=1, le=100_000)
    retries: int = Field(default=3, ge=0, le=20)
    backoff_s: float = Field(default=0.5, ge=0, le=60)
    verify_tls: bool = True
    # docs/endpoints.md "Production scans": TLS (ca_bundle, mTLS), credentials, readiness, refusals
    ca_bundle: str | None = Field(default=None, pattern=PATH)
    client_cert: str | None = Field(default=None, pattern=PATH)
    client_key: str | None = Field(default=None, pattern=PATH)
    trust_env: bool = False  # true: ~/.netrc and proxy credentials from the environment too
    auth: AuthSpec | None = None
    probe_auth_env: str | None = Field(default=None, pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
    ready_timeout_s: float = Field(default=0.0, ge=0, le=3600)
    # answer shapes: dataframe_split column names (a list, or an MLmodel file's signature), and
    # the class names string labels map to (index = class)
    columns: list[Annotated[str, Field(min_length=1, max_length=200)]] | Annotated[
        str, Field(pattern=PATH)] | None = Field(default=None)
    classes: list[Annotated[str, Field(min_length=1, max_length=200)]] | None = Field(
        default=None, min_length=2, max_length=100_000)
    refusal_statuses: list[Annotated[int, Field(ge=400, le=499)]] = Field(
        default_factory=lambda: [401, 403], max_length=20)
    input_dim: int | None = Field(default=None, ge=1, le=MAX_WIDTH)
    n_outputs: int | None = Field(default=None, ge=1, le=100_000)
    request_template: dict[str, Any] | None = None
    response_path: str | None = Field(default=None, pattern=r"^[A-Za-z0-9_.\-\[\]]{1,200}$")
    # the scan's own cost cap: rows it may send in total (attacks, start-up check, verification
    # probes); a limit on leakmeter, never evidence about the deployment (None = no cap)
    max_rows: int | None = Field(default=None, ge=1, le=10**12)
    # extra request headers; each value only "$env:NAME" (a variable like auth_env's, scrubbed)
    headers: dict[str, str] | None = None
    # kserve-v2: the tensors' names and the input datatype (null: from the model's metadata, else
    # the first input / output and FP32); classification: Triton's top-k classification extension
    input_name: str | None = Field(default=None, pattern=r"^[A-Za-z0-9_.:/\-]{1,128}$")
    output_name: str | None = Field(default=None, pattern=r"^[A-Za-z0-9_.:/\-]{1,128}$")
    datatype: Literal["FP32", "FP64"] | None = None
    classification: int | None = Field(default=None, ge=1, le=100_000)
    # openai (an LLM's legacy completions API): the served model's name, the vocabulary (a JSON
    # list of token strings; else tokens are read as "token_id:N") and its size
    model: str | None = Field(default=None, pattern=r"^[A-Za-z0-9_.:/\-]{1,256}$")
    vocab: str | None = None
    vocab_size: int | None = Field(default=None, ge=2, le=LM_MAX_VOCAB)

    @field_validator("headers")
    @classmethod
    def _headers(cls, v: dict[str, str] | None) -> dict[str, str] | None:
        return check_headers(v)

    @field_validator("url")
    @classmethod
    def _url(cls, v: str) -> str:
        return check_url(v)

    @field_validator("request_template")
    @classmethod
    def _template(cls, v: dict[str, Any] | None) -> dict[str, Any] | None:
        check_template_secrets(v)
        return check_template(v)

    @model_validator(mode="after")
    def _one_credential(self) -> EndpointSpec:
        from urllib.parse import urlsplit

        p = urlsplit(self.url)
        if self.auth is not None and self.auth.type == "bearer" and not self.auth_env:
            self.auth_env = self.auth.token_env  # auth_env is the bearer token's variable
        if (self.auth_env or self.auth) and (p.username is not None or p.password is not None):
            raise ValueError("the url carries user:password@ credentials and auth_env names a token; "
                             "give one of them (URL credentials would replace the token)")
        if template_has(self.request_template, "$auth") and not self.auth_env:
            raise ValueError('"$auth" in request_template is filled from the environment variable '
                             "auth_env names; set auth_env")
        check_protocol_keys(self)
        return self
