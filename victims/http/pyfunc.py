"""A victim packaged as an MLflow pyfunc model, so `mlflow models serve --env-manager local`
serves it with the same answers (and server-side output defenses) as `leakmeter serve`.

    leakmeter serve SCENARIO --export-mlflow DIR
    mlflow models serve -m DIR --env-manager local -p 5001

The model takes a float64 tensor (n, d); explanations are asked with the protocol's params:
{"inputs": ..., "params": {"explain": "gradient"}}. A per-key query budget needs the request's
headers, which a pyfunc never sees: only `leakmeter serve` enforces it.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import mlflow.pyfunc
import numpy as np


class VictimPyfunc(mlflow.pyfunc.PythonModel):
    """Loads the saved victim module and answers like victims/http/served.py's ServedModel."""

    def load_context(self, context: Any) -> None:
        import torch

        from victims.http.served import ServedDefenses, ServedModel
        from victims.local import LocalBackend

        meta = json.loads(Path(context.artifacts["meta"]).read_text())
        iface = _namespace(meta["interface"])
        path = context.artifacts["model"]
        model = torch.jit.load(path, map_location="cpu")  # TorchScript: nothing is unpickled
        model.eval()
        dtype = getattr(torch, meta["dtype"])
        backend = LocalBackend(model, meta["task"], meta["n_classes"], iface,
                               torch.device("cpu"), dtype)
        # the noise secret is drawn when the model loads (victims/http/served.py), never stored
        self.served = ServedModel(backend, meta["served"], ServedDefenses(**meta["defenses"]))

    def predict(self, context, model_input, params=None):  # noqa: ANN001 - MLflow's signature
        from mlflow.exceptions import MlflowException
        from mlflow.protos.databricks_pb2 import INVALID_PARAMETER_VALUE

        from victims.http.served import RequestError

        explain = (params or {}).get("explain")
        try:
            return self.served.answer(np.asarray(model_input, dtype=np.float64), explain)
        except RequestError as exc:
            raise MlflowException(exc.message, error_code=INVALID_PARAMETER_VALUE) from None


def export_pyfunc(s: Any, path: str | Path) -> Path:
    """Build the scenario's victim and save it as an MLflow pyfunc model at `path`; returns it."""
    import tempfile

    import torch
    from mlflow.models.signature import ModelSignature
    from mlflow.types.schema import ParamSchema, ParamSpec, Schema, TensorSpec

    from victims.errors import BadInput
    from victims.http.served import build_served

    out = Path(path)
    if out.exists() and any(out.iterdir()):
        raise BadInput(f"--export-mlflow: {out} exists and is not empty")
    served, victim = build_served(s)
    if getattr(victim.truth.model, "predictions_only", False):
        raise BadInput("--export-mlflow: an ONNX victim is served by `leakmeter serve` (the pyfunc "
                       "export saves torch models); allowed: a state_dict or safetensors model")
    model = _scripted(victim.truth.model, victim.info)
    with tempfile.TemporaryDirectory() as tmp:
        mfile = Path(tmp) / "victim.pt"
        torch.jit.save(model, str(mfile))
        # plain data only: the serving process needs no scenario parser
        meta = {"torchscript": True, "task": victim.info.task, "n_classes": victim.info.n_classes,
                "dtype": str(victim.info.dtype).removeprefix("torch."), "served": served.meta,
                "interface": s.interface.model_dump(mode="json"),
                "defenses": dataclasses.asdict(served.defenses)}
        (Path(tmp) / "meta.json").write_text(json.dumps(meta))
        signature = ModelSignature(
            inputs=Schema([TensorSpec(np.dtype(np.float64), (-1, victim.info.dim))]),
            params=ParamSchema([ParamSpec("explain", "string", "none")]),
        )
        mlflow.pyfunc.save_model(
            str(out), python_model=VictimPyfunc(), signature=signature,
            pip_requirements=["leakmeter"],  # skips MLflow's slow requirement inference
            artifacts={"model": str(mfile), "meta": str(Path(tmp) / "meta.json")},
        )
    return out


def _namespace(d: Any) -> Any:
    """A nested dict as attribute access (what LocalBackend reads of an interface spec)."""
    from types import SimpleNamespace

    if isinstance(d, dict):
        return SimpleNamespace(**{k: _namespace(v) for k, v in d.items()})
    return d


def _scripted(model: Any, info: Any) -> Any:
    """The model as TorchScript (scripted, else traced: our models have no data-dependent
    control flow), so the served copy loads without unpickling anything."""
    import torch

    if isinstance(model, torch.jit.ScriptModule):
        return model
    try:
        return torch.jit.script(model)
    except Exception:  # noqa: BLE001 - some modules only trace
        example = torch.zeros(2, info.dim, dtype=info.dtype, device=info.device)
        return torch.jit.trace(model, example)
