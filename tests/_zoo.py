"""The model zoo of test_zoo: models written as PyMC users write them, each with its exact log
evidence where one is known (closed form or one-dimensional quadrature), else ``None``."""

from __future__ import annotations

import numpy as np
import pymc as pm
from scipy import integrate, stats
from scipy.special import gammaln, logsumexp

SCHOOLS_Y = np.array([28.0, 8, -3, 7, -1, 1, 18, 12])
SCHOOLS_SIGMA = np.array([15.0, 10, 16, 11, 9, 11, 10, 18])


def _schools_exact() -> float:
    """mu ~ N(0, 5²) integrated in closed form (y ~ N(0, diag(σ² + τ²) + 25·11ᵀ)); τ ~
    HalfCauchy(5) by quadrature."""
    def density(tau):
        cov = np.diag(SCHOOLS_SIGMA**2 + tau**2) + 25.0
        log_lik = stats.multivariate_normal(np.zeros(8), cov).logpdf(SCHOOLS_Y)
        return np.exp(log_lik + 40.0) * stats.halfcauchy(scale=5).pdf(tau)

    value, _ = integrate.quad(density, 0, np.inf, limit=200, epsabs=0, epsrel=1e-10)
    return float(np.log(value) - 40.0)


def eight_schools(centred: bool):
    with pm.Model(coords={"school": np.arange(8)}) as model:
        mu = pm.Normal("mu", 0, 5)
        tau = pm.HalfCauchy("tau", 5)
        if centred:
            theta = pm.Normal("theta", mu, tau, dims="school")
        else:
            z = pm.Normal("z", 0, 1, dims="school")
            theta = pm.Deterministic("theta", mu + tau * z, dims="school")
        pm.Normal("y", theta, SCHOOLS_SIGMA, observed=SCHOOLS_Y, dims="school")
    return model, _schools_exact()


def complete_pooling():
    """Eight schools with τ = 0: y_j ~ N(mu, σ_j²), mu ~ N(0, 5²), so y ~ N(0, diag(σ²) + 25)."""
    with pm.Model() as model:
        mu = pm.Normal("mu", 0, 5)
        pm.Normal("y", mu, SCHOOLS_SIGMA, observed=SCHOOLS_Y)
    exact = stats.multivariate_normal(np.zeros(8), np.diag(SCHOOLS_SIGMA**2) + 25.0).logpdf(SCHOOLS_Y)
    return model, float(exact)


def logistic_regression():
    rng = np.random.default_rng(1)
    x = rng.normal(size=(60, 2))
    y = rng.binomial(1, 1 / (1 + np.exp(-(0.5 + x @ np.array([1.5, -1.0])))))
    with pm.Model() as model:
        intercept = pm.Normal("intercept", 0, 2)
        beta = pm.Normal("beta", 0, 2, shape=2)
        pm.Bernoulli("y", logit_p=intercept + pm.math.dot(x, beta), observed=y)
    return model, None


def poisson_glm():
    """pm.Data inputs, dims on every variable."""
    rng = np.random.default_rng(2)
    x = rng.normal(size=40)
    counts = rng.poisson(np.exp(1.0 + 0.6 * x))
    with pm.Model(coords={"obs": np.arange(40), "coef": ["intercept", "slope"]}) as model:
        x_data = pm.Data("x", x, dims="obs")
        beta = pm.Normal("beta", 0, 2, dims="coef")
        rate = pm.math.exp(beta[0] + beta[1] * x_data)
        pm.Poisson("counts", rate, observed=counts, dims="obs")
    return model, None


def _mixture_data():
    rng = np.random.default_rng(3)
    return np.concatenate([rng.normal(-2.0, 1.0, 25), rng.normal(2.0, 1.0, 25)])


def normal_mixture(ordered: bool):
    """Two unit-variance components with equal weights: symmetric in the means, so the ordered
    prior (renormalised) has the unordered model's evidence."""
    order = {"transform": pm.distributions.transforms.ordered} if ordered else {}
    with pm.Model() as model:
        means = pm.Normal("means", 0, 5, shape=2, **order)
        pm.NormalMixture("y", w=np.array([0.5, 0.5]), mu=means, sigma=1.0,
                         observed=_mixture_data())
    return model, None


def dirichlet_categorical_coords():
    labels = np.array([0, 2, 0, 2, 0, 0, 2, 1, 1, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1])
    u = np.ones(3)
    counts = np.bincount(labels, minlength=3)
    with pm.Model(coords={"label": ["happy", "sad", "normal"]}) as model:
        p = pm.Dirichlet("p", u, dims="label")
        pm.Categorical("labels", p, observed=labels)

    def log_norm(a):
        return gammaln(a).sum() - gammaln(a.sum())

    return model, float(log_norm(u + counts) - log_norm(u))


def lkj_mvnormal():
    rng = np.random.default_rng(4)
    data = rng.multivariate_normal([0.5, -0.5], [[1.0, 0.6], [0.6, 1.5]], size=30)
    with pm.Model(coords={"axis": ["a", "b"]}) as model:
        chol, _, _ = pm.LKJCholeskyCov("chol", n=2, eta=2.0, sd_dist=pm.HalfNormal.dist(2.0),
                                       compute_corr=True)
        mu = pm.Normal("mu", 0, 2, dims="axis")
        pm.MvNormal("y", mu, chol=chol, observed=data)
    return model, None


def deterministic_and_potential():
    """A regression whose likelihood is a pm.Potential over a Deterministic mean: y ~ N(X b,
    1), b ~ N(0, I), so y ~ N(0, I + X Xᵀ)."""
    rng = np.random.default_rng(5)
    design = rng.normal(size=(20, 2))
    y = design @ np.array([0.8, -0.4]) + rng.normal(size=20)
    with pm.Model() as model:
        b = pm.Normal("b", 0, 1, shape=2)
        mean = pm.Deterministic("mean", pm.math.dot(design, b))
        pm.Potential("likelihood", pm.logp(pm.Normal.dist(mean, 1.0), y).sum())
    exact = stats.multivariate_normal(np.zeros(20), np.eye(20) + design @ design.T).logpdf(y)
    return model, float(exact)


def imputed_observations():
    """NaN in observed data: PyMC imputes those entries as free variables, which integrate to
    one, so the evidence is that of the observed entries: y_obs ~ N(0, I + 11ᵀ) for mu ~ N(0, 1)."""
    y = np.array([0.3, np.nan, 1.1, 0.7, np.nan, 1.6, 0.2])
    with pm.Model() as model:
        mu = pm.Normal("mu", 0, 1)
        pm.Normal("y", mu, 1.0, observed=y)
    seen = y[~np.isnan(y)]
    exact = stats.multivariate_normal(np.zeros(seen.size), np.eye(seen.size) + 1.0).logpdf(seen)
    return model, float(exact)


def gp_marginal():
    """A Gaussian process regression, ``pm.gp.Marginal`` with an ExpQuad kernel whose length
    scale and amplitude have priors: y ~ N(0, η² K_ℓ + (σ² + jitter) I) given (ℓ, η), integrated
    over (log ℓ, log η) by the trapezoid rule on a grid (converged to 1e-9 at 200 × 200)."""
    rng = np.random.default_rng(0)
    x = np.linspace(0.0, 5.0, 10)
    y = np.sin(x) + rng.normal(0.0, 0.3, x.size)
    sigma, jitter = 0.3, 1e-6
    with pm.Model() as model:
        length_scale = pm.Gamma("length_scale", 2.0, 1.0)
        amplitude = pm.HalfNormal("amplitude", 1.0)
        gp = pm.gp.Marginal(cov_func=amplitude**2 * pm.gp.cov.ExpQuad(1, ls=length_scale))
        gp.marginal_likelihood("y", X=x[:, None], y=y, sigma=sigma, jitter=jitter)

    log_ls, log_amp = np.linspace(-7.0, 3.5, 200), np.linspace(-9.0, 2.5, 200)
    # K_ℓ = U diag(s) Uᵀ, so for every η the covariance's eigenvalues are η² s + σ² + jitter.
    s, u = np.linalg.eigh(np.exp(-0.5 * (x[:, None] - x) ** 2 / np.exp(log_ls)[:, None, None] ** 2))
    projected = np.einsum("lij,i->lj", u, y) ** 2
    var = np.exp(2 * log_amp)[None, :, None] * s[:, None, :] + sigma**2 + jitter
    log_lik = -0.5 * (np.log(2 * np.pi * var) + projected[:, None, :] / var).sum(-1)
    log_prior = ((stats.gamma(2.0).logpdf(np.exp(log_ls)) + log_ls)[:, None]
                 + (stats.halfnorm().logpdf(np.exp(log_amp)) + log_amp)[None, :])

    def log_trapezoid_weights(grid):
        w = np.full(grid.size, grid[1] - grid[0])
        w[[0, -1]] /= 2
        return np.log(w)

    log_weights = log_trapezoid_weights(log_ls)[:, None] + log_trapezoid_weights(log_amp)[None, :]
    return model, float(logsumexp(log_lik + log_prior + log_weights))


def discrete_latent():
    with pm.Model() as model:
        k = pm.Poisson("k", 3.0)
        pm.Normal("y", k, 1.0, observed=[2.1, 2.9, 3.4])
    return model, None


ZOO = {
    "eight_schools_centred": lambda: eight_schools(centred=True),
    "eight_schools_noncentred": lambda: eight_schools(centred=False),
    "logistic_regression": logistic_regression,
    "poisson_glm_data_dims": poisson_glm,
    "normal_mixture": lambda: normal_mixture(ordered=False),
    "normal_mixture_ordered": lambda: normal_mixture(ordered=True),
    "dirichlet_categorical_coords": dirichlet_categorical_coords,
    "lkj_mvnormal": lkj_mvnormal,
    "deterministic_and_potential": deterministic_and_potential,
    "imputed_observations": imputed_observations,
    "gp_marginal": gp_marginal,
}
