"""Scale moves along a non-centred hierarchy: which pairs are found, and that the moves keep
the tempered posterior (a wrong Jacobian would shift the scale's distribution)."""

import numpy as np
import pytest

import pymc_evidence as pm_evidence
from pymc_evidence import kernels, testing
from pymc_evidence.density import ModelDensity
from pymc_evidence.scale_moves import find_scale_pairs, initial_widths, scale_step


@pytest.fixture(scope="module")
def eight_schools():
    """The non-centred eight schools (θ = μ + τ z), its density and its exact log evidence."""
    model, exact = testing.hierarchical_normal()
    return model, ModelDensity(model), exact


def _names(pairs):
    return [(p.scale_name, p.block_name, p.power) for p in pairs]


def test_pairs_are_the_scales_the_likelihood_sees_only_through_their_block(eight_schools):
    _, density, _ = eight_schools
    # θ = μ + τ z: τ e^δ with z e^{−δ} keeps θ, so c = −1 (a scale, not a precision)
    assert _names(find_scale_pairs(density)) == [("tau_log__", "z", -1.0)]
    centred = ModelDensity(testing.hierarchical_normal(centered=True)[0])
    assert find_scale_pairs(centred) == ()


def test_mlp_precisions_pair_with_their_standardised_weights():
    density = ModelDensity(testing.robot_arm_mlp(1))
    pairs = _names(find_scale_pairs(density))
    # w = z / √α for each weight group; the noise precision β enters the likelihood directly
    assert pairs == [(f"alpha_{g}_log__", f"z_{g}", 0.5)
                     for g in ("w_in", "b_hidden", "w_out", "b_out")]


def test_scale_moves_keep_the_prior(eight_schools):
    """At λ = 0 exact prior draws must stay prior draws. Without the Jacobian e^{n c δ} the
    moves would pull log τ up by about a nat; with it the mean and SD of log τ stay within
    Monte Carlo error of fresh draws."""
    _, density, _ = eight_schools
    rng = np.random.default_rng(3)
    pairs = find_scale_pairs(density)
    state = kernels.init(density, density.prior_draws(rng, 20_000))
    widths = initial_widths(pairs)
    for _ in range(10):
        state, accepted = scale_step(rng, state, density, 0.0, pairs, widths)
        assert 0.2 < accepted[0] < 0.9
    log_tau = state.position[:, pairs[0].scale]
    fresh = density.prior_draws(rng, 20_000)[:, pairs[0].scale]
    se = np.sqrt(2 * fresh.var() / fresh.size)
    assert abs(log_tau.mean() - fresh.mean()) < 4 * se
    assert abs(log_tau.std() / fresh.std() - 1) < 0.04


def test_thermodynamic_with_scale_moves_matches_the_exact_evidence(eight_schools):
    model, _, exact = eight_schools
    result = pm_evidence.thermodynamic(model, n_particles=256, target_se=0.05,
                                       random_seed=4, progressbar=False)
    assert result.settings["scale_moves"] == [["tau_log__", "z", -1.0]]
    assert abs(result.log_evidence - exact) < 3 * result.se
    assert abs(result.log_evidence - exact) < 0.15
    acceptance = result.diagnostics["scale_acceptance"]
    assert 0.2 < acceptance.median() < 0.8


@pytest.fixture(scope="module")
def precision_regression():
    """Four weights w = z / √α pinned by twelve observations: the MLP's ridge, exact evidence."""
    model, exact = testing.gamma_precision_regression(dim=4, n_obs=12, seed=2)
    return model, ModelDensity(model), exact


def test_gamma_precision_regression_evidence_and_chaining(precision_regression):
    """The quadrature (over Σ(α)'s eigenvalues) against a trapezoid rule over the dense
    covariance, then chaining with the scale moves (c = ½, as the MLP's precisions) within 3
    of its SE."""
    from scipy.special import logsumexp
    from scipy.stats import gamma, multivariate_normal

    model, _, exact = precision_regression
    rng = np.random.default_rng(2)  # the model's data, drawn as it draws them
    x = rng.normal(size=(12, 4))
    y = x @ rng.normal(size=4) + 0.5 * rng.normal(size=12)
    grid = np.linspace(-12.0, 20.0, 8001)
    log_integrand = [gamma(0.1, scale=10.0).logpdf(np.exp(t)) + t
                     + multivariate_normal(np.zeros(12), 0.25 * np.eye(12) + x @ x.T / np.exp(t))
                     .logpdf(y) for t in grid]
    assert logsumexp(log_integrand) + np.log(grid[1] - grid[0]) == pytest.approx(exact, abs=1e-6)

    result = pm_evidence.thermodynamic(model, random_seed=1, progressbar=False)
    assert result.settings["scale_moves"] == [["alpha_log__", "z", 0.5]]
    assert abs(result.log_evidence - exact) < 3 * result.se


def test_nested_scale_moves_keep_the_constrained_prior(precision_regression):
    """Exact draws of the prior restricted to L > L* (prior draws above the median log L) stay
    such draws under nested sampling's scale moves: log α keeps its law (a missing Jacobian
    would shift it) and every point stays inside the contour."""
    from scipy.stats import ks_2samp

    from pymc_evidence.estimators._nested_core import _assign, _fit_clusters, _scale_move

    _, density, _ = precision_regression
    rng = np.random.default_rng(5)
    draws = density.prior_draws(rng, 40_000)
    log_prior, log_likelihood = density.log_densities(draws)
    threshold = np.median(log_likelihood)
    inside = log_likelihood > threshold
    x, reference = draws[inside][:8000], draws[inside][8000:16000]
    log_prior, log_likelihood = log_prior[inside][:8000], log_likelihood[inside][:8000]
    clusters = _fit_clusters(x, 1, 0, None)
    labels = _assign(clusters, x)
    (pair,) = find_scale_pairs(density)
    accepted = 0
    for _ in range(10):
        x, log_prior, log_likelihood, _, n = _scale_move(
            rng, x, log_prior, log_likelihood, threshold, clusters, labels,
            density.log_densities, None, pair, initial_widths([pair])[0])
        accepted += n
    assert np.all(log_likelihood > threshold)
    assert 0.3 < accepted / (10 * len(x)) < 0.8
    assert ks_2samp(x[:, pair.scale], reference[:, pair.scale]).pvalue > 1e-3
    assert abs(x[:, pair.scale].mean() - reference[:, pair.scale].mean()) < 4 * np.sqrt(
        2 * reference[:, pair.scale].var() / len(x))


def test_nested_with_scale_moves_matches_the_exact_evidence(precision_regression):
    model, _, exact = precision_regression
    result = pm_evidence.nested(model, random_seed=3, progressbar=False)
    assert result.settings["scale_moves"] == [["alpha_log__", "z", 0.5]]
    assert abs(result.log_evidence - exact) < 3 * result.se
    assert 0.3 < result.diagnostics["scale_acceptance"].median() < 0.7
