"""The finite-difference spectrum of span_nonadaptive (harness/attacks/span/fd_spectrum.py)
against synthetic gradient rows with a known span, and the float32 digits MLP across attacker
seeds: a shared base answer's error or one step over a kink must never read as a dimension."""

import pytest
import torch
from attack_direct import run_direct
from conftest import make_scenario

from harness.attacks.span.fd_spectrum import lift_from_ones_complement, lone_points, readmit, without_ones
from harness.attacks.span.nonadaptive import gap_rank
from harness.scenario import Scenario
from harness.scoring.subspace import compare_subspaces


def _span_rows(points=40, per=5, d=30, k=6, seed=0):
    g = torch.Generator().manual_seed(seed)
    basis = torch.linalg.qr(torch.randn(d, k, generator=g, dtype=torch.float64))[0].T
    rows = torch.randn(points * per, k, generator=g, dtype=torch.float64) @ basis
    return rows, basis, g


def test_shared_base_error_is_removed_and_the_span_lifted_back():
    """Rows = true gradients + one error per point along 1 (its base answer's) + small i.i.d.
    noise: the raw spectrum shows k + 1 dimensions, the rank read on 1⊥ shows k, and the lifted
    basis is the true span."""
    rows, basis, g = _span_rows()
    d, per = rows.shape[1], 5
    base = 1e-3 * torch.randn(len(rows) // per, generator=g, dtype=torch.float64)
    noisy = rows + base.repeat_interleave(per)[:, None] + 1e-9 * torch.randn(rows.shape, generator=g,
                                                                             dtype=torch.float64)
    raw = torch.linalg.svdvals(noisy)
    assert float(raw[6] / raw[0]) > 1e-5  # the base errors read as a seventh dimension
    perp, along = without_ones(noisy)
    u, s, vh = torch.linalg.svd(perp, full_matrices=False)
    r, _, _ = gap_rank(s, 1e-5, 100.0, 0.0, d - 1)
    assert r == 6
    lifted = lift_from_ones_complement(u, s, vh, along, r)
    m = compare_subspaces(lifted.numpy(), basis.numpy())
    # as close as the top 6 of the raw rows (which must be told k): the base errors' own limit
    top = compare_subspaces(torch.linalg.svd(noisy, full_matrices=False)[2][:6].numpy(), basis.numpy())
    assert m["max_principal_angle_deg"] < min(0.1, 1.1 * top["max_principal_angle_deg"]), (m, top)
    assert m["min_energy_in_span"] > 1 - 1e-5


def test_a_point_whose_step_crossed_a_kink_is_dropped_and_no_true_direction():
    rows, basis, g = _span_rows(points=40, per=5)
    per = 5
    bad = rows.clone()
    bad[3 * per:4 * per, 7] += 0.3 * torch.randn(per, generator=g, dtype=torch.float64)  # one column
    u, s, vh = torch.linalg.svd(bad, full_matrices=False)

    def rank(m):
        return gap_rank(torch.linalg.svdvals(m), 1e-5, 100.0, 0.0, 30)[0]

    assert rank(bad) == 7
    assert lone_points(bad, per, u, 7, rank) == [3]
    # a true direction seen at two points only is no lone point
    rare = torch.cat([rows, torch.zeros(2 * per, 30, dtype=torch.float64)])
    extra = torch.randn(30, generator=g, dtype=torch.float64)
    rare[-2 * per:] = torch.randn(2 * per, 1, generator=g, dtype=torch.float64) * extra
    u, s, vh = torch.linalg.svd(rare, full_matrices=False)
    assert rank(rare) == 7 and lone_points(rare, per, u, 7, rank) == []


def test_a_point_set_aside_comes_back_once_another_shows_its_direction():
    """A unit active at one point only looks like a kink; its point waits aside and returns
    when a second point shows the same direction."""
    rows, basis, g = _span_rows(points=30, per=5)
    per, d = 5, 30
    extra = torch.randn(d, generator=g, dtype=torch.float64)

    def point_with_extra():
        return torch.randn(per, 6, generator=g, dtype=torch.float64) @ basis + \
            torch.randn(per, 1, generator=g, dtype=torch.float64) * extra

    def rank(m):
        return gap_rank(torch.linalg.svdvals(m), 1e-5, 100.0, 0.0, d)[0]

    a, b = point_with_extra(), point_with_extra()
    with_a = torch.cat([rows, a])
    u = torch.linalg.svd(with_a, full_matrices=False)[0]
    assert lone_points(with_a, per, u, 7, rank) == [30]  # alone: set aside
    with_b = torch.cat([rows, b])
    back_rows, still, n = readmit(with_b, a, per, rank(with_b), rank)
    assert n == 1 and len(still) == 0 and rank(back_rows) == 7
    u = torch.linalg.svd(back_rows, full_matrices=False)[0]
    assert lone_points(back_rows, per, u, 7, rank) == []
    # a kinked point's own direction is never shown by another: it stays aside
    kinked = rows[:per].clone()
    kinked[:, 3] += 0.5
    _, still, n = readmit(with_b, kinked, per, rank(with_b), rank)
    assert n == 0 and len(still) == per


@pytest.mark.parametrize("seed,attacker", [(1, 0), (1, 4), (3, 9)])
def test_float32_digits_mlp_full_rank_on_other_attacker_seeds(seed, attacker, tmp_path):
    """Attacker seeds whose draws once read a 25th dimension (a base answer's error, or a step
    over a kink) on the float32 digits MLP [24]."""
    victim = {"model": {"arch": "mlp", "hidden": [24]},
              "data": {"dataset": "digits", "n_train": 1000},
              "training": {"epochs": 30, "dtype": "float32"}}
    s = Scenario.model_validate(make_scenario(
        seed=seed, victim=victim, interface={"kind": "prediction", "output": "probabilities"},
        attacker={"seed": attacker}, attacks=[{"name": "span_nonadaptive"}]))
    r = run_direct(s, tmp_path)
    m = r.metrics
    assert m["recovered_rank"] == m["true_rank"] == 24 and m["max_principal_angle_deg"] < 1, m
    assert r.stopped_by is None and r.risk == "high"
