"""The oracle: the attacker's only view of the deployment.

`Oracle` wraps a victim backend (local model or HTTP endpoint) with the interface's rules
(which methods exist, what `predict` returns) and the scenario's defenses (query budget,
output noise, rounding, top-k, explanation noise). `oracle.view(attack_name)` hands one
attack a view with its own query budget: every attack is its own attacker and faces the whole
`defenses.query_budget` (defenses/budget.py); every row sent also counts against the run's own
cost cap (`victim.endpoint.max_rows`), which is never evidence about the defense.

Every call is batched: one call with a batch of N inputs counts N queries, and the budget is
charged *before* the backend is asked, so it can never be exceeded. Answers come back as
float64 tensors on the scenario's device (labels as int64), converted, never truncated.
"""

from __future__ import annotations

from typing import Any

import torch

from defenses.budget import Quotas
from defenses.errors import BudgetExhausted
from defenses.output import OutputDefenses
from harness.core.errors import AttackStopped, InterfaceError

# which oracle methods each interface offers
OFFERS = {
    "prediction": {"predict"},
    "gradient": {"predict", "explain"},
    "smoothgrad": {"predict", "explain"},
    "whitebox": {"predict", "explain", "weights"},
}


class Oracle:
    """Shared state of one run: backend, defenses, quotas and the noise generator."""

    def __init__(self, backend: Any, info: Any, defenses: OutputDefenses, budget: int | None,
                 seed: int = 0, progress: Any = None, max_rows: int | None = None):
        self.backend = backend
        self.info = info
        self.defenses = defenses
        self.quotas = Quotas(budget, max_rows)  # per-attacker budgets + the run's row cap
        self.gen = torch.Generator(device="cpu").manual_seed(seed + 7919)
        self.progress = progress
        self._who = "-"
        if getattr(backend, "remote", False):  # an HTTP endpoint applies its own defenses
            self.defenses = OutputDefenses()
        if hasattr(backend, "bind_budget"):  # HTTP retries are charged before they are sent
            backend.bind_budget(self.charge_extra, lambda: self._who,
                                lambda n, who: self.quotas.refund(n, who))

    def charge_extra(self, n: int, who: str | None = None) -> None:
        """Charge n queries the backend sends on its own (HTTP retries: to the attack that asked;
        the start-up check and verification probes: to the run's row cap only)."""
        self.quotas.charge(n, who or self._who)
        if self.progress is not None:
            self.progress(n)

    def sibling(self, backend: Any, seed: int) -> Oracle:
        """An oracle on another model (an informed release, a canary run) with the same interface
        and defenses, sharing this run's quotas (an attack's queries to it count against that
        attack's own budget) and progress."""
        o = Oracle(backend, self.info, self.defenses, None, seed, self.progress)
        o.quotas = self.quotas
        return o

    def view(self, attack: str) -> OracleView:
        """The handle one attack gets: its own budget and query count."""
        return OracleView(self, attack)


class OracleView:
    """What an attack may call: `predict`, `explain`, `weights`, plus public facts."""

    def __init__(self, oracle: Oracle, attack: str):
        self._o = oracle
        self.attack = attack
        self.info = oracle.info

    # --------------------------------------------------------------- bookkeeping
    @property
    def interface(self) -> str:
        return self.info.interface

    @property
    def output(self) -> str:
        return self.info.output

    def offers(self, method: str) -> bool:
        return method in OFFERS[self.info.interface]

    @property
    def queries(self) -> int:
        """Rows whose answers reached this attack."""
        return self._o.quotas.rows.answered.get(self.attack, 0)

    @property
    def queries_sent(self) -> int:
        """Rows sent on this attack's behalf (charged to its budget), retries included."""
        return self._o.quotas.rows.by_attack.get(self.attack, 0)

    def transport(self) -> dict[str, int]:
        """Retries and faults on this attack's behalf (0 for a local victim)."""
        stats = getattr(self._o.backend, "stats_for", None)
        got = stats(self.attack) if stats else {}
        return {"retries": int(got.get("retries", 0)), "faults": int(got.get("faults", 0))}

    @property
    def remaining(self) -> int | None:
        """Queries this attack may still send: its budget, and the run's row cap (None = unlimited)."""
        return self._o.quotas.remaining(self.attack)

    def affordable(self, n: int) -> int:
        """How many of n queries the budget still allows."""
        rem = self.remaining
        return n if rem is None else max(0, min(n, rem))

    @property
    def budget(self) -> int | None:
        """One attacker's whole query budget (None = unlimited)."""
        return self._o.quotas.budget

    def capped_by_rows(self) -> bool:
        """True when the run's own row cap (max_rows), not this attacker's budget, limits it now."""
        return self._o.quotas.capped_by_rows(self.attack)

    def cannot_pay(self, need: int, what: str) -> AttackStopped:
        """The stop for `need` queries this attacker cannot pay: its budget (the defense), or the
        run's own row cap (`cap`: a cost limit, not evidence)."""
        if self.capped_by_rows():
            return AttackStopped(f"the scan's row cap (victim.endpoint.max_rows) cannot pay the {need} "
                                 f"{what} ({self.remaining} rows left)", stopped_by="cap")
        return AttackStopped(f"the query budget cannot pay the {need} {what} ({self.remaining} of "
                             f"{self.budget} left)", stopped_by="budget")

    @property
    def device(self) -> torch.device:
        return self.info.device

    def _require(self, method: str) -> None:
        if not self.offers(method):
            offered = ", ".join(sorted(OFFERS[self.info.interface]))
            raise InterfaceError(
                f"the {self.info.interface} interface does not offer {method}(); it offers {offered}"
            )

    def _prepare(self, x: Any) -> torch.Tensor:
        x = torch.as_tensor(x)
        if x.dim() == 1:
            x = x[None, :]
        x = x.reshape(len(x), -1)
        if x.shape[1] != self.info.dim:
            raise ValueError(f"queries must have {self.info.dim} features, got {x.shape[1]}")
        return x.to(self.info.device, torch.float64)

    def _charge(self, n: int) -> None:
        self._o._who = self.attack
        try:
            self._o.quotas.charge(n, self.attack)
        except BudgetExhausted as exc:  # an endpoint says whether faults ate the budget
            starved = getattr(self._o.backend, "starved", None)
            raise (starved(exc, self.attack) if starved else exc) from None
        if self._o.progress is not None:
            self._o.progress(n)

    def _answered(self, n: int) -> None:
        self._o.quotas.delivered(n, self.attack)

    # --------------------------------------------------------------- the API
    def predict(self, x: Any) -> torch.Tensor:
        """Predictions for a batch: labels (N,), probabilities (N, C) or logits (N, K)."""
        self._require("predict")
        x = self._prepare(x)
        self._charge(len(x))
        y = self._o.backend.predict(x, self.info.output)
        self._answered(len(x))
        if self.info.output == "label":
            return y.to(self.info.device, torch.long)
        y = y.to(self.info.device, torch.float64)
        return self._o.defenses.apply_predict(y, self.info.output, self._o.gen)

    def explain(self, x: Any) -> torch.Tensor:
        """Input gradients (or SmoothGrad) for a batch, (N, d)."""
        self._require("explain")
        x = self._prepare(x)
        self._charge(len(x))
        kind = "smoothgrad" if self.info.interface == "smoothgrad" else "gradient"
        g = self._o.backend.explain(x, kind, self._o.gen).to(self.info.device, torch.float64)
        self._answered(len(x))
        return self._o.defenses.apply_explain(g, self._o.gen)

    def logprobs(self, prompts: Any, bias: Any = None) -> Any:
        """A language model's completions API (`output: logprobs`): for token-id prompts (N, T),
        the generated token (N,) and the top-K token ids and logprobs (N, K), K = info.top_logprobs
        (`victims.models.lm_api.LogprobAnswer`). `bias` is one {token id: bias} for every prompt
        (one request's logit_bias) or (ids (N, m), values (N, m)), one per prompt. One prompt is one
        query; noise and rounding apply to the returned logprobs."""
        if self.info.output != "logprobs":
            raise InterfaceError(f"the API returns {self.info.output}, not next-token logprobs")
        if bias is not None and not self.info.logit_bias:
            raise InterfaceError("the API does not accept logit_bias (interface.logit_bias: false)")
        p = torch.as_tensor(prompts)
        p = p[None] if p.dim() == 1 else p
        if p.dim() != 2 or p.shape[1] < 1 or p.shape[1] > self.info.dim:
            raise ValueError(f"prompts must be (N, T) token ids with 1 ≤ T ≤ {self.info.dim}")
        if p.numel() and (int(p.min()) < 0 or int(p.max()) >= self.info.n_outputs):
            raise ValueError(f"prompt token ids must lie in 0 to {self.info.n_outputs - 1}")
        self._charge(len(p))
        ans = self._o.backend.complete(p.long(), bias, int(self.info.top_logprobs or 0))
        self._answered(len(p))
        ans.val = ans.val.to(self.info.device, torch.float64)
        if ans.val.numel():
            ans.val = self._o.defenses.apply_predict(ans.val, "logprobs", self._o.gen)
        return ans

    def weights(self) -> dict[str, torch.Tensor]:
        """The released weights (white-box only). Not counted as a query."""
        self._require("weights")
        return self._o.backend.weights()
