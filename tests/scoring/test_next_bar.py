"""The bar of the next risk level above a score (what a surrogate stopped at its cap must stay
below, at 10× the queries, to be decided: harness/attacks/extraction/surrogate.py)."""

from harness.scoring.fidelity import (
    HIGH_AGREEMENT,
    HIGH_R2,
    MEDIUM_AGREEMENT,
    MEDIUM_R2,
    label_level,
    next_bar,
    r2_level,
)


def test_next_bar_is_the_lowest_score_of_the_level_above():
    for score, regression, want in [(0.5, True, MEDIUM_R2), (0.905, True, HIGH_R2), (0.995, True, None),
                                    (0.7, False, MEDIUM_AGREEMENT), (0.93, False, HIGH_AGREEMENT),
                                    (0.97, False, None)]:
        assert next_bar(score, regression) == want
        level = r2_level if regression else (lambda a: label_level(a, None))
        if want is not None:  # just below the bar keeps the level, the bar itself is the next one
            assert level(want - 1e-9) == level(score) != level(want)
