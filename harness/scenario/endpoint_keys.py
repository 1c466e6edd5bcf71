"""Checks of `victim.endpoint` keys that depend on the wire protocol, and of the `headers` map
(whose values may only name environment variables: a scenario never holds a secret)."""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

HEADER_NAME = re.compile(r"^[!#$%&'*+\-.^_`|~0-9A-Za-z]{1,64}$")
ENV_REF = re.compile(r"^\$env:([A-Za-z_][A-Za-z0-9_]{0,127})$")
# headers the client sets itself (framing, content negotiation): a scenario may not replace them
RESERVED_HEADERS = {"host", "content-length", "transfer-encoding", "connection", "content-type",
                    "accept", "accept-encoding", "te", "upgrade", "expect", "cookie"}
MAX_HEADERS = 32
V2_ONLY = ("input_name", "output_name", "datatype", "classification")
TEMPLATE_PROTOCOLS = ("json", "torchserve")


ENV_NAME = r"^[A-Za-z_][A-Za-z0-9_]{0,127}$"
PATH = r"^[^\x00-\x1f]{1,1000}$"


class AuthSpec(BaseModel):
    """`victim.endpoint.auth`: bearer {token_env}, header {name, value_env}, or oauth2 client
    credentials {token_url, client_id_env, client_secret_env, scope}. Values only from the
    environment (variables named like auth_env's)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    type: Literal["bearer", "header", "oauth2"]
    token_env: str | None = Field(default=None, pattern=ENV_NAME)
    name: str | None = Field(default=None, pattern=HEADER_NAME.pattern)
    value_env: str | None = Field(default=None, pattern=ENV_NAME)
    token_url: str | None = Field(default=None, pattern=r"^https?://[^\s]{1,2000}$")
    client_id_env: str | None = Field(default=None, pattern=ENV_NAME)
    client_secret_env: str | None = Field(default=None, pattern=ENV_NAME)
    scope: str | None = Field(default=None, pattern=r"^[\x21-\x7e ]{1,500}$")

    @model_validator(mode="after")
    def _keys(self) -> AuthSpec:
        need = {"bearer": ("token_env",), "header": ("name", "value_env"),
                "oauth2": ("token_url", "client_id_env", "client_secret_env")}[self.type]
        missing = [k for k in need if getattr(self, k) is None]
        if missing:
            raise ValueError(f"type {self.type} needs {', '.join(missing)}")
        others = {"token_env", "name", "value_env", "token_url", "client_id_env", "client_secret_env",
                  "scope"} - set(need) - ({"scope"} if self.type == "oauth2" else set())
        extra = sorted(k for k in others if getattr(self, k) is not None)
        if extra:
            raise ValueError(f"type {self.type} does not read {', '.join(extra)}")
        if self.type == "header" and self.name.lower() in RESERVED_HEADERS:
            raise ValueError(f"name: {self.name} is set by leakmeter itself")
        return self


def check_credentials(ep: Any) -> None:
    """One credential, TLS keys that agree; ValueError naming the keys."""
    bearer = ep.auth is not None and ep.auth.type == "bearer" and ep.auth.token_env == ep.auth_env
    if ep.auth is not None and ep.auth_env and not bearer:
        raise ValueError("auth and auth_env both name a credential; give one of them (auth_env is "
                         "auth: {type: bearer, token_env})")
    if ep.auth is not None and ep.auth.type == "header" and ep.headers and \
            ep.auth.name.lower() in {k.lower() for k in ep.headers}:
        raise ValueError(f"headers: {ep.auth.name} is the header auth fills; give one of them")
    if ep.ca_bundle and not ep.verify_tls:
        raise ValueError("ca_bundle: given with verify_tls: false, which verifies nothing; drop one")
    if ep.client_key and not ep.client_cert:
        raise ValueError("client_key: needs client_cert (the certificate the key belongs to)")
    if ep.probe_auth_env and ep.auth is not None and ep.auth.type != "bearer":
        raise ValueError("probe_auth_env: a bearer token for the probes; it goes with auth_env or auth "
                         "type bearer")


def check_headers(v: dict[str, str] | None) -> dict[str, str] | None:
    """Header names are HTTP tokens (not ones the client sets itself) and every value is
    "$env:NAME"; ValueError naming the header (never a value that could be a secret)."""
    if v is None:
        return v
    if len(v) > MAX_HEADERS:
        raise ValueError(f"at most {MAX_HEADERS} headers")
    seen: set[str] = set()
    for name, value in v.items():
        shown = name if HEADER_NAME.match(name) else "<invalid name>"
        if not HEADER_NAME.match(name):
            raise ValueError("a header name must be an HTTP token (letters, digits, !#$%&'*+-.^_`|~), "
                             "at most 64 characters")
        if name.lower() in RESERVED_HEADERS:
            raise ValueError(f"{shown}: set by leakmeter itself; allowed: any other header")
        if name.lower() in seen:
            raise ValueError(f"{shown}: given twice (header names ignore case)")
        seen.add(name.lower())
        if not isinstance(value, str) or not ENV_REF.match(value):
            raise ValueError(f"{shown}: a header value must be \"$env:NAME\" (read from the environment "
                             "variable NAME, never written into the scenario; value not shown)")
    return v


def header_vars(headers: dict[str, str] | None) -> dict[str, str]:
    """{header name: environment variable} of a validated headers map."""
    return {k: ENV_REF.match(v).group(1) for k, v in (headers or {}).items()}


def check_protocol_keys(ep: Any) -> None:
    """Keys only some protocols read are refused elsewhere (a key that does nothing misleads)."""
    used = ep.model_fields_set
    if ep.protocol not in ("kserve-v2", "auto"):
        extra = [k for k in V2_ONLY if k in used and getattr(ep, k) is not None]
        if extra:
            raise ValueError(f"{', '.join(extra)}: only the kserve-v2 protocol (or auto) reads "
                             f"{'it' if len(extra) == 1 else 'them'}; protocol is {ep.protocol}")
    if ep.protocol not in TEMPLATE_PROTOCOLS:
        extra = [k for k in ("request_template", "response_path") if getattr(ep, k) is not None]
        if extra:
            raise ValueError(f"{', '.join(extra)}: only the json and torchserve protocols read "
                             f"{'it' if len(extra) == 1 else 'them'}; protocol is {ep.protocol}")
    if ep.protocol != "openai":
        extra = [k for k in ("model", "vocab", "vocab_size") if getattr(ep, k, None) is not None]
        if extra:
            raise ValueError(f"{', '.join(extra)}: only the openai protocol reads "
                             f"{'it' if len(extra) == 1 else 'them'}; protocol is {ep.protocol}")
    elif not ep.model:
        raise ValueError("protocol openai: model: <the served model's name> is required")
    if ep.protocol == "torchserve" and "/predictions/" not in ep.url.split("?", 1)[0]:
        raise ValueError("protocol torchserve: the url must be the model's prediction URL, "
                         "http(s)://host:port/predictions/MODEL[/VERSION]")
    if ep.auth_env and ep.headers and ep.auth_header.lower() in {k.lower() for k in ep.headers}:
        raise ValueError(f"headers: {ep.auth_header} is the header auth_env fills; give one of them")
    check_credentials(ep)
    if ep.columns is not None and ep.protocol not in ("mlflow", "auto"):
        raise ValueError(f"columns: only the mlflow protocol sends dataframe_split; protocol is "
                         f"{ep.protocol}")
    if isinstance(ep.columns, list) and len(set(ep.columns)) != len(ep.columns):
        raise ValueError("columns: a column is named twice")
