"""Where a run's work goes (`device: auto | cpu | cuda`), and how a victim answers on its device.

`device: cpu` puts everything on the CPU, `device: cuda` everything on the GPU (bad input
without one). `device: auto` asks per part of the run (`DevicePolicy.place`): a part goes to
CUDA only when a GPU is present, its estimated work (floating-point operations) reaches
`CUDA_MIN_FLOP[part]` and, where it is a loop of optimizer steps, one step's work reaches
`CUDA_MIN_STEP_FLOP` (a smaller step is bound by kernel launches on a GPU). Everything smaller —
the per-query work of most attacks, a small victim and what its answers feed — stays on the CPU,
where the shipped models ran faster (the H100 figures in ../shared/GPU.md: whole runs 1.3× slower
on CUDA, the GPU idle on per-query work; only batched training of many models — kkt's and reconn's
shadows — ran 2.4–3.6× faster). The thresholds are set to a few seconds of one CPU core's
work plus CUDA's start-up; they are estimates, not measurements, until a GPU run of
benchmarks/gpu_recipe.sh times both sides (benchmarks/gpu.py).
Every placement is recorded; the report's `devices` entry lists which part ran where.

Answers that do not depend on the batch (issue 34): a matmul kernel's summation order depends on
the shape of the whole batch (on the CPU a one-row product takes another path than a 64-row one;
cuBLAS picks its algorithm by shape), so a float32 answer to a query could change in its last
bits with what else is in its batch — and a line search reading kinks then sees a bent function.
A deployed victim therefore answers in blocks of exactly `answer_rows(device)` rows (the last
block padded with zeros, its rows discarded): every row is computed by the same kernel with the
same order whatever else is asked. On CUDA `strict_numerics()` also turns TF32 off (matmuls and
cuDNN), asks for the highest float32 matmul precision and deterministic cuDNN algorithms.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from victims.errors import BadInput

PARTS = ("victim", "reference_models", "shadows", "surrogate", "reconstructor")
# estimated flop of one part's work from which `auto` sends it to CUDA
CUDA_MIN_FLOP = {
    "victim": 5e10,            # training (3 × forward × points × epochs) of the deployed model
    "reference_models": 3e10,  # K stacked models' training (LiRA / RMIA / dp_audit)
    "shadows": 1e10,           # shadow models (kkt, reconn: asked for 64 at a time; GPU.md: 3.6×)
    "surrogate": 3e10,         # the surrogate's training on its queries
    "reconstructor": 3e10,     # reconn's reconstructor network
}
# flop of one optimizer step below which a GPU step costs more than a CPU one (~1 ms of one core:
# about what a small model's ~20 kernel launches and an optimizer step cost on a GPU)
CUDA_MIN_STEP_FLOP = 2e7
# rows per forward pass of a deployed victim's answers (a block is always this long)
ANSWER_ROWS = {"cpu": 32, "cuda": 1024}

_CURRENT: list[DevicePolicy] = []


def cuda_present() -> bool:
    return torch.cuda.is_available()


@dataclass
class DevicePolicy:
    """The run's device request and where each part went. `cuda`: the GPU `auto` may use (None:
    none present); a test may pass a fake one to check the choices (nothing is moved by `place`)."""

    requested: str = "auto"
    cuda: torch.device | None = None
    parts: dict[str, dict[str, Any]] = field(default_factory=dict)

    @classmethod
    def for_request(cls, requested: str) -> DevicePolicy:
        """The policy of `device: <requested>` on this machine (BadInput: cuda without a GPU)."""
        if requested == "cuda" and not cuda_present():
            raise BadInput("device: cuda requested but no CUDA device is available (use auto or cpu)")
        if requested not in ("auto", "cpu", "cuda"):
            return cls(requested, torch.device(requested))  # e.g. cuda:1, mps: everything there
        return cls(requested, torch.device("cuda") if cuda_present() else None)

    def place(self, part: str, flop: float, note: str = "", step_flop: float | None = None) -> torch.device:
        """The device for one part of the run with this much estimated work, `step_flop` per
        optimizer step where it is trained (recorded)."""
        if part not in CUDA_MIN_FLOP:
            raise ValueError(f"unknown part {part!r} (known: {', '.join(PARTS)})")
        if self.requested == "cpu" or self.cuda is None:
            dev, why = torch.device("cpu"), ("device: cpu" if self.requested == "cpu" else "no GPU present")
        elif self.requested != "auto":
            dev, why = self.cuda, f"device: {self.requested}"
        elif step_flop is not None and step_flop < CUDA_MIN_STEP_FLOP:
            dev, why = torch.device("cpu"), (f"~{step_flop:.2g} flop per step < {CUDA_MIN_STEP_FLOP:.2g}: "
                                             "launch-bound on a GPU")
        elif flop >= CUDA_MIN_FLOP[part]:
            dev, why = self.cuda, f"~{flop:.2g} flop ≥ {CUDA_MIN_FLOP[part]:.2g}: pays on the GPU"
        else:
            dev, why = torch.device("cpu"), f"~{flop:.2g} flop < {CUDA_MIN_FLOP[part]:.2g}: faster on the CPU"
        if dev.type == "cuda":
            strict_numerics()
        self.record(part, dev, why + (f" ({note})" if note else ""))
        return dev

    def record(self, part: str, dev: Any, why: str) -> None:
        """Note where a part ran (several placements of one part: each device once)."""
        entry = self.parts.setdefault(part, {"device": str(dev), "why": why, "times": 0})
        if str(dev) not in entry["device"].split(" and "):
            entry["device"] += f" and {dev}"
            entry["why"] += f"; {why}"
        entry["times"] += 1

    def report(self) -> dict[str, Any]:
        """The report's `devices` entry."""
        return {"requested": self.requested, "cuda_available": self.cuda is not None,
                "parts": {k: dict(v) for k, v in self.parts.items()},
                "cuda_min_flop": dict(CUDA_MIN_FLOP) if self.requested == "auto" else {},
                "cuda_min_step_flop": CUDA_MIN_STEP_FLOP if self.requested == "auto" else None}


def activate(requested: str) -> DevicePolicy:
    """Start a run's policy (the one `current()` returns until the next activation)."""
    policy = DevicePolicy.for_request(requested)
    _CURRENT[:] = [policy]
    return policy


def current(requested: str | None = None) -> DevicePolicy:
    """The active run's policy; with `requested`, a new one when none is active or the active one
    asked for another device (a victim built outside a run)."""
    if not _CURRENT or (requested is not None and _CURRENT[0].requested != requested):
        return activate(requested or "auto")
    return _CURRENT[0]


def strict_numerics() -> None:
    """CUDA answers in full float32 precision and with deterministic kernels: no TF32 in matmuls
    or convolutions, the highest float32 matmul precision, deterministic cuDNN, no autotuning
    (which picks kernels by timing, differently from run to run)."""
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False
    torch.set_float32_matmul_precision("highest")


def answer_rows(device: Any) -> int:
    """Rows per forward pass of a deployed victim on this device (see the module docstring)."""
    return ANSWER_ROWS.get(torch.device(device).type, ANSWER_ROWS["cuda"])


def forward_flop(model: torch.nn.Module, x1: torch.Tensor) -> float:
    """Floating-point operations of one forward pass of `model` on the one-row batch x1: its
    Linear and Conv layers' multiply-adds (forward hooks; torch's own flop counter costs seconds
    to import), or 2 × parameters when the model has none (a TorchScript or ONNX file)."""
    total = [0.0]

    def hook(mod, inputs, out):
        if isinstance(mod, torch.nn.Linear):
            total[0] += 2.0 * mod.in_features * out.numel()
        else:
            k = mod.weight[0].numel()  # in_channels / groups × kernel
            total[0] += 2.0 * k * out.numel()

    kinds = (torch.nn.Linear, torch.nn.Conv1d, torch.nn.Conv2d, torch.nn.Conv3d)
    handles = [m.register_forward_hook(hook) for m in model.modules() if isinstance(m, kinds)]
    try:
        with torch.no_grad():
            model(x1)
    except Exception:  # noqa: BLE001 - an estimate: fall back to the parameter count
        total[0] = 0.0
    finally:
        for h in handles:
            h.remove()
    return total[0] or 2.0 * sum(p.numel() for p in model.parameters())
