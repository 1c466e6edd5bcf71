"""Start-up reads of an endpoint before its first query: the model's metadata and readiness
(kserve-v2), its status (kserve-v1), and, for `protocol: auto`, which protocol answers.

`auto` probes in a fixed order with at most two GETs, never retried (then the found protocol's own
start-up requests), each charged as one row to the scan's cap (`victim.endpoint.max_rows`) before
it is sent:

1. `GET {url}` — an Open Inference Protocol metadata object (`inputs` / `outputs` / `platform`)
   is `kserve-v2`; a KServe V1 status (`name` and `ready`) or a TF Serving one
   (`model_version_status`) is `kserve-v1`. Not sent to a `/predictions/...` URL (a GET there runs
   TorchServe's handler) nor to an `.../invocations` URL (MLflow's scoring path takes POSTs only);
2. `GET {root}/ping` — TorchServe's `{"status": "Healthy"}` is `torchserve` (only for a
   `/predictions/MODEL` URL: TorchServe names the model in the path); any other 200 for an
   `.../invocations` URL is `mlflow` (whose `/invocations` the start-up check then asks).

The report's `victim.endpoint` says which protocol answered (`protocol`, with
`protocol_requested: auto`) and what the metadata said. Whatever does not fit the scenario is
`BadInput` naming the key (exit 2, before any attack runs).
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit, urlunsplit

from defenses.errors import BudgetExhausted
from victims.errors import BadInput
from victims.http.client import EndpointError, EndpointFaults, RemoteBackend
from victims.http.secrets import clip
from victims.http.wire import make_protocol
from victims.http.wire_base import path_suffix

V2_KEYS = ("input_name", "output_name", "datatype", "classification")  # keys only kserve-v2 reads
PROBE_ORDER = ("kserve-v2 metadata (GET url)", "kserve-v1 status (GET url)", "torchserve /ping",
               "mlflow /ping")


class NotReady(BadInput):
    """The endpoint is there but its model is not serving yet (503s, connection refused, a
    readiness check that says no): `victim.endpoint.ready_timeout_s` waits for it."""


def _root(url: str) -> str:
    p = urlsplit(url)
    return urlunsplit((p.scheme, p.netloc, "", "", ""))


def _try(backend: RemoteBackend, url: str, faults: list[bool] | None = None) -> tuple[Any, str]:
    """(the JSON answer, "") or (None, why it is not one); one GET, never retried. `faults` gets
    True when the GET met a transient fault (a model loading, a server restarting)."""
    try:
        return backend.get_json(url, retry=False), ""
    except EndpointError as exc:
        if faults is not None:
            faults.append(isinstance(exc, EndpointFaults))
        return None, clip(backend.scrub(str(exc)).replace(backend.where + ": ", ""), 120)


def _is_v2(meta: Any) -> bool:
    return isinstance(meta, dict) and any(k in meta for k in ("inputs", "outputs", "platform"))


def _is_v1(meta: Any) -> bool:
    return isinstance(meta, dict) and (("ready" in meta and "name" in meta) or "model_version_status" in meta)


def _v1_ready(meta: Any) -> bool:
    if "model_version_status" in meta:
        states = [v.get("state") for v in meta.get("model_version_status") or [] if isinstance(v, dict)]
        return "AVAILABLE" in states
    return meta.get("ready") in (True, "True", "true")


def detect(backend: RemoteBackend, spec: Any, token: str | None) -> tuple[str, Any]:
    """The protocol that answers at the endpoint (`auto`) and its GET {url} answer, if any."""
    tried: list[str] = []
    faults: list[bool] = []
    path = urlsplit(backend.protocol.url).path.rstrip("/")
    if "/predictions/" not in path and not path.endswith("/invocations"):  # a GET there runs a handler
        meta, why = _try(backend, backend.protocol.url, faults)
        if _is_v2(meta):
            return "kserve-v2", meta
        if _is_v1(meta):
            return "kserve-v1", meta
        tried.append(f"GET url: {why or 'neither V2 metadata nor a V1 status'}")
    ping, why = _try(backend, _root(backend.protocol.url) + "/ping", faults)
    if isinstance(ping, dict) and "status" in ping and "/predictions/" in urlsplit(backend.protocol.url).path:
        return "torchserve", None
    if why == "" and urlsplit(backend.protocol.url).path.rstrip("/").endswith("/invocations"):
        return "mlflow", None
    tried.append(f"GET /ping: {why or 'answered, but the url is no MLflow /invocations'}")
    raise (NotReady if any(faults) else BadInput)(
        f"victim.endpoint.protocol: auto found no protocol at {backend.where} "
                   f"({'; '.join(tried)}); name it (mlflow, json, kserve-v2, kserve-v1, torchserve)")


def startup(backend: RemoteBackend, s: Any, pub: dict[str, Any], token: str | None) -> dict[str, Any]:
    """Read what the protocol needs before the first query; returns the report's additions.
    BadInput (exit 2) when the endpoint or its metadata does not fit the scenario."""
    spec = s.victim.endpoint
    found: dict[str, Any] = {}
    try:
        meta = None
        if spec.protocol == "auto":
            name, meta = detect(backend, spec, token)
            unused = [k for k in V2_KEYS if getattr(spec, k) is not None]
            if name != "kserve-v2" and unused:
                raise BadInput(f"victim.endpoint.{unused[0]}: only the kserve-v2 protocol reads it, and "
                               f"protocol: auto found {name} at {backend.where}")
            proto_spec = spec.model_copy(update={"protocol": name})
            backend.protocol = make_protocol(proto_spec, token).bind(backend.protocol.url)
            found.update(protocol=name, protocol_requested="auto")
        name = backend.protocol.name
        if name == "kserve-v2":
            _v2(backend, s, pub, meta, found)
        elif name == "kserve-v1":
            meta = meta if meta is not None else backend.get_json(backend.protocol.url)
            if not _is_v1(meta):
                raise BadInput(f"victim.endpoint: GET {backend.where} is no KServe V1 / TF Serving model "
                               "status (is the url the model's, .../v1/models/NAME?)")
            if not _v1_ready(meta):
                raise NotReady(f"victim.endpoint: the model at {backend.where} is not ready (its status: "
                               f"{clip(str(meta), 120)})")
    except BudgetExhausted:
        raise BadInput(f"victim.endpoint.max_rows: {backend.startup_budget} is too small for the start-up "
                       f"requests to {backend.where} ({backend.unbilled} sent)") from None
    except EndpointError as exc:
        raise (NotReady if isinstance(exc, EndpointFaults) else BadInput)(
            f"victim.endpoint: {backend.scrub(str(exc))}") from None
    return found


def _v2(backend: RemoteBackend, s: Any, pub: dict[str, Any], meta: Any, found: dict[str, Any]) -> None:
    """Metadata and readiness of an Open Inference Protocol model."""
    from victims.http.wire_v2 import MetadataError

    proto = backend.protocol
    url = proto.url.rstrip("/")
    if meta is None:
        meta = backend.get_json(url)
    proto.as_label = s.interface.output == "label"
    try:
        found["metadata"] = proto.read_metadata(meta, pub["dim"], s.victim.endpoint)
        proto.n_cols = proto.n_cols or (pub.get("n_classes") or None) or s.victim.endpoint.n_outputs
        if s.interface.output != "label":
            if pub.get("n_classes") is not None:
                want = {1, 2} if pub["task"] == "binary" else {pub["n_outputs"] if pub["task"] == "regression"
                                                               else pub["n_classes"]}
            else:
                want = {s.victim.endpoint.n_outputs} if s.victim.endpoint.n_outputs else set()
            proto.check_columns(want)
    except MetadataError as exc:
        raise BadInput(f"{exc} (metadata of {backend.where})") from None
    try:
        ready = backend.get_json(path_suffix(proto.url, "/ready"))  # a query string stays last
    except EndpointError as exc:
        raise NotReady(f"victim.endpoint: the model at {backend.where} is not ready "
                       f"({backend.scrub(str(exc)).replace(backend.where + ': ', '')})") from None
    if isinstance(ready, dict) and ready.get("ready") is False:
        raise NotReady(f"victim.endpoint: the model at {backend.where} is not ready (GET .../ready)")
