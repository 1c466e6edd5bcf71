"""A victim as a served model: validated inputs in, defended answers out (numpy).

`ServedModel` is what both `leakmeter serve` (victims/http/server.py) and the MLflow pyfunc
(victims/http/pyfunc.py) answer with, so the two endpoints behave the same. Defenses are applied
server side: top-k, output noise, rounding, explanation noise; `output: label` is label-only.

Noise is keyed by the query: each row's noise is a hash of its bytes and a server secret, so the
same query always gets the same answer and averaging repeated queries removes nothing. The secret
(`salt`) is drawn from the operating system's randomness when the server starts — never from the
scenario's seed, which is public (shipped scenarios use 0; it is in every report) and would let
anyone compute the noise and subtract it exactly. A restarted server draws a new secret. (The
attack-side simulation of output noise, harness/core/oracle.py, keeps its own seeded stream: there the
attacker never sees the generator.)
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from victims.http.jsonlimits import JSONNumberTooLarge, JSONTooLarge, loads
from victims.local import LocalBackend

GOLDEN = np.uint64(0x9E3779B97F4A7C15)
MAX_ROWS = 100_000  # rows per request the server accepts
MAX_CONTAINERS = 2 * MAX_ROWS + 1024  # arrays/objects a request may hold (a row and its wrappers)


class RequestError(Exception):
    """A request the endpoint refuses: HTTP status, MLflow-style error code, message."""

    def __init__(self, status: int, code: str, message: str):
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message


def parse_json(raw: bytes) -> Any:
    """A request body's JSON; RequestError(400) when it is not UTF-8, not JSON or nested too deeply."""
    try:
        return loads(raw.decode("utf-8"), MAX_CONTAINERS)
    except UnicodeDecodeError:
        raise RequestError(400, "MALFORMED_REQUEST", "the body is not UTF-8") from None
    except (JSONTooLarge, JSONNumberTooLarge) as exc:
        raise RequestError(400, "MALFORMED_REQUEST", f"the JSON holds {exc}") from None
    except RecursionError:
        raise RequestError(400, "MALFORMED_REQUEST", "the JSON is nested too deeply") from None
    except ValueError:
        raise RequestError(400, "MALFORMED_REQUEST", "the body is not valid JSON") from None


def server_secret() -> int:
    """A fresh 62-bit secret from the OS's randomness (room for the +1 / +2 stream offsets)."""
    return secrets.randbits(62)


def _mix(z: np.ndarray) -> np.ndarray:
    """splitmix64 finaliser on a uint64 array (wrapping arithmetic)."""
    with np.errstate(over="ignore"):
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


def canonical(x: np.ndarray) -> np.ndarray:
    """The values a row's noise is keyed by: each input rounded to float32 (what a float32 victim
    sees; JSON spellings of one value — `1`, `1.0`, `1e0`, `0.1` and its next float64 — give one
    key) and -0.0 made 0.0. Keyed by raw bytes, `-0.0` for `0.0` drew fresh noise: 200 copies of
    a row averaged σ 0.05 down to 0.004."""
    with np.errstate(over="ignore"):
        return np.asarray(x, dtype=np.float64).astype(np.float32).astype(np.float64) + 0.0


def row_keys(x: np.ndarray, salt: int) -> np.ndarray:
    """A 64-bit key per row of a float64 batch (N, d): a hash of its canonical values' bytes
    (`canonical`) and `salt`."""
    bits = np.ascontiguousarray(canonical(x), dtype=np.float64).view(np.uint64)
    with np.errstate(over="ignore"):
        cols = _mix(np.arange(1, x.shape[1] + 1, dtype=np.uint64) * GOLDEN)
        h = _mix(bits ^ cols[None, :]).sum(axis=1, dtype=np.uint64)
        return _mix(h ^ _mix(np.array([salt], dtype=np.uint64) + GOLDEN))


def keyed_normal(x: np.ndarray, cols: int, salt: int) -> np.ndarray:
    """Standard normal noise (N, cols), a deterministic function of each row of x."""
    k = row_keys(x, salt)
    with np.errstate(over="ignore"):
        idx = np.arange(1, 2 * cols + 1, dtype=np.uint64) * GOLDEN
        u = _mix(k[:, None] ^ idx[None, :])
    u = ((u >> np.uint64(11)).astype(np.float64) + 0.5) * 2.0**-53
    u1, u2 = u[:, :cols], u[:, cols:]
    return np.sqrt(-2.0 * np.log(u1)) * np.cos(2.0 * np.pi * u2)


@dataclass
class ServedDefenses:
    """Server-side defenses of a served victim (plain numbers, from the scenario)."""

    noise_sigma: float = 0.0
    decimals: int | None = None
    top_k: int | None = None
    explain_sigma: float = 0.0

    @classmethod
    def from_spec(cls, d: Any) -> ServedDefenses:
        return cls(
            noise_sigma=d.output_noise.sigma if d.output_noise else 0.0,
            decimals=d.rounding.decimals if d.rounding else None,
            top_k=d.top_k,
            explain_sigma=d.explanation_noise.sigma if d.explanation_noise else 0.0,
        )

    def active(self) -> list[str]:
        out = [f"top_k({self.top_k})"] if self.top_k else []
        out += [f"output_noise(sigma={self.noise_sigma})"] if self.noise_sigma else []
        out += [f"rounding(decimals={self.decimals})"] if self.decimals is not None else []
        out += [f"explanation_noise(sigma={self.explain_sigma})"] if self.explain_sigma else []
        return out


@dataclass
class ServedModel:
    """Answers `predict` and `explain` requests for one victim, defenses applied."""

    backend: LocalBackend
    meta: dict[str, Any]  # scenario, input_dim, n_outputs, n_classes, task, interface, output
    defenses: ServedDefenses = field(default_factory=ServedDefenses)
    salt: int = field(default_factory=lambda: server_secret(), repr=False)  # keys the noise

    @property
    def explain_kinds(self) -> tuple[str, ...]:
        kind = self.meta["interface"]
        return ("gradient",) if kind == "gradient" else ("smoothgrad",) if kind == "smoothgrad" else ()

    def parse_inputs(self, inputs: Any) -> np.ndarray:
        """The request's inputs as a float64 (N, d) array; RequestError when malformed."""
        d = self.meta["input_dim"]
        try:
            x = np.asarray(inputs, dtype=np.float64)
        except (TypeError, ValueError, OverflowError):  # OverflowError: an int beyond float64
            raise RequestError(400, "BAD_REQUEST", "inputs must be a list of numeric rows") from None
        if x.ndim == 1 and x.size == d:
            x = x[None, :]
        if x.ndim != 2 or x.shape[1] != d:
            raise RequestError(400, "BAD_REQUEST",
                               f"inputs must have shape (n, {d}), got {list(x.shape)}")
        if len(x) > MAX_ROWS:
            raise RequestError(413, "BAD_REQUEST", f"at most {MAX_ROWS} rows per request")
        if not np.isfinite(x).all():
            raise RequestError(400, "BAD_REQUEST", "inputs must be finite numbers")
        return x

    def answer(self, inputs: Any, explain: str | None = None) -> np.ndarray:
        """Defended predictions (labels (N,), probabilities/logits (N, K)) or explanations (N, d)."""
        x = self.parse_inputs(inputs)
        if explain in (None, "", "none"):
            return self.predict(x)
        if explain not in self.explain_kinds:
            offered = ", ".join(self.explain_kinds) or "none (prediction only)"
            raise RequestError(400, "INVALID_PARAMETER_VALUE",
                               f"params.explain: {explain!r} is not offered; offered: {offered}")
        return self.explain(x, explain)

    def predict(self, x: np.ndarray) -> np.ndarray:
        kind = self.meta["output"]
        xt = torch.as_tensor(x)
        y = self.backend.predict(xt, kind).detach().cpu().numpy()
        if kind == "label":
            return y.astype(np.int64)
        y = y.astype(np.float64).reshape(len(x), -1)
        d = self.defenses
        if d.top_k and kind == "probabilities" and y.shape[1] > d.top_k:
            kth = -np.sort(-y, axis=1)[:, d.top_k - 1 : d.top_k]
            y = np.where(y >= kth, y, 0.0)
        if d.noise_sigma:
            y = y + d.noise_sigma * keyed_normal(x, y.shape[1], self.salt)
        if d.decimals is not None:
            y = np.round(y, d.decimals)
        return y * self._target[1] + self._target[0]

    @property
    def _target(self) -> tuple[float, float]:
        """(mean, std) that turn the model's outputs into the target's own units: a regression
        model leakmeter trained on a z-scored target answers in the target's units, as a deployed
        regressor does (its defenses act on the model's outputs, as in the scenario's own run)."""
        t = self.meta.get("target") or {}
        return float(t.get("mean", 0.0)), float(t.get("std", 1.0))

    def explain(self, x: np.ndarray, kind: str) -> np.ndarray:
        key = row_keys(x, self.salt + 1).sum(dtype=np.uint64) >> np.uint64(1)
        gen = torch.Generator(device="cpu").manual_seed(int(key))
        g = self.backend.explain(torch.as_tensor(x), kind, gen).detach().cpu().numpy().astype(np.float64)
        if self.defenses.explain_sigma:
            g = g + self.defenses.explain_sigma * keyed_normal(x, g.shape[1], self.salt + 2)
        return g * self._target[1]


def served_from_victim(s: Any, victim: Any) -> ServedModel:
    """A ServedModel for a locally built victim of scenario `s`."""
    info = victim.info
    meta = {
        "scenario": s.name, "input_dim": info.dim, "n_outputs": info.n_outputs,
        "n_classes": info.n_classes, "task": info.task, "interface": s.interface.kind,
        "output": s.interface.output,
        # the scaling the served model expects of its inputs (it trained on them so): clients
        # send z-scored rows for "standard", rows as the data has them for "none"
        "standardize": s.victim.data.standardize,
    }
    target = ((victim.record.get("data") or {}).get("normalisation") or {}).get("target")
    if info.task == "regression" and target:
        meta["target"] = {"mean": float(target["mean"]), "std": float(target["std"])}
    return ServedModel(victim.backend, meta, ServedDefenses.from_spec(s.defenses))  # a fresh secret


def build_served(s: Any) -> tuple[ServedModel, Any]:
    """Build the scenario's victim locally (ignoring `victim.endpoint`) and wrap it for serving;
    returns (served, victim). BadInput for a white-box interface."""
    from victims.errors import BadInput
    from victims.local import build_local_victim

    if s.interface.kind == "whitebox":
        raise BadInput("interface.kind: whitebox is a weight release, not an API; serve offers "
                       "prediction, gradient or smoothgrad")
    local = s.model_copy(deep=True)
    local.victim.endpoint = None
    victim = build_local_victim(local)
    return served_from_victim(s, victim), victim
