"""Bridge sampling against exact evidences: each estimate within 3 reported SE and a fixed cap.

Exact truths: conjugate regression (closed form), Dirichlet–categorical (closed form), and a
hierarchical normal (eight schools, known scales) whose evidence is a 1-D quadrature over τ of
the Gaussian marginal in (μ, θ) — see :func:`pymc_evidence.testing.hierarchical_normal`.
"""

import numpy as np
import pymc as pm
import pytest
import xarray as xr

import pymc_evidence as pm_evidence
from pymc_evidence import testing
from pymc_evidence.results import EvidenceWarning

CAP = 0.3  # nats: besides the SE-relative bound, so that a huge SE cannot hide a bug
SEED = 2024
# Settings shared by bridge's own sampling and the explicit pm.sample calls below.
NUTS = dict(draws=1000, tune=1000, chains=4)
SAMPLE_KWARGS = dict(cores=1, nuts_sampler="pymc", compute_convergence_checks=False,
                     compile_kwargs={"mode": "CVM"})


def assert_close_to_exact(result, exact, k=3.0, cap=CAP):
    error = result.log_evidence - exact
    assert result.se > 0
    assert abs(error) <= k * result.se, f"error {error:.4f} > {k} × SE {result.se:.4f}"
    assert abs(error) <= cap, f"error {error:.4f} beyond {cap} nats"


def posterior_of(idata) -> xr.Dataset:
    """The posterior group of pm.sample's output on either stack."""
    posterior = idata["posterior"]
    return posterior if isinstance(posterior, xr.Dataset) else posterior.to_dataset()


def sample(model, seed, **extra):
    return pm.sample(**NUTS, random_seed=seed, progressbar=False, model=model,
                     **SAMPLE_KWARGS, **extra)


@pytest.fixture(scope="module")
def regression():
    model, exact = testing.conjugate_regression(dim=5)
    result = pm_evidence.bridge(model, **NUTS, random_seed=SEED, progressbar=False)
    return model, exact, result


@pytest.fixture(scope="module")
def hierarchical():
    """Eight schools, non-centred, sampled once with pm.sample (target_accept 0.95: no
    divergences), shared by the normal and warp3 tests."""
    model, exact = testing.hierarchical_normal()
    idata = sample(model, SEED, target_accept=0.95)
    return model, exact, idata


def test_conjugate_regression(regression):
    model, exact, result = regression
    assert result.method == "bridge"
    assert_close_to_exact(result, exact)
    assert not result.warnings
    row = result.diagnostics.iloc[0]
    assert row["converged"] and row["iterations"] < 50
    assert row["n_iter"] == row["n_proposal"] == 4 * 500
    assert row["n_fit"] == 4 * 500
    assert 0 < row["s1"] < 1 and row["s1"] + row["s2"] == pytest.approx(1)
    assert result.se == pytest.approx(np.sqrt(row["re2"]))
    assert row["re2"] == pytest.approx(row["re2_proposal"] + row["re2_posterior"])


def test_dirichlet_categorical():
    model, exact = testing.dirichlet_categorical(testing.ANNOTATOR_1, 3)
    result = pm_evidence.bridge(model, **NUTS, random_seed=SEED, progressbar=False)
    assert_close_to_exact(result, exact)
    assert not result.warnings
    # constrained draws come back on the simplex, named as pm.sample names them
    assert result.posterior["alpha"].shape == (4, 1000, 3)
    np.testing.assert_allclose(result.posterior["alpha"].sum(axis=-1), 1.0)


@pytest.mark.parametrize("method", ["normal", "warp3"])
def test_hierarchical_normal(hierarchical, method):
    model, exact, idata = hierarchical
    result = pm_evidence.bridge(model, idata=idata, method=method, random_seed=SEED,
                                progressbar=False)
    assert_close_to_exact(result, exact)
    assert not result.warnings
    assert result.diagnostics["method"].iloc[0] == method
    assert result.settings["sampled"] is False
    assert set(result.posterior) == {"mu", "tau", "z", "theta"}


def test_given_idata_equals_sampling_anew(regression):
    """bridge(model, random_seed=s) == bridge(model, idata=its own draws, s)."""
    model, _, sampled = regression
    given = pm_evidence.bridge(model, idata=sampled.to_arviz(), random_seed=SEED,
                               progressbar=False)
    assert given.log_evidence == sampled.log_evidence
    assert given.se == sampled.se
    for name in sampled.posterior:
        np.testing.assert_array_equal(given.posterior[name], sampled.posterior[name])
    assert given.diagnostics.equals(sampled.diagnostics)


def test_posterior_dataset_and_parent_dependent_bounds():
    """Draws given as a bare Dataset; a Uniform whose bounds depend on another variable is
    mapped through its own draws' bounds (exact forward transform), giving the same answer as
    the flat draws."""
    with pm.Model() as model:
        a = pm.Normal("a", 0.0, 1.0)
        b = pm.Uniform("b", a - 1.0, a + 2.0)
        pm.Normal("y", a + b, 1.0, observed=[0.4, 0.1, 0.7])
    density = pm_evidence.get_density(model)
    rng = np.random.default_rng(0)
    X = density.prior_draws(rng, 8)
    constrained = density.to_constrained(X)
    posterior = xr.Dataset(
        {name: (("chain", "draw"), constrained[name].reshape(2, 4)) for name in ("a", "b")}
    )
    from pymc_evidence.estimators.bridge import _unconstrained_draws

    np.testing.assert_allclose(_unconstrained_draws(density, posterior).reshape(8, -1), X,
                               atol=1e-12)


def test_same_seed_same_result_and_global_rng(hierarchical):
    model, _, idata = hierarchical
    state = np.random.get_state()[1].copy()
    a = pm_evidence.bridge(model, idata=idata, random_seed=3, progressbar=False)
    b = pm_evidence.bridge(model, idata=idata, random_seed=3, progressbar=False)
    c = pm_evidence.bridge(model, idata=idata, random_seed=4, progressbar=False)
    assert np.array_equal(np.random.get_state()[1], state)
    assert a.log_evidence == b.log_evidence and a.diagnostics.equals(b.diagnostics)
    assert a.log_evidence != c.log_evidence


def test_warnings_are_not_silent(hierarchical):
    """Too few draws: the relative error is large, and a single iteration cannot converge."""
    model, _, idata = hierarchical
    few = posterior_of(idata).isel(draw=slice(0, 20))
    with pytest.warns(EvidenceWarning) as record:
        result = pm_evidence.bridge(model, idata=few, max_iter=1, random_seed=0,
                                    progressbar=False)
    assert result.warning
    assert tuple(str(w.message) for w in record) == result.warnings
    assert any("did not converge in 1 iterations" in w for w in result.warnings)
    assert any("effective posterior draws enter the iteration" in w for w in result.warnings)


def test_compare_registers_bridge():
    assert pm_evidence.METHODS["bridge"] is pm_evidence.bridge
    models, exact = testing.annotators()
    table = pm_evidence.compare(models, method="bridge", random_seed=1, progressbar=False,
                                draws=1000, tune=500, chains=2)
    assert list(table.index) == ["indep", "same"]
    exact_log_bf = exact["indep"] - exact["same"]  # log 12.87 (Barber's slides)
    assert table["log_bayes_factor"].iloc[0] == pytest.approx(exact_log_bf, abs=0.1)
    assert (table["method"] == "bridge").all()


def test_to_arviz_round_trip(regression, tmp_path):
    _, _, result = regression
    path = tmp_path / "bridge.nc"
    result.to_netcdf(path)
    loaded = pm_evidence.load_result(path)
    assert loaded.log_evidence == result.log_evidence and loaded.se == result.se
    assert loaded.diagnostics["iterations"].iloc[0] == result.diagnostics["iterations"].iloc[0]


# ------------------------------------------------------------------------- bad input
def test_unknown_method(regression):
    model = regression[0]
    with pytest.raises(ValueError, match=r"method must be one of \['normal', 'warp3'\], got 'warp2'"):
        pm_evidence.bridge(model, method="warp2")


def test_idata_without_posterior(regression, hierarchical):
    model = regression[0]
    idata = hierarchical[2]
    if not isinstance(idata, xr.DataTree):  # ArviZ 0.x InferenceData
        no_posterior = type(idata)(sample_stats=idata.sample_stats)
    else:  # xarray.DataTree
        no_posterior = xr.DataTree.from_dict({"sample_stats": idata["sample_stats"].to_dataset()})
    with pytest.raises(ValueError, match="idata has no 'posterior' group"):
        pm_evidence.bridge(model, idata=no_posterior, progressbar=False)


def test_idata_missing_variable(hierarchical):
    model, _, idata = hierarchical
    posterior = posterior_of(idata)
    with pytest.raises(ValueError, match=r"no draws of free variable\(s\) \['z'\]"):
        pm_evidence.bridge(model, idata=posterior.drop_vars("z"), progressbar=False)


def test_idata_outside_the_support(hierarchical):
    """A draw the model cannot have (a negative scale) is named before any work, instead of
    failing inside the proposal's fit."""
    model, _, idata = hierarchical
    posterior = posterior_of(idata).copy(deep=True)
    posterior["tau"][0, 3] = -1.0
    with pytest.raises(ValueError, match=r"1 of \d+ posterior draws lie outside the support of "
                                         r"\['tau'\]"):
        pm_evidence.bridge(model, idata=posterior, progressbar=False)


def test_idata_wrong_type_and_options(regression):
    model = regression[0]
    with pytest.raises(TypeError, match="idata must be an arviz.InferenceData"):
        pm_evidence.bridge(model, idata={"w": np.zeros((2, 10, 5))})
    with pytest.raises(TypeError, match=r"sample_kwargs may not set \['draws'\]"):
        pm_evidence.bridge(model, sample_kwargs={"draws": 10})
    with pytest.raises(ValueError, match="tol must be > 0"):
        pm_evidence.bridge(model, tol=0)
    with pytest.raises(ValueError, match="at least 4"):
        posterior = xr.Dataset({"w": (("chain", "draw", "w_dim_0"), np.zeros((1, 3, 5)))})
        pm_evidence.bridge(model, idata=posterior, progressbar=False)
