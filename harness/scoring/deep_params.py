"""Parameter error of an extracted deep ReLU network against the victim, after the symmetries
that leave the function unchanged: a permutation of each hidden layer's neurons and a positive
scale per neuron (Carlini, Jagielski, Mironov 2020, Sec. 2: a network is only defined up to
them).

Both networks are put in one normal form, layer by layer: every hidden neuron's incoming row and
bias scaled to unit norm, the scale pushed into the next layer's column. Then layer 1's neurons
are matched (nearest normalised row), the next layer's columns permuted the same way, and so on
up to the output layer. Metrics:
- units_true / units_matched: hidden neurons of the victim with some outgoing weight that are
  active on some scorer input, and those whose normalised row (with bias) lies within 1e-4 of
  the matched extracted row; units_dead: neurons active on none of the scorer's inputs;
- param_error: the largest distance of a true neuron's normalised row to its match, over every
  hidden layer, and the output layer's largest difference relative to its largest weight;
- depth_true / depth_found: hidden layers of each (param_error is infinite when they differ).
Extra extracted neurons are not charged here (the functional metrics see them), and skip weights
left where a layer's signs stayed open are not compared.
"""

from __future__ import annotations

import torch
from torch import nn

TOL = 1e-4


def _leaves(model) -> list[tuple[str, nn.Module]]:
    """(kind, module) of every leaf module; TorchScript modules by their original class name."""
    if not isinstance(model, nn.Module):
        return []
    mods = [m for m in model.modules() if not list(m.children())]
    return [(getattr(m, "original_name", type(m).__name__), m) for m in mods]


def mlp_layers(model) -> list[tuple[torch.Tensor, torch.Tensor]] | None:
    """(W, b) of every Linear of a Linear(-ReLU-Linear)* victim (eager or TorchScript), else None."""
    leaves = [(k, m) for k, m in _leaves(model) if k not in ("Flatten", "Identity", "Dropout")]
    kinds = [k for k, _ in leaves]
    if not kinds or kinds[0] != "Linear" or kinds[-1] != "Linear" or len(kinds) % 2 == 0:
        return None
    if any(k != ("Linear" if i % 2 == 0 else "ReLU") for i, k in enumerate(kinds)):
        return None
    out = []
    for _, lin in leaves[::2]:
        w = lin.weight.detach().double().cpu()
        b = lin.bias.detach().double().cpu() if lin.bias is not None else torch.zeros(len(w), dtype=w.dtype)
        out.append((w, b))
    return out


def normal_form(layers: list[tuple[torch.Tensor, torch.Tensor]]) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Unit-norm (row, bias) for every hidden neuron, scales pushed upward."""
    out, carry = [], None
    for i, (w, b) in enumerate(layers):
        w, b = w.clone(), b.clone()
        if carry is not None:
            w = w * carry[None, :]
        if i < len(layers) - 1:
            norm = torch.cat([w, b[:, None]], 1).norm(dim=1).clamp_min(1e-300)
            w, b, carry = w / norm[:, None], b / norm, norm
        out.append((w, b))
    return out


def active_units(layers: list[tuple[torch.Tensor, torch.Tensor]], x: torch.Tensor) -> list[torch.Tensor]:
    """Per hidden layer, which neurons are active on at least one of the inputs x."""
    out, h = [], x.double().cpu()
    for w, b in layers[:-1]:
        u = h @ w.T + b
        out.append((u > 0).any(0))
        h = torch.relu(u)
    return out


def score_layers(truth_model, found: list[tuple[torch.Tensor, torch.Tensor]],
                 centered: bool = False, probes: torch.Tensor | None = None) -> dict[str, float]:
    """The metrics of the module docstring ({} when the victim is not a plain ReLU MLP);
    `centered`: the API revealed only logits minus their mean (probabilities), so the output
    layers are compared centred over the outputs; `probes`: the scorer's inputs: a neuron
    active on none of them (dead there: no query could see it, no output depends on it) is not
    counted (`units_dead`)."""
    true = mlp_layers(truth_model)
    if true is None or not found:
        return {}
    awake = active_units(true, probes) if probes is not None else [torch.ones(len(b), dtype=torch.bool)
                                                                   for _, b in true[:-1]]
    if centered:
        true = true[:-1] + [tuple(a - a.mean(0, keepdim=True) for a in true[-1])]
        found = found[:-1] + [tuple(a - a.mean(0, keepdim=True) for a in found[-1])]
    t_nf, f_nf = normal_form(true), normal_form([(w.double().cpu(), b.double().cpu()) for w, b in found])
    out = {"depth_true": float(len(t_nf) - 1), "depth_found": float(len(f_nf) - 1),
           "units_dead": float(sum(int((~a).sum()) for a in awake))}
    live_total, matched_total, worst = 0, 0, 0.0
    if len(t_nf) != len(f_nf):
        out.update(units_true=float(sum(len(b) for _, b in true[:-1])), units_matched=0.0,
                   param_error=float("inf"))
        return out
    perm, seen = None, None  # found columns in the true neurons' order; true neurons compared
    for i, ((tw, tb), (fw, fb)) in enumerate(zip(t_nf, f_nf, strict=True)):
        if perm is not None:
            fw = fw[:, perm].clone()
            tw = tw.clone()
            fw[:, ~seen], tw[:, ~seen] = 0.0, 0.0  # a dead neuron's outgoing weights never act
        if i == len(t_nf) - 1:  # the output layer: rows are the outputs, in the same order
            if fw.shape != tw.shape:
                worst = float("inf")
                break
            scale = max(float(tw.abs().max()), float(tb.abs().max()), 1e-300)
            worst = max(worst, float((fw - tw).abs().max()) / scale, float((fb - tb).abs().max()) / scale)
            break
        nxt = true[i + 1][0]
        live = (nxt.abs().amax(dim=0) > 1e-12 * (nxt.abs().max() + 1e-300)) & awake[i]
        t_rows = torch.cat([tw, tb[:, None]], 1)
        f_rows = torch.cat([fw, fb[:, None]], 1)
        live_total += int(live.sum())
        if not len(f_rows):  # no neuron of this layer was extracted
            worst = float("inf")
            break
        dist = torch.cdist(t_rows, f_rows, compute_mode="donot_use_mm_for_euclid_dist")
        best, idx = dist.min(dim=1)
        matched_total += int(((best < TOL) & live).sum())
        worst = max(worst, float(best[live].max()) if bool(live.any()) else 0.0)
        # the next layer's found columns follow the matched order; two true neurons matched to
        # one found neuron leave one of them missing
        perm, seen = idx, live
        if len(set(idx[live].tolist())) < int(live.sum()):
            worst = float("inf")
    out.update(units_true=float(live_total), units_matched=float(matched_total), param_error=worst)
    return out
