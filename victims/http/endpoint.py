"""The victim behind an HTTP endpoint (`victim.endpoint` in a scenario): the start-up probe that
checks the endpoint is usable, the public facts, and the truth available for scoring (the named
model file when there is one, else only black-box probes of the endpoint itself)."""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import numpy as np
import torch

from defenses.budget import SCORING
from defenses.errors import BudgetExhausted
from victims import devices
from victims.errors import BadInput, InterfaceError
from victims.http.client import EndpointError, EndpointFaults, RemoteBackend
from victims.http.protocol import display_url, template_has
from victims.http.secrets import SECRETS
from victims.local import build_local_victim, input_domain
from victims.victim import PublicInfo, Truth, Victim


@dataclass
class BlackBoxTruth(Truth):
    """No model, no data: only the endpoint itself, which black-box scorers may probe
    (harness/scoring/blackbox.py; probes are the scorer's, not an attacker's: they count in the
    run's rows sent and against `victim.endpoint.max_rows`, never against an attacker's budget)."""

    endpoint: RemoteBackend | None = None
    info: Any = None
    seed: int = 0
    x_heldout: torch.Tensor | None = None  # the named dataset's test inputs (probe points), if any

    def probe_predict(self, x: torch.Tensor) -> torch.Tensor:
        """The endpoint's predictions for held-out probes, charged to the run's row cap first."""
        self.endpoint.billing_as = SCORING
        try:
            self.endpoint.bill(len(x))
            return self.endpoint.predict(x, self.info.output)
        finally:
            self.endpoint.billing_as = None

    def probe_explain(self, x: torch.Tensor) -> torch.Tensor:
        self.endpoint.billing_as = SCORING
        try:
            self.endpoint.bill(len(x))
            return self.endpoint.explain(x, self.info.interface, torch.Generator())
        finally:
            self.endpoint.billing_as = None


AUTH_PREFIX = "LEAKMETER_"  # the variables a scenario may name in auth_env on its own
_chosen: set[str] = set()  # variables the person running leakmeter named with --auth-env


def allow_auth_env(name: str) -> None:
    """Allow `name` as the token variable (the command line's --auth-env)."""
    _chosen.add(name)


def read_token(spec: Any) -> str | None:
    """The auth token from the environment variable `auth_env` names (None without auth).

    Scenarios travel between people, and the token is sent to the scenario's URL: a scenario may
    name only variables starting with LEAKMETER_ (or one the command line chose with
    --auth-env), never e.g. AWS_SECRET_ACCESS_KEY. BadInput (exit 2, before any request) for
    any other name, and for a variable that is not set."""
    if not spec.auth_env:
        return None
    name = spec.auth_env
    if not name.startswith(AUTH_PREFIX) and name not in _chosen:
        raise BadInput(f"victim.endpoint.auth_env: {name} is not a variable a scenario may send: a "
                       f"scenario names only variables starting with {AUTH_PREFIX} (scenarios travel "
                       f"between people and the token goes to the scenario's URL); rename it, or choose "
                       f"it yourself with --auth-env {name}")
    token = os.environ.get(name, "")
    SECRETS.add(token)
    if not token.strip():
        raise BadInput(f"victim.endpoint.auth_env: the environment variable {name} is not "
                       "set or empty (it must hold the endpoint's token)")
    return token.strip()


def read_var(key: str, name: str) -> str:
    """The value of the variable `name` that the key `victim.endpoint.KEY` names, registered with
    the scrubber; BadInput for a variable a scenario may not send (auth_env's rule) or one unset."""
    if not name.startswith(AUTH_PREFIX) and name not in _chosen:
        raise BadInput(f"victim.endpoint.{key}: {name} is not a variable a scenario may send: a scenario "
                       f"names only variables starting with {AUTH_PREFIX}; or choose it yourself with "
                       f"--auth-env {name}")
    value = os.environ.get(name, "")
    SECRETS.add(value)
    if not value.strip():
        raise BadInput(f"victim.endpoint.{key}: the environment variable {name} is not set or empty")
    SECRETS.add(value.strip())
    return value.strip()


def check_files(spec: Any) -> None:
    """BadInput naming the key when a TLS file (ca_bundle, client_cert, client_key) is missing."""
    for key in ("ca_bundle", "client_cert", "client_key"):
        path = getattr(spec, key, None)
        if path and not os.path.isfile(os.path.expanduser(path)):
            raise BadInput(f"victim.endpoint.{key}: {path!r} is not a readable file")


def read_headers(spec: Any) -> dict[str, str]:
    """The `headers` map's values, read from the environment variables it names (the same rule as
    auth_env: LEAKMETER_* or a variable chosen with --auth-env); registered with the scrubber.
    BadInput naming the header for a variable that is not allowed, not set, or not sendable."""
    from victims.http.secrets import valid_header_value

    out: dict[str, str] = {}
    for header, ref in (spec.headers or {}).items():
        name = ref.removeprefix("$env:")
        if not name.startswith(AUTH_PREFIX) and name not in _chosen:
            raise BadInput(f"victim.endpoint.headers.{header}: ${name} is not a variable a scenario may "
                           f"send: only variables starting with {AUTH_PREFIX} (the value goes to the "
                           "scenario's URL)")
        value = os.environ.get(name, "").strip()
        SECRETS.add(value)
        if not value:
            raise BadInput(f"victim.endpoint.headers.{header}: the environment variable {name} is not set "
                           "or empty")
        if not valid_header_value(value):
            raise BadInput(f"victim.endpoint.headers.{header}: the value of ${name} cannot be sent in an "
                           "HTTP header (control characters, a line break or non-ASCII); value not shown")
        out[header] = value
    return out


def _public_shape(s: Any) -> dict[str, Any]:
    """dim, task, classes, pool and input range from the scenario's dataset (when it names one)
    and the endpoint spec; BadInput when they disagree or the dimension is unknown."""
    ep = s.victim.endpoint
    out: dict[str, Any] = {"pool": None, "low": None, "high": None, "shape": None, "data": None}
    if "dataset" in s.victim.data.model_fields_set:
        from victims.data.datasets import load_dataset

        data = load_dataset(s.victim.data, s.seed, scale_target=False)  # answers in the target's units
        out.update(dim=data.dim, task=data.task, n_classes=data.n_classes, n_outputs=data.n_outputs,
                   pool=data.x_pool, shape=tuple(data.input_shape), data=data)
        out["low"], out["high"], out["domain_source"] = input_domain(s, data)
        if ep.input_dim is not None and ep.input_dim != data.dim:
            raise BadInput(f"victim.endpoint.input_dim: {ep.input_dim} disagrees with the dataset's "
                           f"dimension {data.dim}")
        return out
    if ep.input_dim is None:
        raise BadInput("victim.endpoint.input_dim: required when victim.data names no dataset "
                       "(the number of input features the endpoint takes)")
    task = s.victim.data.task
    out.update(dim=ep.input_dim, task=task, n_outputs=ep.n_outputs, n_classes=None,
               shape=(ep.input_dim,))
    declared = getattr(getattr(s, "attacker", None), "input_domain", None)
    if declared is not None:
        out.update(low=float(declared[0]), high=float(declared[1]),
                   domain_source="declared (attacker.input_domain)")
    return out


def build_remote_victim(s: Any) -> Victim:
    """A Victim answered by the scenario's endpoint. Truth is the named model file when there is
    one (full scoring), else absent (black-box scoring). BadInput when the endpoint is unusable."""
    ep = s.victim.endpoint
    where = display_url(ep.url)
    if urlsplit(ep.url).scheme not in ("http", "https") or not urlsplit(ep.url).hostname:
        raise BadInput(f"victim.endpoint.url: {where!r} is not an http(s) URL")
    if ep.protocol == "openai":  # an LLM's completions API (victims/http/openai_backend.py)
        from victims.http.openai_backend import build_openai_victim

        return build_openai_victim(s, BlackBoxTruth, read_token(ep), read_headers(ep))
    if s.interface.kind == "whitebox":
        raise BadInput("interface.kind: whitebox is a weight release; an endpoint offers prediction, "
                       "gradient or smoothgrad")
    if ep.protocol == "json" and s.interface.kind != "prediction" and not template_has(
            ep.request_template, "$explain"):
        raise BadInput(f"victim.endpoint.request_template: the {s.interface.kind} interface needs a "
                       '"$explain" placeholder in the template')
    device = devices.current(s.device).place("victim", 0.0, "an endpoint: answers arrive over HTTP")
    check_files(ep)
    token = read_token(ep)
    pub = _public_shape(s)
    from victims.http.answers import columns_of

    cols = columns_of(ep)
    if cols is not None and len(cols) != pub["dim"]:
        raise BadInput(f"victim.endpoint.columns: {len(cols)} columns, but the scenario's inputs have "
                       f"{pub['dim']} features")
    task = pub["task"]
    n_out = pub["n_outputs"]
    budget = s.defenses.query_budget
    need = 2 if s.interface.kind in ("gradient", "smoothgrad") else 1
    if budget is not None and budget < need:
        raise BadInput(f"defenses.query_budget: {budget} leaves nothing for the start-up check of the "
                       f"endpoint ({need} row(s)); nothing was sent")
    if ep.max_rows is not None and ep.max_rows < need:
        raise BadInput(f"victim.endpoint.max_rows: {ep.max_rows} leaves nothing for the start-up check "
                       f"of the endpoint ({need} row(s)); nothing was sent")
    backend = RemoteBackend(ep, dim=pub["dim"], task=task or "multiclass",
                            n_classes=pub["n_classes"] or 0, n_outputs=n_out or 0, token=token,
                            budget=ep.max_rows, headers=read_headers(ep), read_var=read_var,
                            request_budget=s.defenses.request_budget)
    from victims.http.discover import startup

    found, probe = _when_ready(backend, lambda: (startup(backend, s, pub, token), _probe(backend, s, pub)))
    task, n_classes, n_out = probe["task"], probe["n_classes"], probe["n_outputs"]
    backend.task, backend.n_classes, backend.n_outputs = task, n_classes, n_out
    pool = pub["pool"] if pub["pool"] is not None else np.zeros((0, pub["dim"]))
    info = PublicInfo(
        input_shape=pub["shape"], dim=pub["dim"], n_outputs=n_out, n_classes=n_classes, task=task,
        interface=s.interface.kind, output=s.interface.output, gradient_of=s.interface.gradient_of,
        x_pool=torch.as_tensor(pool, dtype=torch.float64, device=device),
        input_low=pub["low"] if pub["low"] is not None else -3.0,
        input_high=pub["high"] if pub["high"] is not None else 3.0,
        device=device, dtype=torch.float64,
        gradient_class=s.interface.gradient_class,
        input_domain_source=pub.get("domain_source", "assumed: ±3 (declare attacker.input_domain)"),
    )
    record: dict[str, Any] = {
        "endpoint": {"url": where, "protocol": ep.protocol, "max_batch": ep.max_batch,
                     "verify_tls": ep.verify_tls, "auth": bool(backend.auth or token),
                     "auth_type": ep.auth.type if ep.auth else ("bearer" if token else None),
                     "probe_auth": bool(backend.probe_auth), "headers": sorted(ep.headers or {}),
                     **found, "stats": backend.stats.__dict__},
        "notes": [f"remote endpoint {where}: defenses are applied by the endpoint, not by leakmeter"],
        "device": str(device), "dtype": "float64",
    }
    if not ep.verify_tls:
        record["notes"].append("TLS verification is OFF for this endpoint")
    scaling = scaling_mismatch(backend.declared_standardize, s.victim.data.standardize)
    if scaling:
        record["notes"].append(scaling)
        record["input_scaling_warning"] = scaling
    utility: dict[str, float] = {}
    truth: Any = Truth(None, None, None, None)
    if s.victim.model.arch == "file":
        truth, utility = _file_truth(s)
        record["notes"].append("truth: the named model file (full scoring)")
        from victims.models.facts import model_facts

        info.declared, info.declared_as = model_facts(truth.model)
    else:
        held = pub["data"].x_test if pub["data"] is not None and len(pub["data"].x_test) else None
        truth = BlackBoxTruth(None, None, None, None, endpoint=backend, info=info, seed=s.seed,
                              x_heldout=None if held is None else torch.as_tensor(
                                  held.reshape(len(held), -1), dtype=torch.float64))
        record["notes"].append("truth unavailable: black-box scoring only")
    return Victim(backend, truth, info, utility, record)


def _when_ready(backend: RemoteBackend, check: Any, clock: Any = time.monotonic,
                sleep: Any = time.sleep) -> Any:
    """`check()` (the start-up requests), again every few seconds while the model is loading
    (NotReady), for at most `ready_timeout_s`; a stage line says it waits. NotReady (exit 2)
    after that, saying how long it waited."""
    from victims.http.discover import NotReady

    wait = float(getattr(backend.spec, "ready_timeout_s", 0) or 0)
    until, said = clock() + wait, False
    while True:
        try:
            return check()
        except NotReady as exc:
            left = until - clock()
            if left <= 0:
                tail = (f" (waited {wait:g} s: victim.endpoint.ready_timeout_s)" if wait else
                        " (a model still loading: victim.endpoint.ready_timeout_s waits for it)")
                raise NotReady(f"{exc}{tail}") from None
            if not said:
                print(f"leakmeter: the model at {backend.where} is not ready yet; waiting up to {wait:g} s "
                      "(victim.endpoint.ready_timeout_s)", file=sys.stderr, flush=True)
                said = True
            sleep(min(READY_POLL_S, left))


READY_POLL_S = 2.0


def scaling_mismatch(declared: str | None, ours: str | None) -> str | None:
    """One line when a leakmeter server declared (X-Leakmeter-Standardize) an input scaling other
    than the scanning scenario's `victim.data.standardize`; None when it agrees or said nothing."""
    if not declared or declared == ours:
        return None
    return (f"input scaling: the leakmeter server says its model takes inputs with standardize: "
            f"{declared}, this scenario sends them with standardize: {ours} (answers to mis-scaled "
            f"inputs say little; set victim.data.standardize: {declared})")


def _probe(backend: RemoteBackend, s: Any, pub: dict[str, Any]) -> dict[str, Any]:
    """Ask the endpoint once (and once more for explanations) to check it is usable; returns
    task, n_classes, n_outputs. BadInput (exit 2) naming the endpoint when it is not."""
    d = pub["dim"]
    x = torch.zeros(1, d, dtype=torch.float64)
    if pub["pool"] is not None and len(pub["pool"]):
        x = torch.as_tensor(pub["pool"][:1], dtype=torch.float64)
    kind = s.interface.output
    try:
        backend.bill(len(x))  # the check is charged before it is sent, like every query
        raw = backend._ask(x, None)
        task, n_classes, n_out = pub["task"], pub["n_classes"], pub["n_outputs"]
        cols = raw.reshape(1, -1).shape[1]
        if n_classes is None:  # no dataset named: learn the class count from the answer
            if kind == "label":
                n_out = n_out or backend.spec.n_outputs
                if not n_out:
                    raise BadInput("victim.endpoint.n_outputs: required for a label-only endpoint "
                                   "when victim.data names no dataset (the number of classes)")
            else:
                n_out = n_out or cols
            if task is None:
                task = "binary" if (n_out == 2 and kind == "probabilities") or (
                    n_out == 1 and kind != "logits") else ("regression" if n_out == 1 else "multiclass")
            n_classes = 0 if task == "regression" else (2 if task == "binary" else n_out)
            if task == "binary":
                n_out = 1
        backend.task, backend.n_classes, backend.n_outputs = task, n_classes, n_out
        backend._shape_predictions(raw, kind)
        if s.interface.kind in ("gradient", "smoothgrad"):
            backend.bill(len(x))
            backend.explain(x, s.interface.kind, torch.Generator())
    except BudgetExhausted:
        raise BadInput(f"victim.endpoint.max_rows: {backend.startup_budget} is too small for the start-up "
                       f"check of the endpoint {backend.where} and its retries "
                       f"({backend.unbilled} rows sent)") from None
    except EndpointFaults as exc:  # 503s, connection refused: a model loading or a server restarting
        from victims.http.discover import NotReady

        raise NotReady(f"victim.endpoint: {backend.scrub(str(exc))}") from None
    except (EndpointError, InterfaceError) as exc:
        raise BadInput(f"victim.endpoint: {backend.scrub(str(exc))}") from None
    return {"task": task, "n_classes": n_classes, "n_outputs": n_out}


def _file_truth(s: Any) -> tuple[Any, dict[str, float]]:
    """The truth (and utility) of the named model file, built locally without retraining."""
    local_s = s.model_copy(deep=True)
    local_s.victim.endpoint = None
    local = build_local_victim(local_s)
    return local.truth, local.utility
