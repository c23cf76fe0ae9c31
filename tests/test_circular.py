"""Circular variables (``pm.VonMises``): PyMC's circular transform wraps the unconstrained value
onto (−π, π], so the log density repeats every 2π and an integral over the unconstrained space
counts every period. Each estimator must count one: exact evidences from
:func:`pymc_evidence.testing.von_mises`, whose posterior for the mean lies about ±π, where the
circle's ends meet.
"""

import numpy as np
import pymc as pm
import pytest
from pymc.distributions import transforms

import pymc_evidence as pm_evidence
from pymc_evidence import testing
from pymc_evidence.density import get_density

SEED = 11


@pytest.fixture(scope="module")
def unknown_concentration():
    return testing.von_mises()  # μ circular, κ ~ Gamma: one periodic column of two


def within(result, exact, k=3.0):
    error = result.log_evidence - exact
    assert abs(error) <= k * result.se, f"error {error:.4f} > {k} × SE {result.se:.4f}"


def test_density_periods(unknown_concentration):
    model, _ = unknown_concentration
    density = get_density(model)
    column = next(i for i, name in enumerate(density.names) if name.startswith("mu"))
    assert density.periodic.tolist() == [column]
    X = np.full((3, 2), 0.3)  # κ's log in the other column
    X[:, column] = [7.0, -4.0, 0.5]
    around = np.zeros(2)
    around[column] = 3.0
    wrapped = density.wrap(X, around)
    assert np.allclose(wrapped[:, column], [7.0 - 2 * np.pi, 2 * np.pi - 4.0, 0.5])
    assert np.array_equal(wrapped[:, 1 - column], X[:, 1 - column])
    assert np.allclose(density(wrapped).log_likelihood, density(X).log_likelihood)
    assert density.in_period(X, around).tolist() == [False, False, True]
    assert density.in_period(wrapped, around).all()


def test_circular_transform_chained_or_too_narrow_is_refused():
    y = testing.WIND_DIRECTIONS
    with pm.Model() as chained:
        a = pm.VonMises("a", 0.0, 1.0, transform=transforms.log)
        pm.Normal("y", a, 1.0, observed=y)
    with pytest.raises(ValueError, match="chains the circular transform"):
        get_density(chained)
    with pm.Model() as wide:  # a prior reaching beyond ±π would be folded onto the circle
        a = pm.Normal("a", 0.0, 5.0, transform=transforms.circular)
        pm.Normal("y", a, 1.0, observed=y)
    with pytest.raises(ValueError, match="does not cover its prior"):
        get_density(wide)


def test_laplace_counts_one_period():
    # Optima one period apart are one mode: counted twice, the estimate was log 2 too high.
    model, exact = testing.von_mises(y=testing.WIND_DIRECTIONS[:3], kappa=0.8)
    result = pm_evidence.laplace(model, random_seed=SEED, progressbar=False)
    assert result.n_modes == 1
    assert abs(result.log_evidence - exact) < 0.15  # the Gaussian's own error here: 0.09
    assert abs(result.importance_log_evidence - exact) < 0.05
    assert not result.warnings


def test_bridge(unknown_concentration):
    model, exact = unknown_concentration
    result = pm_evidence.bridge(model, random_seed=SEED, progressbar=False)
    within(result, exact)
    assert abs(result.log_evidence - exact) < 0.05


def test_cmc():
    free, exact_free = testing.von_mises()
    fixed, exact_fixed = testing.von_mises(kappa=1.5)
    # A short run (the SE a few hundredths): counting every period put both 2.3 nats high.
    results = pm_evidence.cmc({"free": free, "fixed": fixed}, delta_end=1e-2,
                              random_seed=SEED, progressbar=False)
    within(results["free"], exact_free)
    within(results["fixed"], exact_fixed)
    # The level (the anchor) comes mostly from the fixed model's importance draws (about four
    # times as precise as the free model's), so the free model's error holds its ratio to the
    # fixed one: adding SE(log p̂) and the anchor's SE as if independent made its errors over
    # ten seeds spread 1.6 times the reported SE. With two models the error of log p̂_i +
    # anchor is w_j (δ log p̂_i − δ log p̂_j) + Σ_k w_k δ log Ẑ_k.
    for name, other in (("free", "fixed"), ("fixed", "free")):
        res, ref = results[name], results[other]
        importance = np.hypot(res.anchor_weight * res.importance_se,
                              ref.anchor_weight * ref.importance_se)
        assert res.anchor_weight + ref.anchor_weight == pytest.approx(1.0)
        assert res.se == pytest.approx(np.hypot(ref.anchor_weight * res.difference_se(ref),
                                                importance), rel=1e-6)
    assert results["fixed"].anchor_weight > 0.5


def test_thermodynamic_mode_search_is_refused(unknown_concentration):
    model, _ = unknown_concentration
    with pytest.raises(ValueError, match="circular variables"):
        pm_evidence.thermodynamic(model, mode_search=True, progressbar=False)
