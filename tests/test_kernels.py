"""The HMC kernel: the metric estimated from a population, and the number of moves."""

import numpy as np
import pytest

from pymc_evidence import kernels
from pymc_evidence.density import DensityValues
from pymc_evidence.kernels import Metric


@pytest.fixture(scope="module")
def gaussian_population():
    """Draws of a correlated 6-d Gaussian N(0, Σ) and the log density's gradients −Σ⁻¹θ."""
    rng = np.random.default_rng(11)
    a = rng.normal(size=(6, 6))
    cov = a @ a.T + 6 * np.eye(6)
    draws = rng.multivariate_normal(np.zeros(6), cov, size=200_000)
    weights = np.full(len(draws), 1.0 / len(draws))
    return cov, draws, -draws @ np.linalg.inv(cov), weights


def test_gradient_informed_metric_is_exact_on_a_gaussian(gaussian_population):
    cov, draws, grads, weights = gaussian_population
    dense = Metric.from_population(draws, weights, True, gradients=grads)
    np.testing.assert_allclose(dense.cov, cov, rtol=0.02, atol=0.02 * cov.max())
    np.testing.assert_allclose(dense.chol_inv.T @ dense.chol_inv, np.linalg.inv(dense.cov), atol=1e-10)
    diag = Metric.from_population(draws, weights, False, gradients=grads)
    # nutpie's diagonal rule: √(Var θ_i / Var ∂_i log π) = √(Σ_ii / (Σ⁻¹)_ii)
    np.testing.assert_allclose(diag.variances, np.sqrt(np.diag(cov) / np.diag(np.linalg.inv(cov))), rtol=0.01)


def test_gradient_informed_metric_sees_the_width_of_separated_modes():
    """Two narrow modes (sd 0.1) 20 apart: the population's variance is ~100, the modes' 0.01."""
    rng = np.random.default_rng(12)
    centres = rng.choice([-10.0, 10.0], size=(20_000, 1))
    draws = centres + 0.1 * rng.standard_normal((20_000, 1))
    grads = -(draws - centres) / 0.01
    weights = np.full(len(draws), 1.0 / len(draws))
    plain = Metric.from_population(draws, weights, False).variances[0]
    informed = Metric.from_population(draws, weights, False, gradients=grads).variances[0]
    assert plain == pytest.approx(100.01, rel=0.02)
    assert informed == pytest.approx(np.sqrt(100.01 * 0.01), rel=0.02)  # geometric mean: ~1


def test_non_finite_gradients_of_dead_particles_are_ignored(gaussian_population):
    cov, draws, grads, weights = gaussian_population
    draws, grads, weights = draws[:1000], grads[:1000].copy(), np.full(1000, 1 / 999)
    weights[0], grads[0] = 0.0, np.nan  # a particle of zero weight, outside the support
    with_dead = Metric.from_population(draws, weights, True, gradients=grads)
    without = Metric.from_population(draws[1:], weights[1:], True, gradients=grads[1:])
    np.testing.assert_allclose(with_dead.cov, without.cov, rtol=1e-10)
    grads[1] = np.inf  # a live particle with a broken gradient: fall back to the positions
    fallback = Metric.from_population(draws, weights, True, gradients=grads)
    np.testing.assert_allclose(fallback.cov, Metric.from_population(draws, weights, True).cov)


def _standard_normal(positions):
    """A density without data: prior N(0, I), log likelihood 0."""
    zeros = np.zeros(len(positions))
    return DensityValues(-0.5 * np.sum(positions**2, axis=1), zeros, -positions, np.zeros_like(positions))


def test_mutate_runs_the_transitions_it_is_given_and_suggests_the_next():
    rng = np.random.default_rng(1)
    start = kernels.init(_standard_normal, rng.standard_normal((400, 3)))
    metric = Metric(np.ones(3))

    def move(step_size=0.5, **options):
        return kernels.mutate(rng, start, _standard_normal, 1.0, metric, step_size, **options)[1]

    adaptive = move(decorrelation=0.2)  # stops where the population has decorrelated
    assert 1 <= adaptive.n_transitions == adaptive.suggested_transitions < 20
    assert adaptive.correlation < 0.2
    fixed = move(decorrelation=0.2, n_transitions=15)  # runs on, but reports where it got there
    assert fixed.n_transitions == 15 and fixed.traced_log_prior.shape == (15, 8)
    assert 1 <= fixed.suggested_transitions < 15
    # A threshold below what 400 independent chains show by chance (2√(2/(400π)) = 0.08) is
    # raised to it, so the population still counts as decorrelated; 0 switches the rule off.
    assert move(decorrelation=0.01).suggested_transitions < 20
    assert move(decorrelation=0.0, n_transitions=15).suggested_transitions == 20
    # Not decorrelated within the transitions given (tiny steps): 50 % more next time, at least
    # one more, at most max_transitions.
    assert move(0.01, decorrelation=0.2, n_transitions=2).suggested_transitions == 3
    assert move(0.01, decorrelation=0.2, n_transitions=2, max_transitions=2).suggested_transitions == 2
    assert move(0.01, decorrelation=0.2, n_transitions=1).suggested_transitions == 2
