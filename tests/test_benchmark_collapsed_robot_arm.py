"""The robot-arm MLP with its precisions integrated out, which the MLP calibration's
importance-sampling reference samples: the same evidence as ``robot_arm_mlp``, so its prior and
likelihood must be the precisions' integrals."""

from __future__ import annotations

import numpy as np
import pymc as pm
import pymc_evidence as pm_evidence
import pytest
from _scripts import load_script  # tests/_scripts.py
from pymc_evidence.testing import robot_arm_mlp
from scipy import integrate, stats


@pytest.fixture(scope="module")
def collapsed():
    module = load_script("benchmarks/_collapsed_robot_arm.py")
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(6, 2)), rng.normal(size=(6, 2))
    return module.CollapsedRobotArm(2, x, y)


def _integrate_precision(log_normal, a, r):
    """log ∫ exp(log_normal(precision)) Gamma(precision | a, rate r) d precision, in log
    precision."""
    def log_integrand(u):
        return log_normal(np.exp(u)) + stats.gamma.logpdf(np.exp(u), a, scale=1 / r) + u

    grid = np.linspace(-60, 40, 2001)  # the peak, to scale and split the integral at
    peak = grid[np.argmax([log_integrand(u) for u in grid])]
    top = log_integrand(peak)
    value, _ = integrate.quad(lambda u: np.exp(log_integrand(u) - top), -60, 40,
                              points=[peak], limit=1000)
    return top + np.log(value)


def test_the_likelihood_and_priors_are_the_precisions_integrals(collapsed):
    theta = 0.3 * np.random.default_rng(1).normal(size=(1, collapsed.dim))
    log_prior, log_likelihood = collapsed.log_densities(theta)
    w = collapsed.weights(theta)
    hidden = np.tanh(collapsed.x @ w["w_in"][0] + w["b_hidden"][0])
    residuals = collapsed.y - (hidden @ w["w_out"][0] + w["b_out"][0])
    a, r = 0.1, 0.1 / 400  # the noise precision's Gamma (s = 0.2, ω = 400)
    expected = _integrate_precision(
        lambda beta: stats.norm.logpdf(residuals, 0, beta**-0.5).sum(), a, r)
    assert log_likelihood[0] == pytest.approx(expected, abs=1e-6)
    # Each weight group: the precision's integral, which is PyMC's multivariate t with
    # ν = 2a and scale r/a.
    expected_prior = 0.0
    for _, sl, a, r in collapsed.groups:
        values = theta[0, sl]
        integral = _integrate_precision(
            lambda alpha: stats.norm.logpdf(values, 0, alpha**-0.5).sum(), a, r)
        t = pm.MvStudentT.dist(nu=2 * a, mu=np.zeros(values.size),
                               scale=(r / a) * np.eye(values.size))
        assert float(pm.logp(t, values).eval()) == pytest.approx(integral, abs=1e-6)
        expected_prior += integral
    assert log_prior[0] == pytest.approx(expected_prior, abs=1e-6)


def test_the_gradient_is_the_log_joints(collapsed):
    point = 0.5 * np.random.default_rng(4).normal(size=collapsed.dim)
    value, gradient = collapsed.log_joint_and_gradient(point)
    assert value == pytest.approx(np.add(*collapsed.log_densities(point[None]))[0])
    step = 1e-6 * np.eye(collapsed.dim)
    numeric = [(np.add(*collapsed.log_densities((point + e)[None]))[0]
                - np.add(*collapsed.log_densities((point - e)[None]))[0]) / 2e-6 for e in step]
    np.testing.assert_allclose(gradient, numeric, rtol=1e-5, atol=1e-6)


def test_every_signed_permutation_of_the_units_keeps_the_density(collapsed):
    theta = np.random.default_rng(2).normal(size=(3, collapsed.dim))
    group = collapsed.symmetry_group()
    assert len(group) == 8  # 2! permutations × 2² sign flips
    base = np.add(*collapsed.log_densities(theta))
    for index, signs in group:
        np.testing.assert_allclose(np.add(*collapsed.log_densities(signs * theta[:, index])), base)
    assert len({tuple(signs * index) for index, signs in group}) == 8


def test_prior_draws_follow_the_t_prior(collapsed):
    draws = collapsed.prior_draws(np.random.default_rng(3), 20_000)
    name, sl, a, r = collapsed.groups[-1]  # output biases: ν = 1
    t = stats.t(df=2 * a, scale=np.sqrt(r / a))
    assert stats.kstest(draws[:, sl.start], t.cdf).pvalue > 0.01



@pytest.mark.slow  # an MLP run: a minute or more on a 2-core machine
def test_a_proposal_shaped_by_basin_draws_gives_chainings_evidence():
    """Importance sampling of the collapsed model, its proposal fitted to draws from the basins
    an optimiser finds, agrees with chaining on the full model (40 points from a two-unit
    network; the t priors' tails leave plain prior sampling no ESS to speak of)."""
    basins = load_script("benchmarks/_basin_draws.py")
    importance = load_script("benchmarks/_importance.py")
    rng = np.random.default_rng(0)
    x = rng.normal(size=(40, 2))
    y = (np.stack([np.tanh(x[:, 0] - x[:, 1]), 0.5 * np.tanh(x[:, 0] + x[:, 1])], axis=1)
         + 0.1 * rng.normal(size=(40, 2)))
    collapsed = load_script("benchmarks/_collapsed_robot_arm.py").CollapsedRobotArm(2, x, y)
    draws, values = basins.basin_draws(collapsed, collapsed.prior_draws(rng, 20), rng)
    assert values == sorted(values, reverse=True)
    assert len(draws) == basins.DRAWS_PER_BASIN * len(values)
    log_z, se, ess = importance.importance_from_aligned(
        collapsed, collapsed.align(draws), collapsed.symmetry_group(), rng, n_draws=50_000,
        components=len(values) + 1)
    assert ess > 5000
    chained = pm_evidence.thermodynamic(
        robot_arm_mlp(2, x, y), n_particles=64, n_groups=2, target_se=None, effort_check=False,
        mode_search=False, random_seed=1, progressbar=False, cores=1)
    assert abs(log_z - chained.log_evidence) < 3 * np.hypot(se, chained.se)
