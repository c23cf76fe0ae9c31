"""Label switching: a mixture's exchangeable components, found in the graph's log density, make
Laplace and bridge count every labelling of each mode (exact evidences by enumeration)."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pymc as pm
import pytest
from scipy.special import gammaln, logsumexp
from scipy.stats import multivariate_normal, norm

import pymc_evidence as pm_evidence
from pymc_evidence._label_switching import Components, find_components
from pymc_evidence.density import get_density

PRIOR_SD = 4.0
Y = np.array([-3.4, -2.1, -3.0, -2.6, -3.9, 2.8, 3.3, 2.2, 3.6, 2.9, 3.1, 2.5])
Y3 = np.array([-5.2, -4.1, -4.8, 0.3, -0.6, 0.2, 4.4, 5.1, 3.9, 4.6])
LOG_2PI = np.log(2 * np.pi)


def mixture(y=Y, k=2, alpha=1.0):
    with pm.Model() as model:
        mu = pm.Normal("mu", 0, PRIOR_SD, shape=k)
        w = pm.Dirichlet("w", alpha * np.ones(k))
        pm.NormalMixture("y", w=w, mu=mu, sigma=1.0, observed=y)
    return model


def exact_mixture_evidence(y=Y, k=2, alpha=1.0):
    """Sum over every assignment z of the points to components: the Dirichlet-multinomial
    probability of z's counts times each component's Gaussian marginal of its points,
    N(y_j | 0, I + s² 11ᵀ), whose determinant is 1 + n s² and whose quadratic form is
    Σy² − s² (Σy)² / (1 + n s²)."""
    z = np.array(list(itertools.product(range(k), repeat=len(y))))  # (assignments, n)
    log_p = gammaln(k * alpha) - gammaln(k * alpha + len(y))
    s2 = PRIOR_SD**2
    for j in range(k):
        member = z == j
        n = member.sum(axis=1)
        total, squares = member @ y, member @ y**2
        log_p = log_p + gammaln(alpha + n) - gammaln(alpha) - 0.5 * (
            n * LOG_2PI + np.log1p(n * s2) + squares - s2 * total**2 / (1 + n * s2))
    return float(logsumexp(log_p))


@pytest.fixture(scope="module", params=[2, 3], ids=["K=2", "K=3"])
def mixture_and_evidence(request):
    y = Y if request.param == 2 else Y3
    return request.param, mixture(y, request.param), exact_mixture_evidence(y, request.param)


def test_exact_reference_matches_quadrature():
    y = np.array([-2.5, 0.4, 3.0])
    mu = np.linspace(-25, 25, 1001)
    nodes, weights = np.polynomial.legendre.leggauss(4)  # exact: a cubic in w
    w, weights = (nodes + 1) / 2, weights / 2
    lik = norm.pdf(y[:, None], mu[None, :], 1.0)  # (n, mu)
    per_w = [np.prod(wi * lik[:, :, None] + (1 - wi) * lik[:, None, :], axis=0) for wi in w]
    prior = norm.pdf(mu, 0, PRIOR_SD)
    integral = sum(c * np.sum(p * prior[:, None] * prior[None, :]) for c, p in zip(weights, per_w))
    log_z = np.log(integral * (mu[1] - mu[0]) ** 2)
    assert exact_mixture_evidence(y) == pytest.approx(log_z, abs=1e-6)


def test_finds_the_components_and_only_exchangeable_ones():
    assert find_components(get_density(mixture())) == [Components((("mu", -1), ("w", -1)), 2)]
    assert find_components(get_density(mixture(alpha=np.array([1.0, 2.0])))) == []
    with pm.Model() as two_mixtures:  # independent: K!² labellings, not K!
        for name in "ab":
            mu = pm.Normal(f"mu_{name}", 0, PRIOR_SD, shape=2)
            w = pm.Dirichlet(f"w_{name}", np.ones(2))
            pm.NormalMixture(f"y_{name}", w=w, mu=mu, sigma=1.0, observed=Y)
    found = find_components(get_density(two_mixtures))
    assert sorted(c.names for c in found) == [("mu_a", "w_a"), ("mu_b", "w_b")]
    with pm.Model() as multivariate:  # component means (K, D): the first axis
        w = pm.Dirichlet("w", np.ones(3))
        mu = pm.Normal("mu", 0, 5, shape=(3, 2))
        comps = [pm.MvNormal.dist(mu=mu[k], cov=np.eye(2)) for k in range(3)]
        pm.Mixture("x", w=w, comp_dists=comps, observed=[[0.3, -1.0], [2.0, 0.5]])
    assert find_components(get_density(multivariate)) == [
        Components((("w", -1), ("mu", 0)), 3)]


def test_laplace_counts_every_labelling(mixture_and_evidence):
    k, model, exact = mixture_and_evidence
    # Two restarts find at most two of the K! labellings of the one mode.
    res = pm_evidence.laplace(model, restarts=2, random_seed=1, progressbar=False)
    assert res.settings["components"] == [["mu", "w"]]
    assert res.diagnostics["copies"].iloc[0] == math.factorial(k)  # the best mode
    # Counting only the labellings found would leave it log(K!/2) low at best (0.69 at K = 2,
    # 1.10 at K = 3); Laplace's own approximation error here is 0.02 and 0.06. Importance
    # sampling from the Laplace Gaussians in one labelling's domain is unbiased.
    assert res.log_evidence == pytest.approx(exact, abs=0.1)
    assert res.importance_log_evidence == pytest.approx(exact, abs=0.03)


def test_laplace_mode_fixed_by_relabelling_is_one_copy():
    # The coefficients enter the likelihood only through their sum: every permutation is a
    # symmetry, and the one mode (all coefficients equal) is its own copy.
    y = np.random.default_rng(3).normal(1.0, 1.0, 20)
    with pm.Model() as model:
        beta = pm.Normal("beta", 0, 1, shape=3)
        pm.Normal("y", beta.sum(), 1, observed=y)
    exact = multivariate_normal(np.zeros(20), np.eye(20) + 3.0).logpdf(y)
    res = pm_evidence.laplace(model, restarts=2, random_seed=1, progressbar=False)
    assert res.diagnostics["copies"].tolist() == [1.0]
    assert res.log_evidence == pytest.approx(exact, abs=1e-6)


def test_bridge_counts_every_labelling(mixture_and_evidence):
    k, model, exact = mixture_and_evidence
    res = pm_evidence.bridge(model, draws=1000, tune=500, chains=2, random_seed=1,
                             progressbar=False)
    assert res.settings["components"] == [["mu", "w"]]
    assert abs(res.log_evidence - exact) < 3 * res.se + 0.01
