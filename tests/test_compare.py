"""compare(): Barber's annotators by every method, table shape, weights and input handling."""

import warnings

import numpy as np
import pandas as pd
import pymc as pm
import pytest

import pymc_evidence as pm_evidence
from pymc_evidence import testing
from pymc_evidence.comparison import COLUMNS

LOG_BF_EXACT = np.log(12.87)  # Barber's slides, to the printed precision


@pytest.fixture(scope="module")
def annotators():
    return testing.annotators()


@pytest.fixture(scope="module")
def thermodynamic_table(annotators):
    models, _ = annotators
    return pm_evidence.compare(models, random_seed=11, progressbar=False)


def test_table_shape(thermodynamic_table):
    table = thermodynamic_table
    assert list(table.columns) == COLUMNS
    assert list(table.index) == ["indep", "same"]
    assert table.index.name == "model"
    assert list(table["rank"]) == [0, 1]
    assert table["weight"].sum() == pytest.approx(1.0)
    assert table["d_log_evidence"].iloc[0] == 0.0 and table["dse"].iloc[0] == 0.0
    assert np.isnan(table["log_bayes_factor"].iloc[-1])
    assert set(table.attrs["results"]) == {"indep", "same"}
    assert isinstance(table.attrs["results"]["indep"], pm_evidence.EvidenceResult)
    assert table.dtypes["warning"] == bool


def test_thermodynamic_bayes_factor(annotators, thermodynamic_table):
    _, exact = annotators
    table = thermodynamic_table
    assert np.log(12.87) == pytest.approx(exact["indep"] - exact["same"], abs=1e-3)
    log_bf = table.loc["indep", "log_bayes_factor"]
    assert abs(log_bf - LOG_BF_EXACT) <= 3 * table.loc["same", "dse"] + 1e-3
    for name in exact:
        assert abs(table.loc[name, "log_evidence"] - exact[name]) <= 3 * table.loc[name, "se"]
    # weight = posterior model probability under a uniform model prior
    assert table.loc["indep", "weight"] == pytest.approx(1 / (1 + np.exp(-log_bf)))


@pytest.mark.parametrize("method", ["laplace", "bic"])
def test_deterministic_methods_order(annotators, method):
    models, _ = annotators
    table = pm_evidence.compare(models, method=method, random_seed=0, progressbar=False)
    assert list(table.index) == ["indep", "same"]
    assert (table["method"] == method).all()


def test_list_input_and_names():
    model_a, _ = testing.beta_binomial(name="a")
    model_b, _ = testing.beta_binomial(alpha=1.0, beta=1.0)
    table = pm_evidence.compare([model_a, model_b], random_seed=0, progressbar=False, target_se=None)
    assert set(table.index) == {"a", "model_1"}


def test_prior_model_probs_follow_bayes_rule(annotators, thermodynamic_table):
    models, _ = annotators
    log_z = thermodynamic_table["log_evidence"]
    prior = {"indep": 0.1, "same": 0.9}
    table = pm_evidence.compare(models, prior_model_probs=prior, random_seed=11, progressbar=False)
    pd.testing.assert_series_equal(table["log_evidence"], log_z)  # same seed, same estimates
    odds = np.exp(log_z["indep"] - log_z["same"]) * prior["indep"] / prior["same"]
    assert table.loc["indep", "weight"] == pytest.approx(odds / (1 + odds))
    assert table.loc["same", "weight"] == pytest.approx(1 / (1 + odds))


def test_same_seed_same_table(annotators, thermodynamic_table):
    models, _ = annotators
    again = pm_evidence.compare(models, random_seed=11, progressbar=False)
    pd.testing.assert_frame_equal(again, thermodynamic_table)


def test_bad_input(annotators):
    models, _ = annotators
    with pytest.raises(ValueError, match="at least one model"):
        pm_evidence.compare([])
    twin_a, _ = testing.beta_binomial(name="twin")
    twin_b, _ = testing.beta_binomial(name="twin")
    with pytest.raises(ValueError, match="two models are named 'twin'"):
        pm_evidence.compare([twin_a, twin_b])
    with pytest.raises(ValueError, match="method must be one of"):
        pm_evidence.compare(models, method="harmonic_mean")
    with pytest.raises(TypeError, match="does not take option"):
        pm_evidence.compare(models, n_particle=10)
    with pytest.raises(ValueError, match="sum to 1"):
        pm_evidence.compare(models, prior_model_probs={"indep": 0.5, "same": 0.6})
    with pytest.raises(ValueError, match="missing"):
        pm_evidence.compare(models, prior_model_probs={"indep": 1.0})
    with pytest.raises(TypeError, match="not a pymc.Model"):
        pm_evidence.compare({"x": 3})
    with pm.Model() as flat:
        pm.Flat("mu")
        pm.Normal("y", 0, 1, observed=1.0)
    with pytest.raises(ValueError, match="model 'flat': free variable 'mu' has an improper prior"):
        pm_evidence.compare({"flat": flat, **models})


def normal_mean(y, name, data=False):
    with pm.Model(name=name) as model:
        mu = pm.Normal("mu", 0, 1)
        pm.Normal("y", mu, 1, observed=pm.Data("y_data", y) if data else y)
    return model


def test_models_of_different_data_are_named_before_sampling(monkeypatch):
    """Evidences of different data compare nothing (here y against log y, a classic slip):
    compare and cmc say so before sampling. The same values split or held otherwise are the
    same data."""
    y = np.exp(np.random.default_rng(0).normal(0.5, 0.3, size=12))
    same_split = pm.Model(name="split")
    with same_split:
        mu = pm.Normal("mu", 0, 1)
        pm.Normal("first", mu, 1, observed=y[::-1][:5])
        pm.Normal("rest", mu, 1, observed=y[::-1][5:])
    with pm.Model(name="derived") as derived:  # observed=an expression of pm.Data
        mu = pm.Normal("mu", 0, 1)
        pm.Normal("y", mu, 1, observed=2.0 * pm.Data("half", y / 2.0))
    models = [normal_mean(y, "y"), same_split, normal_mean(y, "y_data", data=True), derived,
              normal_mean(np.log(y), "log_y")]
    with pytest.warns(pm_evidence.EvidenceWarning) as caught:
        table = pm_evidence.compare(models, method="laplace", random_seed=0, progressbar=False)
    messages = [str(w.message) for w in caught if "observe different data" in str(w.message)]
    assert len(messages) == 1
    assert "['y', 'split', 'y_data', 'derived'] observe 12 values" in messages[0]
    # one model of the same data four ways: Laplace is exact here, so the four agree
    same = table.loc[["y", "split", "y_data", "derived"], "log_evidence"]
    assert np.ptp(same) < 1e-6
    assert "['log_y'] observe 12 values" in messages[0]

    class Sampled(Exception):
        pass

    def sampled(*args, **kwargs):
        raise Sampled

    from pymc_evidence.estimators import cmc
    monkeypatch.setattr(cmc, "_pilot_moves", sampled)
    with pytest.warns(pm_evidence.EvidenceWarning, match="observe different data"):
        with pytest.raises(Sampled):
            pm_evidence.cmc(models[-2:], progressbar=False)

    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*observe different data")
        pm_evidence.compare(models[:3], method="bic", progressbar=False)


def test_executor_gives_identical_table():
    from concurrent.futures import ProcessPoolExecutor

    models = {
        "informative": testing.beta_binomial()[0],
        "flat": testing.beta_binomial(alpha=1.0, beta=1.0)[0],
    }
    options = dict(random_seed=5, progressbar=False, target_se=None)
    sequential = pm_evidence.compare(models, **options)
    with ProcessPoolExecutor(max_workers=2) as executor:
        parallel = pm_evidence.compare(models, executor=executor, **options)
    pd.testing.assert_frame_equal(parallel, sequential)


def test_a_model_without_an_estimate_is_ranked_last_and_the_rest_keep_their_weights(
    thermodynamic_table,
):
    import dataclasses

    from pymc_evidence.comparison import _table

    results = dict(thermodynamic_table.attrs["results"])
    results["broken"] = dataclasses.replace(results["same"], log_evidence=np.nan)
    with pytest.warns(pm_evidence.EvidenceWarning, match="no evidence estimate for 'broken'"):
        table = _table(results, np.log(np.full(3, 1 / 3)), "thermodynamic")
    assert list(table.index) == ["indep", "same", "broken"]
    assert np.isnan(table.loc["broken", "weight"])
    assert table.loc[["indep", "same"], "weight"].to_numpy() == pytest.approx(
        thermodynamic_table["weight"].to_numpy())


def test_models_the_data_cannot_tell_apart_are_named(thermodynamic_table):
    assert thermodynamic_table.attrs["indistinguishable"] == []  # log BF 2.55, SE about 0.06
    first, _ = testing.beta_binomial(name="first")
    twin, _ = testing.beta_binomial(name="twin")  # the same model: a Bayes factor of 1
    with pytest.warns(pm_evidence.EvidenceWarning,
                      match=r"cannot be told apart .*'(first|twin)' and '(first|twin)': 0\.\d\d ±"):
        table = pm_evidence.compare([first, twin], random_seed=0, progressbar=False,
                                    target_se=None)
    assert table.attrs["indistinguishable"] == [tuple(table.index)]
