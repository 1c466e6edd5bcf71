"""Two-class probabilities carry their logit only as far as their precision goes (issue 30: a
float32 export answers [1 − p, p], so a saturated class's small column is 1 − p rounded to the
grid of 1). Compared with the logit the answers were computed from (the ground truth)."""

from __future__ import annotations

import torch

from harness.core.answers import logit_error, logit_signals, readable


def _answers(z: torch.Tensor, derived: bool) -> torch.Tensor:
    p1 = torch.sigmoid(z)
    p0 = 1 - p1 if derived else torch.sigmoid(-z)
    return torch.stack([p0, p1], dim=1).double()


def test_the_error_bound_holds_and_a_one_minus_p_column_is_cut_where_it_saturates():
    z = torch.linspace(-40, 40, 8001, dtype=torch.float32)
    truth = z.double()
    for derived in (True, False):
        y = _answers(z, derived)
        read = logit_signals(y, "probabilities")[:, 0]
        bound = logit_error(y)
        finite = torch.isfinite(bound)
        # the bound read from the answers alone covers the actual error wherever it is finite
        assert bool(((read - truth).abs() <= bound + 1e-12)[finite].all())
        keep = readable(y, read[:, None])
        err = (read - truth).abs()[keep]
        # what an attack keeps is within 16 float32 ulps of its logit (old floor p ≥ 1e-12: 1e-2)
        assert float((err / truth.abs()[keep].clamp_min(1.0)).max()) <= 16 * 2.0**-24
        if derived:  # 1 − p: positive logits beyond a few units carry no precision
            assert float(truth[keep].max()) < 5.0 and float(truth[keep].min()) < -15.0
        else:  # both columns in full: kept short of underflow (but a small p that happens to lie
            # on the grid of 1, a chance of 2⁻ᵏ for k spare bits, reads as 1 − p: conservative)
            assert float(keep[truth.abs() <= 15].double().mean()) > 0.99


def test_float64_answers_keep_their_logits_far_out():
    z = torch.linspace(-30, 30, 601, dtype=torch.float64)
    y = _answers(z, derived=False)
    read = logit_signals(y, "probabilities")
    assert bool(readable(y, read).all())
    assert float((read[:, 0] - z).abs().max()) < 1e-12
    # exactly 0 (an underflowed class) carries no logit at all
    zero = torch.tensor([[0.0, 1.0]], dtype=torch.float64)
    assert not bool(readable(zero, logit_signals(zero, "probabilities")).any())
