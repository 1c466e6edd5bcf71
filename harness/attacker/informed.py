"""The informed adversary of paper 004 (Def. 1): what it knows, built on request.

An informed attack asks `ctx.knowledge.release(n_targets, candidates)`. The provider then
1. draws `n_targets · candidates` target points from the scenario's training split (a secret
   permutation) and removes them all: D₋ = the rest of the training split;
2. for each trial t picks one candidate z_t (secretly, uniformly when candidates > 1: Alg. 2)
   and trains a released model on D₋ ∪ {z_t} with the scenario's recipe (same model spec,
   training spec and DP-SGD as the deployed victim, same known initialisation; DP noise and
   minibatch order come from a per-release secret seed);
3. returns a `Release`: D₋, the adversary's auxiliary pool (the scenario's attacker pool, with
   labels), the candidate sets (MIA only), the training recipe, and one oracle view per released
   model (same interface and output defenses as the deployment; queries count against the
   run's budget under the attack's name).
The targets and the secret choices stay in `InformedTruth`, which the runner hands to the
scorer (never to the attack).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import nn

from harness.core.progress import sub_bar
from victims.local import LocalBackend
from victims.models.files import model_for
from victims.models.training import train


@dataclass
class InformedTruth:
    """The secret side of a release, for scoring only."""

    targets: torch.Tensor  # (T, d) the point each released model was trained with
    target_y: torch.Tensor  # (T,)
    choice: torch.Tensor | None  # (T,) secret candidate index (MIA), else None
    adversary_x: torch.Tensor  # D₋ ∪ pool: all the points the adversary already had
    input_shape: tuple[int, ...]
    grad_norms: list[float]  # optimality of each released model (L-BFGS), if measured
    base: Any = None  # the deployed victim's Truth


class Recipe:
    """The training algorithm A as the informed adversary knows it (paper 004, Def. 1)."""

    def __init__(self, s: Any, task: str, input_shape: tuple[int, ...], n_outputs: int,
                 device: torch.device, dtype: torch.dtype):
        self.spec = s.victim.model
        self.training = s.victim.training
        self.dp = s.defenses.dp_sgd
        self.task = task
        self.input_shape = input_shape
        self.n_outputs = n_outputs
        self.device = device
        self.dtype = dtype
        self.init_seed = s.seed  # the deployed victim's init seed (known by default)
        self.n_trained = 0
        self.train_seconds = 0.0
        self.stand_in: str | None = None  # what stands in for an unknown architecture (None: the victim's)
        self.input_scale: Any = None  # a stand-in's input standardisation (harness/attacker/scaling.py)

    def inputs(self, x: torch.Tensor) -> torch.Tensor:
        """x as the recipe's models take it: standardised with the attacker pool's statistics
        for a stand-in, else as it is."""
        if self.input_scale is None or self.input_scale.identity:
            return x
        sc = self.input_scale
        flat = (x.reshape(len(x), -1) - sc.mean.to(x)) / sc.sd.to(x)
        return flat.reshape(x.shape)

    @property
    def deterministic(self) -> bool:
        """True when A(D) is a deterministic function of D (no DP noise, full batch or L-BFGS)."""
        t = self.training
        full = t.batch_size is None or t.steps is not None or t.optimizer == "lbfgs"
        return self.dp is None and full

    @property
    def full_batch(self) -> bool:
        t = self.training
        return t.optimizer != "lbfgs" and (t.batch_size is None or t.steps is not None)

    def describe(self) -> dict[str, Any]:
        """The recipe as plain data (model spec, training spec, DP spec)."""
        return {"model": self.spec.model_dump(mode="json"), "stand_in": self.stand_in,
                "training": self.training.model_dump(mode="json"),
                "dp_sgd": self.dp.model_dump(mode="json") if self.dp else None,
                "task": self.task}

    def build(self, init_seed: int | None = None) -> nn.Module:
        """A fresh model: the known initialisation (init_seed None) or another seed's."""
        torch.manual_seed(self.init_seed if init_seed is None else init_seed)
        return model_for(self.spec, self.input_shape, self.n_outputs).to(self.device, self.dtype)

    def train(self, x: torch.Tensor, y: torch.Tensor, seed: int = 0,
              init_seed: int | None = None) -> nn.Module:
        """A model trained by A on (x, y); `seed` drives DP noise and minibatch order."""
        t0 = time.perf_counter()
        model = self.build(init_seed)
        x = self.inputs(x.to(self.device, self.dtype))
        y = y.to(self.device)
        if self.task == "regression":
            y = y.to(self.dtype)
        torch.manual_seed(seed + 104729)
        rec = train(model, x, y, self.task, self.training, self.dp, seed, bar=None)
        model.eval()
        for p in model.parameters():
            p.requires_grad_(False)
        model.grad_norm = rec.grad_norm  # type: ignore[attr-defined]
        self.n_trained += 1
        self.train_seconds += time.perf_counter() - t0
        return model


    def train_many(self, x_minus: torch.Tensor, y_minus: torch.Tensor, x_extra: torch.Tensor,
                   y_extra: torch.Tensor, seed: int = 0, init_seed: int | None = None) -> torch.Tensor:
        """(K, P) flat parameters (state_dict order) of K models trained on D₋ ∪ {extra_k}:
        batched where the recipe allows (harness/attacker/shadows.py), else one by one."""
        from harness.attacker.shadows import train_many

        return train_many(self, x_minus, y_minus, x_extra, y_extra, seed, init_seed)

    def outputs_many(self, flat: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """(K, N, out) raw outputs of flat-parameter models on x."""
        from harness.attacker.shadows import outputs_many

        return outputs_many(self, flat, self.inputs(x.to(self.device, self.dtype)))


@dataclass
class Release:
    """What the informed attacker receives from one release request."""

    views: list[Any]  # one OracleView per released model
    x_minus: torch.Tensor  # D₋ features (n-1, d)
    y_minus: torch.Tensor  # D₋ labels
    x_aux: torch.Tensor  # the adversary's own pool (shadow targets, disjoint from D₋ and targets)
    y_aux: torch.Tensor
    recipe: Recipe
    candidates: torch.Tensor | None = None  # (T, C, d) MIA candidate sets
    candidate_y: torch.Tensor | None = None  # (T, C)
    aux_y: torch.Tensor | None = None  # (T,) side knowledge: each target's label (Thm. 8's y)
    notes: list[str] = field(default_factory=list)


class InformedKnowledge:
    """Lazy provider of informed-adversary knowledge for one attack (set on RunContext)."""

    def access(self) -> KnowledgeAccess:
        """The narrow handle the attack gets (never the truth)."""
        return KnowledgeAccess(self)

    def __init__(self, s: Any, victim: Any, oracle: Any, attack: str, seed: int):
        self.s = s
        self.victim = victim
        self.oracle = oracle
        self.attack = attack
        self.seed = seed
        self.truth: InformedTruth | None = None
        self._release: Release | None = None

    @property
    def available(self) -> bool:
        """True when the deployment is a locally trained victim (an informed release can be made)."""
        t = self.victim.truth
        return t is not None and t.data is not None and self.s.victim.model.arch != "file"

    @property
    def recipe(self) -> Recipe:
        info = self.victim.info
        return Recipe(self.s, info.task, self.victim.truth.data.input_shape, info.n_outputs,
                      info.device, info.dtype)

    @property
    def recipe_batchable(self) -> bool:
        """True when shadows of this recipe train in batches (harness/attacker/shadows.py)."""
        from harness.attacker.shadows import batchable

        return batchable(self.recipe)

    def max_targets(self, candidates: int = 1) -> int:
        """How many trials the training split allows (leaving at least half of it as D₋)."""
        return max(0, len(self.victim.truth.data.x_train) // 2 // candidates)

    @staticmethod
    def _batched_release(recipe: Recipe, x_minus, y_minus, tx, ty, secret: int) -> list[nn.Module]:
        """The released models trained together where that is the recipe's own computation
        (SGD without DP: model t equals recipe.train(D₋ ∪ {z_t}, seed=secret + t), tested);
        [] otherwise (DP-SGD releases run Opacus itself, one by one)."""
        from harness.attacker.shadows import batchable

        if recipe.dp is not None or not batchable(recipe) or len(tx) < 2:
            return []
        flat = recipe.train_many(x_minus, y_minus, tx, ty, seed=secret)
        models = []
        for row in flat:
            model = recipe.build()
            state = model.state_dict()
            sizes = [v.numel() for v in state.values()]
            model.load_state_dict({k: part.reshape(v.shape) for (k, v), part
                                   in zip(state.items(), torch.split(row, sizes), strict=True)})
            model.eval()
            for p in model.parameters():
                p.requires_grad_(False)
            models.append(model)
        return models

    def release(self, n_targets: int, candidates: int = 1, side_labels: bool = False) -> Release:
        """Train `n_targets` released models on D₋ ∪ {z_t}; returns what the attacker sees.

        `side_labels=True` also hands over each target's label (the side knowledge of paper 004
        Thm. 8); attacks that do not need it must not ask."""
        if self._release is not None:
            raise RuntimeError("one release per attack run")
        from harness.core.errors import AttackFailed

        if not self.available:
            raise AttackFailed("an informed adversary needs a locally trained victim "
                               "(remote endpoints and model files cannot be retrained)")
        data = self.victim.truth.data
        info = self.victim.info
        n = len(data.x_train)
        k = n_targets * candidates
        if k < 1 or n - k < 1:
            raise AttackFailed(f"cannot draw {k} targets from a training split of {n}")
        rng = np.random.default_rng(self.seed + 7)
        perm = rng.permutation(n)
        tgt_idx, keep = perm[:k], np.sort(perm[k:])
        dev, dt = info.device, info.dtype
        as_x = lambda a: torch.as_tensor(a, dtype=dt, device=dev)  # noqa: E731
        as_y = lambda a: torch.as_tensor(a, device=dev)  # noqa: E731
        x_minus, y_minus = as_x(data.x_train[keep]), as_y(data.y_train[keep])
        cand_x = as_x(data.x_train[tgt_idx]).reshape(n_targets, candidates, -1)
        cand_y = as_y(data.y_train[tgt_idx]).reshape(n_targets, candidates)
        choice = torch.as_tensor(rng.integers(0, candidates, n_targets), device=dev)
        ar = torch.arange(n_targets, device=dev)
        tx, ty = cand_x[ar, choice], cand_y[ar, choice]
        recipe = self.recipe
        views, gnorms = [], []
        secret = int(rng.integers(1 << 30))
        bar = sub_bar("training the released models", n_targets)
        batched = self._batched_release(recipe, x_minus, y_minus, tx, ty, secret)
        for t in range(n_targets):
            model = batched[t] if batched else recipe.train(torch.cat([x_minus, tx[t : t + 1]]),
                                                            torch.cat([y_minus, ty[t : t + 1]]),
                                                            seed=secret + t)
            bar.update(1)
            if getattr(model, "grad_norm", None) is not None:
                gnorms.append(float(model.grad_norm))
            backend = LocalBackend(model, info.task, info.n_classes, self.s.interface, dev, dt)
            views.append(self.oracle.sibling(backend, self.s.seed + 31 * t).view(self.attack))
        bar.close()
        x_aux = as_x(data.x_pool)
        y_aux = as_y(data.y_pool)
        self.truth = InformedTruth(tx, ty, choice if candidates > 1 else None,
                                   torch.cat([x_minus, x_aux]), tuple(data.input_shape), gnorms,
                                   self.victim.truth)
        self._release = Release(views, x_minus, y_minus, x_aux, y_aux, recipe,
                                cand_x if candidates > 1 else None,
                                cand_y if candidates > 1 else None,
                                ty.clone() if candidates == 1 and side_labels else None,
                                notes=[f"{n_targets} released models trained on |D₋| = "
                                       f"{len(x_minus)} + 1 points in {recipe.train_seconds:.1f} s"])
        return self._release


class KnowledgeAccess:
    """What an informed attack is handed (RunContext.knowledge): the provider's public questions
    and `release`, nothing else — the deployed victim, its oracle and the secret targets stay
    with the provider, which the runner keeps for the scorer."""

    __slots__ = ("available", "recipe_batchable", "max_targets", "release")

    def __init__(self, provider: InformedKnowledge):
        self.available = provider.available
        self.recipe_batchable = provider.recipe_batchable if self.available else False
        self.max_targets = lambda candidates=1: provider.max_targets(candidates)
        self.release = lambda n_targets, candidates=1, side_labels=False: provider.release(
            n_targets, candidates, side_labels)
