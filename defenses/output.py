"""Output defenses applied to what an API returns: Gaussian noise, rounding, top-k
(probabilities outside the top k zeroed), and Gaussian noise on explanations.

Label-only is not a transform here: it is the interface's `output: label`.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class OutputDefenses:
    """The scenario's output defenses; `apply_predict` / `apply_explain` return new tensors."""

    noise_sigma: float = 0.0
    decimals: int | None = None
    top_k: int | None = None
    explain_sigma: float = 0.0

    @classmethod
    def from_spec(cls, d) -> OutputDefenses:
        return cls(
            noise_sigma=d.output_noise.sigma if d.output_noise else 0.0,
            decimals=d.rounding.decimals if d.rounding else None,
            top_k=d.top_k,
            explain_sigma=d.explanation_noise.sigma if d.explanation_noise else 0.0,
        )

    @property
    def active(self) -> list[str]:
        out = []
        if self.noise_sigma:
            out.append(f"output_noise(sigma={self.noise_sigma})")
        if self.decimals is not None:
            out.append(f"rounding(decimals={self.decimals})")
        if self.top_k:
            out.append(f"top_k({self.top_k})")
        if self.explain_sigma:
            out.append(f"explanation_noise(sigma={self.explain_sigma})")
        return out

    def apply_predict(self, y: torch.Tensor, kind: str, gen: torch.Generator) -> torch.Tensor:
        """Defend a batch of predictions of `kind` (label | probabilities | logits)."""
        if kind == "label":
            return y
        if self.top_k and kind == "probabilities" and y.dim() == 2 and y.shape[1] > self.top_k:
            kth = torch.topk(y, self.top_k, dim=1).values[:, -1:]
            y = torch.where(y >= kth, y, torch.zeros_like(y))
        if self.noise_sigma:
            y = y + self.noise_sigma * _randn(y, gen)
        if self.decimals is not None:
            y = torch.round(y, decimals=self.decimals)
        return y

    def apply_explain(self, g: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
        if self.explain_sigma:
            g = g + self.explain_sigma * _randn(g, gen)
        return g


def _randn(like: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    return torch.randn(like.shape, generator=gen, dtype=like.dtype, device=gen.device).to(like.device)
