"""The compiled batched density (pymc_evidence.density) against PyMC's own single-point logps.

Every model is compiled once per module (module-scoped fixtures): a cold C compile of a graph
costs 15-20 s, a warm one (``~/.pytensor`` cache) about a second.
"""

from __future__ import annotations

import numpy as np
import pymc as pm
import pytest
from pytensor.link.vm import VMLinker

from pymc_evidence._compat import compile_mode
from pymc_evidence.density import DensityValues, ModelDensity, get_density, validate_model

SEED = 20240611
N_CASES = 200


# --------------------------------------------------------------------------- models
@pytest.fixture(scope="module")
def hier_model():
    """Hierarchical normal model; 200x2 observations, a second observed, a Potential, a Deterministic."""
    rng = np.random.default_rng(SEED)
    with pm.Model() as model:
        mu = pm.Normal("mu", 1.0, 2.0)
        sigma = pm.HalfNormal("sigma", 1.0)
        theta = pm.Normal("theta", mu, sigma, shape=3)
        pm.Deterministic("tau", 1.0 / sigma**2)
        pm.Normal("y", theta[None, :2], 1.0, observed=rng.normal([0.5, 1.5], 1.0, size=(N_CASES, 2)))
        pm.Normal("z", theta[2], 0.5, observed=rng.normal(1.0, 0.5, size=7))
        pm.Potential("pull", -0.5 * (theta[2] - mu) ** 2)
    return model


@pytest.fixture(scope="module")
def hier(hier_model):
    return get_density(hier_model)


@pytest.fixture(scope="module")
def reference(hier_model):
    """PyMC's own single-point functions of a point dict: total, prior and likelihood logps."""
    # PyMC 6 would compile these with Numba: slow and beside the point
    kwargs = dict(inputs=hier_model.value_vars, on_unused_input="ignore", mode=compile_mode("c"))
    return {
        "total": hier_model.compile_logp(mode=compile_mode("c")),
        "prior": hier_model.compile_fn(hier_model.varlogp, **kwargs),
        "lik": hier_model.compile_fn(hier_model.datalogp, **kwargs),
        "observed": hier_model.compile_fn(hier_model.observedlogp, **kwargs),
    }


@pytest.fixture(scope="module")
def points(hier):
    """Prior draws spread wider than the prior, so the comparison is not only near the mode."""
    rng = np.random.default_rng(SEED + 1)
    X = hier.prior_draws(rng, 8)
    return X + rng.normal(0.0, 0.5, size=X.shape)


@pytest.fixture(scope="module")
def values(hier, points):
    return hier(points)


@pytest.fixture(scope="module")
def untransformed():
    """sigma without its log transform, so a negative sigma is outside the support and an
    invalid parameter of y's Normal (the case PyMC guards with parameter checks)."""
    rng = np.random.default_rng(SEED + 2)
    with pm.Model() as model:
        pm.Normal("mu", 0.0, 1.0)
        sigma = pm.HalfNormal("sigma", 1.0, default_transform=None)
        pm.Normal("y", model["mu"], sigma, observed=rng.normal(0.3, 0.8, size=20))
    return ModelDensity(model)


# --------------------------------------------------------------------------- values
def _point(density, x):
    return {name: value[0] for name, value in density.split(x[None, :]).items()}


def test_layout(hier, points, values):
    assert isinstance(hier, ModelDensity)
    assert hier.names == ["mu", "sigma_log__", "theta"]
    assert hier.sizes == [1, 1, 3] and hier.dim == 5
    assert isinstance(values, DensityValues)
    K = len(points)
    assert values.log_prior.shape == values.log_likelihood.shape == (K,)
    assert values.grad_log_prior.shape == values.grad_log_likelihood.shape == (K, hier.dim)


def test_matches_pymc_logp(hier, reference, points, values):
    for k, x in enumerate(points):
        point = _point(hier, x)
        prior, lik = float(reference["prior"](point)), float(reference["lik"](point))
        np.testing.assert_allclose(values.log_prior[k], prior, rtol=1e-10, atol=1e-10)
        np.testing.assert_allclose(values.log_likelihood[k], lik, rtol=1e-10, atol=1e-10)
        # the split adds up to model.compile_logp() (free RVs with Jacobian + observed + Potentials)
        np.testing.assert_allclose(
            values.log_prior[k] + values.log_likelihood[k],
            float(reference["total"](point)),
            rtol=1e-10,
        )


def test_potential_is_on_likelihood_side(hier, reference, points, values):
    for k, x in enumerate(points):
        point = _point(hier, x)
        mu, theta = point["mu"], point["theta"]
        pull = -0.5 * (theta[2] - mu) ** 2
        np.testing.assert_allclose(
            values.log_likelihood[k], float(reference["observed"](point)) + pull, rtol=1e-10
        )


def test_batch_equals_single_points(hier, points, values):
    for k, x in enumerate(points):
        alone = hier(x[None, :])
        for batched, single in zip(values, alone):
            np.testing.assert_allclose(batched[k], single[0], rtol=1e-12, atol=1e-12)
    one = hier(points[0])  # a single (d,) vector is taken as a batch of one
    assert one.log_prior.shape == (1,)


def test_gradients_match_finite_differences(hier, points, values):
    h = 1e-5
    d = hier.dim
    X = points[:4]
    steps = h * np.eye(d)
    plus = hier((X[:, None, :] + steps).reshape(-1, d))  # all 2·K·d perturbations in two calls
    minus = hier((X[:, None, :] - steps).reshape(-1, d))
    for field, grad_field in (
        ("log_prior", "grad_log_prior"),
        ("log_likelihood", "grad_log_likelihood"),
    ):
        fd = (getattr(plus, field) - getattr(minus, field)).reshape(len(X), d) / (2 * h)
        exact = getattr(values, grad_field)[: len(X)]
        scale = np.maximum(1.0, np.abs(getattr(values, field)[: len(X), None]))
        np.testing.assert_allclose(fd, exact, rtol=1e-6, atol=1e-8 * scale.max())


def test_hessian_matches_finite_differences(hier, points):
    x = points[0]
    H = hier.hessian(x)
    assert H.shape == (hier.dim, hier.dim)
    np.testing.assert_allclose(H, H.T, rtol=1e-10, atol=1e-10)
    h = 1e-5
    steps = h * np.eye(hier.dim)
    plus, minus = hier(x + steps), hier(x - steps)
    grad = lambda v: v.grad_log_prior + v.grad_log_likelihood  # noqa: E731
    fd = (grad(plus) - grad(minus)) / (2 * h)
    np.testing.assert_allclose(fd, H, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("bad", ["nan", "negative sigma"])
def test_invalid_point_does_not_poison_batch(untransformed, bad):
    density = untransformed
    X = np.array([[0.1, 0.7], [0.0, 0.0], [-0.4, 1.3], [0.5, 0.2]])
    X[1] = [np.nan, 0.7] if bad == "nan" else [0.2, -1.0]
    values = density(X)
    assert not np.isfinite(values.log_prior[1] + values.log_likelihood[1])
    if bad == "negative sigma":
        assert values.log_prior[1] == -np.inf and values.log_likelihood[1] == -np.inf
    for k in (0, 2, 3):
        alone = density(X[k : k + 1])
        for batched, single in zip(values, alone):
            assert np.all(np.isfinite(batched[k]))
            np.testing.assert_array_equal(batched[k], single[0])


# --------------------------------------------------------------------------- prior draws
def test_prior_draw_moments(hier):
    """mu ~ N(1, 2), sigma ~ HalfNormal(1), theta ~ N(mu, sigma): exact moments within 5 SE."""
    n = 4000
    draws = hier.split(hier.prior_draws(np.random.default_rng(SEED + 3), n))
    assert draws["theta"].shape == (n, 3)
    euler_gamma = 0.5772156649015329
    samples = {
        "mu": (draws["mu"], 1.0, 4.0),
        # log|Z| for Z ~ N(0, 1): mean -(γ + log 2)/2, variance π²/8
        "log sigma": (draws["sigma_log__"], -(euler_gamma + np.log(2)) / 2, np.pi**2 / 8),
        # marginally theta_i has mean E[mu] and variance Var(mu) + E[sigma²] = 4 + 1
        **{f"theta[{i}]": (draws["theta"][:, i], 1.0, 5.0) for i in range(3)},
    }
    for label, (x, mean, var) in samples.items():
        x = np.ravel(x)
        dev = x - x.mean()
        se_mean = np.sqrt(var / n)
        se_var = np.sqrt((np.mean(dev**4) - np.mean(dev**2) ** 2) / n)
        assert abs(x.mean() - mean) < 5 * se_mean, (label, x.mean(), mean, se_mean)
        assert abs(x.var() - var) < 5 * se_var, (label, x.var(), var, se_var)
    # theta_i and theta_j share mu: covariance Var(mu) = 4
    cov = np.cov(draws["theta"].T)[0, 1]
    assert abs(cov - 4.0) < 5 * np.sqrt(5.0 * 5.0 / n), cov


def test_prior_draws_reproducible_and_leave_global_rng_alone(hier):
    state = np.random.get_state()[1].copy()
    a = hier.prior_draws(np.random.default_rng(7), 5)
    b = hier.prior_draws(np.random.default_rng(7), 5)
    c = hier.prior_draws(np.random.default_rng(8), 5)
    assert a.shape == (5, hier.dim)
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)
    np.testing.assert_array_equal(np.random.get_state()[1], state)


# --------------------------------------------------------------------------- conversions
def test_to_constrained(hier, points):
    out = hier.to_constrained(points)
    K = len(points)
    assert set(out) == {"mu", "sigma", "theta", "tau"}
    assert out["mu"].shape == (K,) and out["sigma"].shape == (K,) and out["theta"].shape == (K, 3)
    np.testing.assert_allclose(out["mu"], points[:, 0])
    np.testing.assert_allclose(out["sigma"], np.exp(points[:, 1]), rtol=1e-12)
    np.testing.assert_allclose(out["theta"], points[:, 2:])
    np.testing.assert_allclose(out["tau"], np.exp(-2 * points[:, 1]), rtol=1e-12)


def test_n_cases_is_leading_dimension_of_observed(hier):
    assert hier.n_cases == N_CASES  # y is 200x2 (and z has 7 entries): 200 cases, not 400 scalars


# --------------------------------------------------------------------------- backend, cache
def test_default_backend_is_c(hier):
    linker = hier._fn.maker.linker
    assert isinstance(linker, VMLinker)
    assert linker.c_thunks  # the "cvm" linker: C thunks, also on PyTensor 3 (default Numba)
    assert hier.backend == "c"


def test_numba_backend_matches_c(untransformed):
    """backend="numba" compiles with Numba (cold ≈ 15-30 s once, then cached in ~/.pytensor)."""
    from pytensor.link.numba.linker import NumbaLinker

    density = ModelDensity(untransformed.model, backend="numba")
    assert isinstance(density._fn.maker.linker, NumbaLinker)
    X = np.array([[0.1, 0.7], [-0.4, 1.3], [0.2, -1.0]])
    for numba_value, c_value in zip(density(X), untransformed(X)):
        np.testing.assert_allclose(numba_value, c_value, rtol=1e-10)


def test_unknown_backend_rejected(hier_model):
    with pytest.raises(ValueError, match="backend must be one of"):
        ModelDensity(hier_model, backend="jax")


def test_get_density_caches_per_model(hier_model, hier):
    assert get_density(hier_model) is hier
    with hier_model:
        assert get_density() is hier


# --------------------------------------------------------------------------- bad models
def _with_likelihood(make_prior):
    with pm.Model() as model:
        a = make_prior()
        pm.Normal("y", a, 1.0, observed=[0.1, -0.2, 0.3])
    return model


def _no_random_logp(value, mu):
    return -0.5 * (value - mu) ** 2 - 0.5 * np.log(2 * np.pi)


BAD_MODELS = {
    "flat": (lambda: _with_likelihood(lambda: pm.Flat("w_flat")), r"'w_flat'.*improper prior"),
    "halfflat": (
        lambda: _with_likelihood(lambda: pm.HalfFlat("s_halfflat")),
        r"'s_halfflat'.*improper prior",
    ),
    "discrete": (lambda: _with_likelihood(lambda: pm.Poisson("k_count", 3.0)), r"'k_count'.*discrete"),
    "custom without random": (
        lambda: _with_likelihood(lambda: pm.CustomDist("c_custom", 0.0, logp=_no_random_logp)),
        r"cannot draw from the prior of free variable 'c_custom'",
    ),
    # minibatch models, as PyMC's variational examples write them: a rescaled or random
    # likelihood has no evidence (with total_size the value was 10x the log likelihood's)
    "total_size": (lambda: _minibatch(total_size=30), r"'y_batch' was given total_size"),
    "minibatch": (lambda: _minibatch(), r"'y_batch' holds random data"),
}


def _minibatch(total_size=None):
    y = np.random.default_rng(0).normal(size=30)
    with pm.Model() as model:
        mu = pm.Normal("mu", 0.0, 1.0)
        data = y[:3] if total_size else pm.Minibatch(y, batch_size=3)
        pm.Normal("y_batch", mu, 1.0, observed=data, total_size=total_size)
    return model


@pytest.mark.parametrize("kind", list(BAD_MODELS))
@pytest.mark.filterwarnings("ignore:total_size not provided")  # PyMC's own, on pm.Minibatch
def test_bad_model_raises_naming_variable(kind):
    make, match = BAD_MODELS[kind]
    with pytest.raises(ValueError, match=match) as excinfo:
        ModelDensity(make())
    assert "Apply node" not in str(excinfo.value)  # a readable message, not PyTensor's debug dump


def test_no_likelihood_raises():
    with pm.Model(name="prior_only") as model:
        pm.Normal("a", 0.0, 1.0)
    with pytest.raises(ValueError, match=r"'prior_only'.*no likelihood term"):
        validate_model(model)
    with pytest.raises(ValueError, match="no likelihood term"):
        ModelDensity(model)


def test_potential_alone_is_a_likelihood():
    with pm.Model() as model:
        a = pm.Normal("a", 0.0, 1.0)
        pm.Potential("lik", -0.5 * (a - 1.0) ** 2)
    validate_model(model)  # does not raise


def test_not_a_model_raises():
    with pytest.raises(TypeError, match="expected a pymc.Model"):
        validate_model("model")


# --------------------------------------------------------------------------- MLP fast path
@pytest.fixture(scope="module")
def small_mlp():
    """A tanh MLP on 300 cases: big enough per point that batches are split into chunks."""
    rng = np.random.default_rng(SEED + 2)
    x = rng.normal(size=(300, 2))
    y = np.sin(x[:, :1]) + 0.1 * rng.normal(size=(300, 1))
    with pm.Model() as model:
        w_in = pm.Normal("w_in", 0.0, 1.0, shape=(2, 5))
        w_out = pm.Normal("w_out", 0.0, 1.0, shape=(5, 1))
        sigma = pm.HalfNormal("sigma", 0.5)
        pm.Normal("y", pm.math.tanh(x @ w_in) @ w_out, sigma, observed=y)
    return model


def test_mlp_chunks_and_numpy_tanh_match_pymc(small_mlp):
    density = ModelDensity(small_mlp)
    # the largest per-point intermediate is the 300×5 hidden layer
    assert density.chunk_rows == 2**17 // 1500
    ops = {type(node.op).__name__ for node in density._fn.maker.fgraph.apply_nodes}
    assert "_NumpyTanh" in ops
    rng = np.random.default_rng(SEED + 3)
    X = density.prior_draws(rng, 2 * density.chunk_rows + 3)  # three calls, the last partial
    values = density(X)
    lik = small_mlp.compile_fn(
        small_mlp.datalogp, inputs=small_mlp.value_vars, mode=compile_mode("c")
    )
    expected = [lik(_point(density, x)) for x in X]
    np.testing.assert_allclose(values.log_likelihood, expected, rtol=1e-10)
    single = [density(x[None]) for x in X[[0, -1]]]
    np.testing.assert_allclose(
        values.grad_log_likelihood[[0, -1]], [s.grad_log_likelihood[0] for s in single], rtol=1e-10
    )


def test_from_constrained_inverts_to_constrained():
    """Parent-dependent bounds, a vector scale and a simplex: back to the same flat points."""
    with pm.Model() as model:
        lower = pm.Normal("lower", 0.0, 1.0)
        pm.HalfNormal("scale", 1.0, shape=2)
        pm.Uniform("u", lower=lower, upper=lower + 2.0)
        p = pm.Dirichlet("p", np.ones(3))
        pm.Categorical("y", p, observed=[0, 2, 2])
    density = ModelDensity(model)
    X = density.prior_draws(np.random.default_rng(4), 6)
    np.testing.assert_allclose(density.from_constrained(density.to_constrained(X)), X,
                               rtol=1e-9, atol=1e-9)
    with pytest.raises(KeyError, match="scale"):
        density.from_constrained({"lower": np.zeros(6)})


def test_log_densities_match_the_full_evaluation(hier_model):
    """The gradient-free evaluation (nested sampling's) gives the same values, also in chunks."""
    density = get_density(hier_model)
    X = density.prior_draws(np.random.default_rng(5), 2 * density.chunk_rows + 3)
    full = density(X)
    log_prior, log_likelihood = density.log_densities(X)
    np.testing.assert_array_equal(log_prior, full.log_prior)
    np.testing.assert_array_equal(log_likelihood, full.log_likelihood)


@pytest.fixture(scope="module")
def nan_data_model():
    """A likelihood written as a pm.Potential over data with a NaN (no imputation): NaN at
    every parameter value."""
    y = np.array([0.1, np.nan, 0.3])
    with pm.Model() as model:
        mu = pm.Normal("mu")
        pm.Potential("lik", pm.logp(pm.Normal.dist(mu, 1.0), y).sum())
    return model


@pytest.mark.parametrize("method", ["thermodynamic", "nested", "laplace", "bridge", "cmc"])
def test_nan_data_is_reported_before_sampling(nan_data_model, method):
    import pymc_evidence as pm_evidence

    if method == "cmc":
        run = lambda: pm_evidence.cmc([nan_data_model, nan_data_model], progressbar=False)  # noqa: E731
    else:
        run = lambda: getattr(pm_evidence, method)(nan_data_model, progressbar=False)  # noqa: E731
    with pytest.raises(ValueError, match="(?i)not finite at .*check the data for NaN"):
        run()


def test_discrete_variable_error_suggests_no_estimator_that_refuses_it_too():
    with pytest.raises(ValueError, match="discrete") as excinfo:
        ModelDensity(BAD_MODELS["discrete"][0]())
    assert "bic" not in str(excinfo.value)


# --------------------------------------------------------------------------- ordered transforms
def _sum_model(transform, y):
    """y_i ~ N(mu_0 + mu_1, 1), mu i.i.d. N(0, 1): symmetric in the mu, so the renormalised
    ordered prior has the evidence of the unordered one, N(y; 0, I + 2)."""
    with pm.Model() as model:
        mu = pm.Normal("mu", 0, 1, shape=2, transform=transform)
        pm.Normal("y", mu[0] + mu[1], 1, observed=y)
    return model


def test_ordered_prior_is_sorted_and_renormalised():
    from scipy.stats import multivariate_normal, norm

    import pymc_evidence as pm_evidence

    y = np.random.default_rng(1).normal(1.0, 1.0, size=10)
    density = ModelDensity(_sum_model(pm.distributions.transforms.ordered, y))
    X = density.prior_draws(np.random.default_rng(0), 500)
    mu = density.to_constrained(X)["mu"]
    assert np.all(np.diff(mu, axis=1) > 0)
    # The density of the renormalised prior: 2! N(mu_0) N(mu_1) on mu_0 < mu_1, with the
    # transform's Jacobian (the log of the increment).
    log_prior, _ = density.log_densities(X)
    expected = np.log(2) + norm.logpdf(mu).sum(axis=1) + np.log(mu[:, 1] - mu[:, 0])
    np.testing.assert_allclose(log_prior, expected, rtol=1e-10)
    exact = multivariate_normal(np.zeros(10), np.eye(10) + 2.0).logpdf(y)
    result = pm_evidence.thermodynamic(density.model, random_seed=1, progressbar=False)
    assert abs(result.log_evidence - exact) <= 3 * result.se


TRANSFORMS = pm.distributions.transforms
ORDERED_REFUSED = {
    "elements differ": (
        lambda: pm.Normal("mu", [0.0, 1.0], 1.0, transform=TRANSFORMS.ordered),
        r"'mu'.*differs between elements"),
    "ordered not last": (
        lambda: pm.HalfNormal("mu", 1.0, shape=2,
                              transform=TRANSFORMS.Chain([TRANSFORMS.ordered, TRANSFORMS.log])),
        r"'mu' chains the ordered transform"),
    "positive after log": (
        lambda: pm.HalfNormal("mu", 1.0, shape=2, transform=TRANSFORMS.Ordered(positive=True)),
        r"default_transform=None"),
}


@pytest.mark.parametrize("case", list(ORDERED_REFUSED))
def test_ordered_priors_that_cannot_be_normalised_are_refused_before_compiling(case):
    make, match = ORDERED_REFUSED[case]
    with pytest.raises(ValueError, match=match):
        validate_model(_with_likelihood(lambda: make().sum()))


RANGE_TOO_SMALL = {
    "log on a normal": lambda: pm.Normal("x", 0.0, 1.0, transform=TRANSFORMS.log),
    "interval inside a normal's support": lambda: pm.Normal(
        "x", 0.0, 1.0, transform=TRANSFORMS.Interval(0.0, 1.0)),
    # transform= comes after the default transform: log-odds of x restricted to (0, 2)
    "interval after a uniform's own": lambda: pm.Uniform(
        "x", 0.0, 1.0, transform=TRANSFORMS.Interval(0.0, 2.0)),
}


@pytest.mark.parametrize("case", list(RANGE_TOO_SMALL))
def test_transform_whose_range_misses_prior_mass_is_refused(case):
    """PyMC evaluates such a prior restricted to the range, unnormalised: Laplace gave the
    restricted integral (about half the prior's mass: 0.7 nats off) without a word."""
    import pymc_evidence as pm_evidence

    model = _with_likelihood(lambda: RANGE_TOO_SMALL[case]())
    with pytest.raises(ValueError, match=r"'x' \(\w+\) has transform [\w ]+, whose range does "
                                         r"not cover its prior.*pm.Truncated"):
        pm_evidence.laplace(model, progressbar=False)


def test_transform_whose_range_covers_the_prior_is_accepted():
    """A range wider than the support costs nothing: the log prior is -inf outside it."""
    model = _with_likelihood(
        lambda: pm.Uniform("x", 0.0, 1.0, default_transform=None,
                           transform=TRANSFORMS.Interval(0.0, 2.0)))
    density = ModelDensity(model)
    x = density.to_constrained(density.prior_draws(np.random.default_rng(0), 100))["x"]
    assert np.all((x > 0) & (x < 1))


def test_prior_draws_on_the_support_boundary_are_told_apart_from_a_narrow_transform():
    """Dirichlet(0.02): NumPy's draws put weights at exactly 0 (about one in ten here), whose
    log-ratios are infinite. That is no transform missing prior mass (it was refused as one);
    the samplers that start from such draws say what is wrong and laplace skips them (and
    warns that its Gaussians miss a prior density that is unbounded at the boundary)."""
    import pymc_evidence as pm_evidence
    from pymc_evidence.density import check_prior_draws
    from pymc_evidence.results import EvidenceWarning

    with pm.Model() as model:
        pm.Dirichlet("w", a=np.full(4, 0.02))
        pm.Normal("y", 0.0, 1.0, observed=[0.3])
    density = ModelDensity(model)
    X = density.prior_draws(np.random.default_rng(0), 200)
    assert not np.isfinite(X).all()
    with pytest.raises(ValueError, match=r"prior draws of \['w'\] lie on the boundary"):
        check_prior_draws(density, X, *density.log_densities(X))
    with pytest.warns(EvidenceWarning, match="does not fit this posterior"):
        pm_evidence.laplace(model, random_seed=0, progressbar=False)


def test_simulator_likelihood_is_refused_before_compiling():
    """An ABC kernel is no likelihood: the estimators failed with PyTensor's errors."""
    def simulate(rng, a, size=None):
        return rng.normal(a, 1.0, size=size)

    with pm.Model() as model:
        a = pm.Normal("a", 0.0, 5.0)
        pm.Simulator("s", simulate, params=(a,), epsilon=1.0, observed=np.zeros(5))
    with pytest.raises(ValueError, match="'s' is a pm.Simulator"):
        validate_model(model)


def test_point_mass_prior_is_refused_before_compiling():
    """A free DiracDelta has no density to integrate: laplace gave a number and warnings."""
    with pytest.raises(ValueError, match="'a' is a DiracDelta"):
        validate_model(_with_likelihood(lambda: pm.DiracDelta("a", 0.5)))


PARTLY_DISCRETE = {
    # against exact evidences of y = (0.9, 1.4, 1.1) ~ N(x, 0.5²): chaining gave -3.23 ± 0.04
    # for -2.50 and -2.18 ± 0.04 for -2.36
    "censored": lambda: pm.Censored("a", pm.Normal.dist(0.0, 1.0), lower=-1.0, upper=1.0),
    "hurdle": lambda: pm.HurdleGamma("a", psi=0.7, alpha=2.0, beta=2.0),
    "mixture with a point": lambda: pm.Mixture(
        "a", w=[0.5, 0.5], comp_dists=[pm.Normal.dist(0.0, 1.0), pm.DiracDelta.dist(0.0)]),
}


@pytest.mark.parametrize("case", list(PARTLY_DISCRETE))
def test_priors_with_point_masses_are_refused_before_compiling(case):
    with pytest.raises(ValueError, match="'a' .* puts probability on single points"):
        validate_model(_with_likelihood(PARTLY_DISCRETE[case]))


def test_continuous_mixtures_and_unbounded_censoring_are_accepted():
    validate_model(_with_likelihood(lambda: pm.Mixture(
        "a", w=[0.5, 0.5], comp_dists=[pm.Normal.dist(0.0, 1.0), pm.Normal.dist(1.0, 1.0)])))
    validate_model(_with_likelihood(
        lambda: pm.Censored("a", pm.Normal.dist(0.0, 1.0), lower=None, upper=None)))


SUBSPACE_PRIORS = {
    # a ZeroSumNormal without its transform: laplace gave -14.57 for -14.78 (a warning about
    # the Hessian only), bridge and nested failed with PyMC's and NumPy's errors
    "ZeroSumNormal": lambda **kw: pm.ZeroSumNormal("a", sigma=1.0, shape=3, **kw),
    "Dirichlet": lambda **kw: pm.Dirichlet("a", np.ones(3), **kw),
    "StickBreakingWeights": lambda **kw: pm.StickBreakingWeights("a", 1.0, 2, **kw),
}


@pytest.mark.parametrize("case", list(SUBSPACE_PRIORS))
def test_lower_dimensional_support_without_its_transform_is_refused(case):
    make = SUBSPACE_PRIORS[case]
    with pytest.raises(ValueError, match="'a' .* support of lower dimension"):
        validate_model(_with_likelihood(lambda: make(default_transform=None)))
    validate_model(_with_likelihood(make))
    restored = TRANSFORMS.simplex if case != "ZeroSumNormal" else TRANSFORMS.ZeroSumTransform([-1])
    validate_model(_with_likelihood(lambda: make(default_transform=None, transform=restored)))


CAR_W = np.array([[0, 1, 0, 0], [1, 0, 1, 1], [0, 1, 0, 1], [0, 1, 1, 0.0]])


def test_car_density_is_normalised_as_prior_and_likelihood():
    """PyMC's CAR log density lacks −(d/2) log 2π + ½ Σ log D_i (its docstring: it "differs
    from the true CAR log density by an additive constant"): the evidence of this model came
    out 2.43 nats high. Both uses must be the Gaussian N(μ, (τ(D − αW))⁻¹) exactly: a latent
    vector and a batch of two observed ones."""
    from scipy.stats import multivariate_normal

    tau, alpha = 1.5, 0.6
    cov = np.linalg.inv(tau * (np.diag(CAR_W.sum(axis=1)) - alpha * CAR_W))
    Y = np.array([[0.3, -0.2, 0.5, 0.9], [0.1, 0.4, -0.3, 0.2]])
    with pm.Model() as model:
        mu = pm.Normal("mu", 0.0, 1.0)
        phi = pm.CAR("phi", mu=np.zeros(4), W=CAR_W, alpha=alpha, tau=tau)
        pm.CAR("Y", mu=mu + phi, W=CAR_W, alpha=alpha, tau=tau, observed=Y)
    density = ModelDensity(model)
    X = density.prior_draws(np.random.default_rng(0), 5)
    log_prior, log_lik = density.log_densities(X)
    values = density.to_constrained(X)
    mvn = multivariate_normal(np.zeros(4), cov)
    expected_prior = np.array([multivariate_normal(0.0, 1.0).logpdf(m) + mvn.logpdf(p)
                               for m, p in zip(values["mu"], values["phi"])])
    expected_lik = np.array([mvn.logpdf(Y - m - p).sum()
                             for m, p in zip(values["mu"], values["phi"])])
    # (PyMC stores alpha as float32: 0.6 becomes 0.60000002, worth 1e-7 nats here)
    np.testing.assert_allclose(log_prior, expected_prior, atol=1e-6)
    np.testing.assert_allclose(log_lik, expected_lik, atol=1e-6)


def test_sparse_car_adjacency_is_refused_with_the_fix():
    import pytensor.sparse
    import scipy.sparse

    with pm.Model() as model:
        W = pytensor.sparse.as_sparse_variable(scipy.sparse.csr_matrix(CAR_W))
        phi = pm.CAR("phi", mu=np.zeros(4), W=W, alpha=0.6, tau=1.5)
        pm.Normal("y", phi, 0.5, observed=np.zeros(4))
    with pytest.raises(NotImplementedError, match="pass it dense"):
        ModelDensity(model)


NORMALISED_PRIORS = {
    "CAR": lambda: pm.CAR("x", mu=np.zeros(4), W=CAR_W, alpha=0.6, tau=1.5),
    "ZeroSumNormal": lambda: pm.ZeroSumNormal("x", sigma=1.3, shape=3),
    "StickBreakingWeights": lambda: pm.StickBreakingWeights("x", alpha=1.7, K=2),
    "KroneckerNormal": lambda: pm.KroneckerNormal(
        "x", mu=np.zeros(4), covs=[np.array([[1, 0.3], [0.3, 1]]), np.array([[2, 0.5], [0.5, 1]])]),
    "MvStudentT": lambda: pm.MvStudentT(
        "x", nu=5, mu=np.zeros(2), scale=np.array([[1, 0.3], [0.3, 2]])),
    "AR": lambda: pm.AR("x", rho=[0.5], sigma=1.0, init_dist=pm.Normal.dist(0, 1), steps=3),
}


@pytest.mark.parametrize("case", list(NORMALISED_PRIORS))
def test_multivariate_prior_densities_integrate_to_one(case):
    """Laplace, bridge and cmc use the prior density's value: ∫ p(θ) dθ over the unconstrained
    space, by importance sampling from a t fitted to prior draws, is 1 (CAR's was 11)."""
    from scipy.special import logsumexp
    from scipy.stats import multivariate_t

    density = ModelDensity(_with_likelihood(lambda: NORMALISED_PRIORS[case]().sum()))
    draws = density.prior_draws(np.random.default_rng(0), 2000)
    proposal = multivariate_t(draws.mean(axis=0), 1.5 * np.cov(draws, rowvar=False), df=4)
    X = proposal.rvs(50_000, random_state=1).reshape(-1, density.dim)
    log_w = density.log_densities(X)[0] - proposal.logpdf(X)
    ess = np.exp(2 * logsumexp(log_w) - logsumexp(2 * log_w))
    assert ess > 5000
    assert abs(logsumexp(log_w) - np.log(len(X))) < 5 / np.sqrt(ess) + 0.01


def test_log_prior_overflow_far_out_is_no_infinite_density():
    """PyMC's LKJCholeskyCov log density overflows to +inf beyond a standard deviation of about
    2·10⁸; a sampler proposing such a point would accept it and stay."""
    with pm.Model() as model:
        pm.LKJCholeskyCov("chol", n=2, eta=2.0, sd_dist=pm.HalfNormal.dist(1.0))
        pm.Normal("y", 0.0, 1.0, observed=[0.3])
    density = ModelDensity(model)
    X = np.array([[24.7, -2.46, -5.5], [0.1, 0.2, -0.3]])
    log_prior = density(X).log_prior
    assert log_prior[0] == -np.inf and np.isfinite(log_prior[1])
    assert density.log_densities(X)[0][0] == -np.inf


@pytest.mark.parametrize("eta", [1.0, 2.0])
def test_lkj_prior_density_integrates_to_one(eta):
    """PyMC 5's LKJ normalising constant has its sign reversed (its density integrates to
    (4/3)² at n = 2, η = 2); the log prior here is normalised on both stacks: importance
    sampling of ∫ p(θ) dθ over the unconstrained space with a wide Gaussian gives 1."""
    from scipy.special import logsumexp

    with pm.Model() as model:
        pm.LKJCholeskyCov("chol", n=2, eta=eta, sd_dist=pm.HalfNormal.dist(2.0))
        pm.Normal("y", 0.0, 1.0, observed=[0.3])  # a likelihood, so that the model is valid
    density = ModelDensity(model)
    scale, n = 2.5, 200_000
    X = np.random.default_rng(0).normal(0.0, scale, size=(n, density.dim))
    log_prior, _ = density.log_densities(X)
    log_q = (-0.5 * np.sum(X**2, axis=1) / scale**2
             - density.dim * np.log(scale * np.sqrt(2 * np.pi)))
    log_w = log_prior - log_q
    log_integral = logsumexp(log_w) - np.log(n)
    ess = np.exp(2 * logsumexp(log_w) - logsumexp(2 * log_w))
    assert ess > 1000
    assert abs(log_integral) < 5 / np.sqrt(ess) + 0.02


def test_lkj_corr_builds_or_says_what_to_do():
    """pm.LKJCorr's determinant cannot be batched on PyMC 5 / PyTensor 2: a clear error naming
    the fix, not an AssertionError from inside PyTensor; on PyMC 6 the density builds."""
    from pymc_evidence._compat import PYMC_MAJOR

    with pm.Model() as model:
        pm.LKJCorr("r", n=3, eta=2.0)
        pm.Normal("y", pm.Normal("mu", 0, 2), 1.0, observed=[0.3, -0.2])
    if PYMC_MAJOR >= 6:
        assert ModelDensity(model).dim == 4
    else:
        with pytest.raises(NotImplementedError, match="batch of points.*LKJCholeskyCov"):
            ModelDensity(model)
