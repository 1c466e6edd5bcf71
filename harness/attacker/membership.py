"""What a membership attacker is handed (LiRA's game, Carlini et al. 2022 Sec. III; ML Privacy
Meter's "privacy game"), and what stays with the scorer.

The evaluation set is the victim's members and an equal number of non-members (its held-out
test split), shuffled by a secret permutation: the attacker gets the points and their labels, in
that order, never which are members (`MembershipTruth`, for the scorer only). It also gets its
own pool (the scenario's attacker pool, or a user's `x_pool`/`y_pool`), the victim's declared
training recipe (`victim.training`, the model spec, the training-set size; for a user's model file
without `spec:`, e.g. ONNX, a documented stand-in family — linear softmax models by default, or
one named under the attack's params: `stand_in_recipe`, `with_stand_in`), and reference
models trained on request (harness/attacker/reference_models.py), here or on Ray
(`membership.executor`) — one set per run and design, shared by every attack that asks (ML
Privacy Meter's signal matrix).

`canary_run(m)` is the one-run audit (Steinke, Nasr, Jagielski 2023) for victims leakmeter trains:
m mislabeled canaries from held-out data, each included independently with probability ½, added
to the victim's training split, and one model trained with the victim's exact recipe (Opacus for
DP-SGD, with its own accounting). The attacker gets the canaries, D_base (the training split,
which the auditor knows) and an oracle view of that model; the coin flips stay here.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import Any, Literal, get_args

import numpy as np
import torch

from harness.core.errors import AttackFailed
from harness.core.progress import stage

# reference models shared by the attacks of one run: {id(truth): {key: ReferenceSet}}
_SHARED: dict[int, dict[Any, Any]] = {}


@dataclass
class MembershipTruth:
    """The secret side: membership of every evaluation point (eval order), canary coin flips."""

    is_member: np.ndarray  # (N,) bool
    base: Any = None  # the deployed victim's Truth (its DP accounting)
    canary_in: np.ndarray | None = None  # (m,) bool, one-run audit only
    canary_dp: Any = None  # DPRecord of the canary run (None without DP-SGD)
    whitebox_in: np.ndarray | None = None  # gradient canaries' coins (white-box audit), all runs
    whitebox_dp: Any = None  # DPRecord of a white-box canary run
    blackbox_in: np.ndarray | None = None  # one coin per black-box run (target in or out)
    blackbox_dp: Any = None  # DPRecord of a black-box run


@dataclass
class EvalSet:
    """What the attacker sees of the evaluation set: points and labels, members and non-members
    mixed in a secret order."""

    x: torch.Tensor
    y: torch.Tensor
    x_pool: torch.Tensor
    y_pool: torch.Tensor
    train_size: int = 0  # points the victim trained on (the declared recipe's; reference models match it)

    def __len__(self) -> int:
        return len(self.x)


@dataclass
class CanaryRun:
    """The one-run audit's view: canaries, D_base, and the oracle of the model trained on
    D_base ∪ {the canaries whose coin came up heads}."""

    view: Any
    x: torch.Tensor
    y: torch.Tensor
    x_base: torch.Tensor
    y_base: torch.Tensor
    recipe: Any
    notes: list[str]


class MembershipKnowledge:
    """Lazy provider for one membership attack (the runner hands the attack a `MembershipAccess`)."""

    def access(self) -> MembershipAccess:
        """The narrow handle the attack gets (never the membership bits)."""
        return MembershipAccess(self)

    def __init__(self, s: Any, victim: Any, oracle: Any, attack: str, seed: int, secret: int):
        self.s = s
        self.victim = victim
        self.oracle = oracle
        self.attack = attack
        self.seed = seed  # the attack's own seed: its reference models' noise and inits
        self.secret = secret  # the defender's: canaries and their coins
        self.truth: MembershipTruth | None = None
        self._eval: EvalSet | None = None

    # ------------------------------------------------------------------ what exists
    @property
    def available(self) -> bool:
        """True when the victim's members and non-members are known (a local or file victim)."""
        t = getattr(self.victim, "truth", None)
        d = getattr(t, "data", None)  # an endpoint without a model file: its training set is unknown
        return (d is not None and getattr(t, "model", None) is not None and len(d.x_train) > 0
                and len(d.x_test) > 0)

    @property
    def recipe(self):
        """The declared training recipe; for a model file without `spec:` a stand-in (see
        `stand_in_recipe`); None without data to train on."""
        from harness.attacker.informed import Recipe

        spec = self.s.victim.model
        info = self.victim.info
        r = Recipe(self.s, info.task, self.victim.truth.data.input_shape, info.n_outputs,
                   info.device, info.dtype)
        if spec.arch == "file" and spec.spec is None:
            return stand_in_recipe(r, self.victim.truth.data.x_pool)
        if spec.arch == "file":
            r.spec = spec.spec
        return r

    @property
    def trained_here(self) -> bool:
        """True when leakmeter trained the victim (so a canary run is the same recipe)."""
        return self.available and self.s.victim.model.arch != "file" and self.s.victim.endpoint is None

    # ------------------------------------------------------------------ the evaluation set
    def eval_set(self, max_members: int | None = None) -> EvalSet:
        """Members and as many non-members, in a secret order (the same for every attack of
        the run: drawn from the scenario's seed)."""
        if self._eval is not None:
            return self._eval
        if not self.available:
            raise AttackFailed("membership needs a victim whose training and held-out data are "
                               "known (a locally trained victim or a model file with its data)")
        d = self.victim.truth.data
        info = self.victim.info
        rng = np.random.default_rng(self.s.seed + 4099)
        m = min(len(d.x_train), len(d.x_test), max_members or len(d.x_train))
        mem = rng.permutation(len(d.x_train))[:m]
        non = rng.permutation(len(d.x_test))[:m]
        x = np.concatenate([d.x_train[mem], d.x_test[non]])
        y = np.concatenate([d.y_train[mem], d.y_test[non]])
        is_member = np.concatenate([np.ones(m, bool), np.zeros(m, bool)])
        order = rng.permutation(2 * m)
        dev, dt = info.device, info.dtype
        self._eval = EvalSet(torch.as_tensor(x[order], dtype=dt, device=dev),
                             torch.as_tensor(y[order], device=dev),
                             torch.as_tensor(d.x_pool, dtype=dt, device=dev),
                             torch.as_tensor(d.y_pool, device=dev), int(len(d.x_train)))
        self.truth = MembershipTruth(is_member[order], self.victim.truth)
        return self._eval

    def executor(self) -> Any:
        """Where reference models train: None = here, else the scenario's `membership.executor`
        (harness/attacker/reference_executors.py)."""
        from harness.attacker.reference_executors import executor_for

        return executor_for(getattr(self.s, "membership", None))

    def shared(self) -> dict[Any, Any]:
        """This run's cache of reference models (one per design), shared across attacks."""
        t = self.victim.truth
        key = id(t)
        if key not in _SHARED:
            _SHARED[key] = {}
            weakref.finalize(t, _SHARED.pop, key, None)
        return _SHARED[key]

    # ------------------------------------------------------------------ the one-run audit
    def canary_run(self, m: int, seed: int) -> CanaryRun:
        """Train one model with the victim's recipe on its training split plus the canaries whose
        secret coin came up heads (Steinke et al. 2023, Alg. 1)."""
        if not self.trained_here:
            raise AttackFailed("the one-run audit retrains the victim: only for victims leakmeter "
                               "trains (not model files or endpoints)")
        from victims.local import LocalBackend
        from victims.models.training import train

        d = self.victim.truth.data
        info = self.victim.info
        rng = np.random.default_rng([self.secret, seed])  # coins the auditor never sees
        held_x = np.concatenate([d.x_test, d.x_pool]) if len(d.x_pool) else d.x_test
        held_y = np.concatenate([d.y_test, d.y_pool]) if len(d.y_pool) else d.y_test
        m = min(m, len(held_x))
        if m < 2:
            raise AttackFailed("no held-out data to draw canaries from")
        pick = rng.permutation(len(held_x))[:m]
        cx = held_x[pick]
        cy = held_y[pick].copy()
        if info.task == "regression":
            cy = cy + rng.choice([-3.0, 3.0], size=m)  # far-off targets
        else:  # a wrong label, uniformly among the others: a canary only membership explains
            k = max(2, info.n_classes)
            cy = (cy + rng.integers(1, k, size=m)) % k
        inc = rng.random(m) < 0.5
        dev, dt = info.device, info.dtype
        as_x = lambda a: torch.as_tensor(a, dtype=dt, device=dev)  # noqa: E731
        as_y = lambda a: torch.as_tensor(a, device=dev)  # noqa: E731
        xb, yb = as_x(d.x_train), as_y(d.y_train)
        xt = torch.cat([xb, as_x(cx[inc])])
        yt = torch.cat([yb, as_y(cy[inc])])
        recipe = self.recipe
        secret = int(rng.integers(1 << 30))
        model = recipe.build()  # the victim's own initialisation, as for the deployed model
        torch.manual_seed(secret + 104729)
        y_fit = yt.to(dt) if info.task == "regression" else yt
        stage(f"training the canary model (one-run audit, {m} canaries)")
        rec = train(model, xt, y_fit, info.task, recipe.training, recipe.dp, secret, bar=None)
        model.eval()
        for p in model.parameters():
            p.requires_grad_(False)
        backend = LocalBackend(model, info.task, info.n_classes, self.s.interface, dev, dt)
        o = self.oracle.sibling(backend, self.s.seed + 977)
        dp_rec = rec.dp
        if self.truth is None:
            self.truth = MembershipTruth(np.zeros(0, bool), self.victim.truth)
        self.truth.canary_in = inc
        self.truth.canary_dp = dp_rec
        return CanaryRun(o.view(self.attack), as_x(cx), as_y(cy), xb, yb, recipe,
                         [f"one-run audit: {m} mislabeled canaries, {int(inc.sum())} included "
                          f"(secret coins), trained on {len(xt)} points"])

    def whitebox_run(self, m: int, runs: int, seed: int):
        """White-box gradient canaries in the recipe's DP-SGD (harness/attacker/gradient_canaries.py)."""
        from harness.attacker.gradient_canaries import whitebox_runs

        obs, notes, coins, rec = whitebox_runs(self, m, runs, seed)
        self._keep_truth(whitebox_in=coins, whitebox_dp=rec)
        return obs, notes

    def blackbox_run(self, runs: int, seed: int):
        """Black-box worst-case-initialisation runs (harness/attacker/worst_case_init.py)."""
        from harness.attacker.worst_case_init import blackbox_runs

        scores, notes, coins, rec = blackbox_runs(self, runs, seed)
        self._keep_truth(blackbox_in=coins, blackbox_dp=rec)
        return scores, notes

    def _keep_truth(self, **secret) -> None:
        if self.truth is None:
            self.truth = MembershipTruth(np.zeros(0, bool), self.victim.truth)
        for k, v in secret.items():
            setattr(self.truth, k, v)


STAND_IN_HIDDEN = [64]  # the mlp stand-in's widths unless `stand_in_hidden` names others
StandInFamily = Literal["mlp", "logistic"]  # what `attacks[].params.stand_in` may name
STAND_IN_FAMILIES = get_args(StandInFamily)
# The default family (issue 30, measured on three digits ONNX victims trained outside leakmeter,
# 200 members, 16 references): linear softmax references calibrate each point's difficulty more
# steadily than ReLU MLP [64] ones trained with the same recipe — online LiRA AUC 0.627 vs 0.539
# on an overfit MLP victim (plain loss attack 0.618), 0.620 vs 0.551 on an overfit logistic one
# (loss 0.609), 0.735 vs 0.669 on a second MLP (loss 0.562); RMIA 0.622 vs 0.605, 0.607 vs 0.602,
# 0.666 vs 0.635. A wider MLP stand-in ([128]) did worse still (LiRA 0.507 on the first).
STAND_IN_DEFAULT = "logistic"


def stand_in_recipe(r: Any, x_pool: Any, hidden: list[int] | None = None) -> Any:
    """A recipe whose models stand in for a victim of unknown architecture (a model file without
    `spec:`, e.g. ONNX): the default family (`STAND_IN_DEFAULT`; a ReLU MLP of widths `hidden`
    when given) fitted to the victim's task with the scenario's training recipe on inputs
    standardised with the attacker pool's statistics (attacker knowledge); `r.stand_in` says so
    in every report line that names the recipe."""
    from harness.attacker.scaling import PoolScale

    r.init_seed = r.init_seed * 7919 + 11  # the victim's own initialisation is not known
    r.input_scale = PoolScale.of(x_pool, int(np.prod(r.input_shape)), r.device)
    return with_stand_in(r, "mlp" if hidden is not None else STAND_IN_DEFAULT, hidden, named=False)


def with_stand_in(r: Any, family: str, hidden: list[int] | None = None, named: bool = True) -> Any:
    """A copy of stand-in recipe `r` with the family a user named (`attacks[].params.stand_in`:
    mlp with `stand_in_hidden` widths, or logistic — a linear softmax model), same training
    recipe, same input standardisation."""
    import copy

    from harness.scenario.schema import ModelSpec

    if family not in STAND_IN_FAMILIES:
        raise ValueError(f"stand_in must be one of {', '.join(STAND_IN_FAMILIES)}, not {family!r}")
    r = copy.copy(r)
    widths = [] if family == "logistic" else list(hidden if hidden is not None else STAND_IN_HIDDEN)
    r.spec = ModelSpec(arch="mlp", hidden=widths)
    what = f"ReLU MLP {widths}" if widths else "logistic regression (a linear softmax model)"
    how = "named in attacks[].params.stand_in" if named else "the default family"
    r.stand_in = (f"stand-in reference models: {what} ({how}; the victim's architecture is unknown, "
                  f"these are not its models), {r.input_scale.describe()}")
    return r


class MembershipAccess:
    """The narrow handle a membership attack gets (RunContext.knowledge): public questions and
    requests, nothing of the victim, its oracle or the truth."""

    __slots__ = ("kind", "available", "trained_here", "recipe", "eval_set", "shared",
                 "canary_run", "seed", "executor", "whitebox_run", "blackbox_run")

    def __init__(self, provider: MembershipKnowledge):
        self.kind = "membership"
        self.available = provider.available
        self.trained_here = provider.trained_here
        self.recipe = provider.recipe if provider.available else None
        self.seed = provider.seed
        self.eval_set = provider.eval_set
        self.shared = provider.shared
        self.canary_run = provider.canary_run
        self.whitebox_run = provider.whitebox_run
        self.blackbox_run = provider.blackbox_run
        self.executor = provider.executor
