"""BIC at the MLE and the MAP against closed forms for linear regression."""

from __future__ import annotations

import numpy as np
import pymc as pm
import pytest
from scipy.stats import norm

import pymc_evidence as pm_evidence
from pymc_evidence.results import EvidenceWarning

from _linear import N_OBS, NOISE_SD, PRIOR_SD, linear_regression  # tests/_linear.py


@pytest.fixture(scope="module")
def linear():
    return linear_regression()


@pytest.fixture(scope="module")
def two_outputs():
    """Two-output regression, unknown noise sd (HalfNormal, log-transformed): 40 cases."""
    rng = np.random.default_rng(1)
    n, p = 40, 2
    X = rng.normal(size=(n, p))
    Y = X @ np.array([[1.0, -1.0], [0.5, 2.0]]) + 0.4 * rng.normal(size=(n, 2))
    with pm.Model() as model:
        B = pm.Normal("B", 0.0, 5.0, shape=(p, 2))
        sigma = pm.HalfNormal("sigma", 2.0)
        pm.Normal("Y", pm.math.dot(X, B), sigma, observed=Y)
    return model, X, Y


def test_bic_at_mle_equals_least_squares(linear):
    model, design, y = linear
    res = pm_evidence.bic(model, at="mle", random_seed=0, progressbar=False)
    beta_hat = np.linalg.lstsq(design, y, rcond=None)[0]
    max_log_lik = norm.logpdf(y, design @ beta_hat, NOISE_SD).sum()
    expected = max_log_lik - 4 / 2 * np.log(N_OBS)
    assert res.method == "bic" and res.se == 0.0 and not res.warnings
    assert res.log_evidence == pytest.approx(expected, abs=1e-8)
    row = res.diagnostics.iloc[0]
    assert res.diagnostics.index.name == "point"
    assert (row["k"], row["n"], row["at"]) == (4, N_OBS, "mle")
    assert res.settings["k"] == 4 and res.settings["n"] == N_OBS
    assert row.log_likelihood == pytest.approx(max_log_lik, abs=1e-8)
    assert row.penalty == pytest.approx(2 * np.log(N_OBS))
    assert res.bic == pytest.approx(-2 * expected)


def test_bic_at_map_uses_the_posterior_mode(linear):
    model, design, y = linear
    res = pm_evidence.bic(model, random_seed=0, progressbar=False)  # at="map" by default
    H = np.diag(PRIOR_SD**-2) + design.T @ design / NOISE_SD**2
    mode = np.linalg.solve(H, design.T @ y / NOISE_SD**2)
    log_lik = norm.logpdf(y, design @ mode, NOISE_SD).sum()
    assert res.settings["at"] == "map"
    assert res.log_evidence == pytest.approx(log_lik - 2 * np.log(N_OBS), abs=1e-8)
    assert res.diagnostics.log_prior.iloc[0] == pytest.approx(
        norm.logpdf(mode, 0, PRIOR_SD).sum(), abs=1e-8
    )


def test_n_and_k_are_overridable(linear):
    model, design, y = linear
    res = pm_evidence.bic(model, at="mle", n=10, k=2, random_seed=0, progressbar=False)
    beta_hat = np.linalg.lstsq(design, y, rcond=None)[0]
    max_log_lik = norm.logpdf(y, design @ beta_hat, NOISE_SD).sum()
    assert res.log_evidence == pytest.approx(max_log_lik - np.log(10), abs=1e-8)
    assert (res.settings["n"], res.settings["k"]) == (10, 2)


def test_mle_in_unconstrained_space_and_cases_not_scalars(two_outputs):
    model, X, Y = two_outputs
    res = pm_evidence.bic(model, at="mle", random_seed=1, progressbar=False)
    B_hat = np.linalg.lstsq(X, Y, rcond=None)[0]
    rss = np.sum((Y - X @ B_hat) ** 2)
    sigma2 = rss / Y.size  # MLE of the noise variance
    max_log_lik = -0.5 * Y.size * (np.log(2 * np.pi * sigma2) + 1)
    row = res.diagnostics.iloc[0]
    assert (row.k, row.n) == (5, 40)  # 4 weights + log sigma; 40 cases, not 80 scalars
    assert row.log_likelihood == pytest.approx(max_log_lik, abs=1e-7)
    assert res.log_evidence == pytest.approx(max_log_lik - 2.5 * np.log(40), abs=1e-7)


def test_bad_input_errors(linear):
    model, _, _ = linear
    with pytest.raises(ValueError, match=r"at must be one of \['map', 'mle'\], got 'foo'"):
        pm_evidence.bic(model, at="foo")
    with pytest.raises(ValueError, match=r"n must be an integer >= 1 \(the number of i.i.d. cases\)"):
        pm_evidence.bic(model, n=0)
    with pytest.raises(ValueError, match="k must be an integer >= 0"):
        pm_evidence.bic(model, k=-1)
    with pytest.raises(TypeError, match="n must be an integer or None"):
        pm_evidence.bic(model, n=2.5)
    with pytest.raises(ValueError, match="nothing to optimise"):
        pm_evidence.bic(model, restarts=0)


def test_model_from_context_and_same_seed(linear):
    model, _, _ = linear
    first = pm_evidence.bic(model, at="mle", random_seed=3, progressbar=False)
    with model:
        again = pm_evidence.bic(at="mle", random_seed=3, progressbar=False)
    assert again.log_evidence == first.log_evidence


def test_unidentified_mle_warns():
    """y ~ N(a + b, 1): the likelihood is flat along a − b, so the MLE is not a strict maximum;
    the maximum value itself (at a + b = ȳ) is still right."""
    y = np.array([0.3, -0.1, 0.5, 0.2, 0.9])
    with pm.Model() as model:
        a = pm.Normal("a", 0.0, 1.0)
        b = pm.Normal("b", 0.0, 1.0)
        pm.Normal("y", a + b, 1.0, observed=y)
    with pytest.warns(EvidenceWarning, match="not converge to a strict max"):
        res = pm_evidence.bic(model, at="mle", random_seed=0, progressbar=False)
    row = res.diagnostics.iloc[0]
    assert not row.converged
    max_log_lik = norm.logpdf(y, y.mean(), 1.0).sum()
    assert row.log_likelihood == pytest.approx(max_log_lik, abs=1e-8)
    assert res.log_evidence == pytest.approx(max_log_lik - np.log(5), abs=1e-8)
    # at the MAP the prior identifies the direction: no warning
    res = pm_evidence.bic(model, random_seed=0, progressbar=False)
    assert not res.warnings


def test_new_data_of_another_length_counts_its_cases():
    """After pm.set_data gives the data another length, n is the new number of cases (it was
    the first call's, cached with the compiled model): the BIC equals a fresh model's."""
    y = np.random.default_rng(3).normal(size=40)

    def normal_mean(data):
        with pm.Model() as model:
            mu = pm.Normal("mu", 0, 1)
            pm.Normal("y", mu, 1, observed=data, shape=data.shape)
        return model

    with pm.Model() as model:
        data = pm.Data("y_data", y[:10])
        mu = pm.Normal("mu", 0, 1)
        pm.Normal("y", mu, 1, observed=data, shape=data.shape)
    assert pm_evidence.bic(model, progressbar=False).n == 10
    with model:
        pm.set_data({"y_data": y})
    again = pm_evidence.bic(model, progressbar=False)
    fresh = pm_evidence.bic(normal_mean(y), progressbar=False)
    assert again.n == 40
    assert again.log_evidence == pytest.approx(fresh.log_evidence, abs=1e-8)
