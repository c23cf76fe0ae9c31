"""Plots render under Agg; results round-trip through ArviZ and netCDF on both stacks."""

import matplotlib

matplotlib.use("Agg")

import arviz as az
import numpy as np
import pytest

import pymc_evidence as pm_evidence
from pymc_evidence import testing


@pytest.fixture(scope="module")
def result():
    model, _ = testing.conjugate_regression(dim=3)
    return pm_evidence.thermodynamic(model, random_seed=0, progressbar=False, target_se=None)


@pytest.fixture(scope="module")
def table():
    models, exact = testing.annotators()
    return pm_evidence.compare(models, random_seed=0, progressbar=False, target_se=None), exact


def test_plot_stages(result):
    left, right = pm_evidence.plot_stages(result)
    assert len(left.lines) + len(left.collections) > 0
    x, y = right.lines[0].get_data()
    np.testing.assert_allclose(x, result.diagnostics["lambda"])
    np.testing.assert_allclose(y, result.diagnostics["mean_log_likelihood"])


def test_plot_trace_energy(result):
    ax = pm_evidence.plot_trace_energy(result)
    assert len(ax.lines) >= 8  # one per tracked chain
    ax = pm_evidence.plot_trace_energy(result, stage=-1)
    last = result.trace[result.trace["stage"] == result.trace["stage"].max()]
    energy = -(last["log_prior"] + last["log_likelihood"])  # λ = 1 at the last stage
    plotted = np.concatenate([line.get_ydata() for line in ax.lines])
    np.testing.assert_allclose(np.sort(plotted), np.sort(energy))


def test_plot_evidence(table):
    table, exact = table
    ax = pm_evidence.plot_evidence(table, reference=exact)
    ax = pm_evidence.plot_evidence(table, x={"indep": 2, "same": 1}, ax=ax, label="again")
    assert len(ax.get_legend().get_texts()) == 3


def test_plot_stages_rejects_unstaged():
    result = pm_evidence.EvidenceResult("bic", -1.0, 0.0)
    with pytest.raises(ValueError, match="staged result"):
        pm_evidence.plot_stages(result)


def test_arviz_and_netcdf_round_trip(result, tmp_path):
    data = result.to_arviz()
    posterior = data["posterior"]
    assert posterior["w"].shape == (4, 256, 3)
    assert float(az.rhat(posterior["w"].values[..., 0])) < 1.1
    path = tmp_path / "result.nc"
    result.to_netcdf(path)
    loaded = pm_evidence.load_result(path)
    assert loaded.log_evidence == result.log_evidence and loaded.se == result.se
    assert loaded.method == "thermodynamic"
    np.testing.assert_allclose(loaded.diagnostics["log_ratio"], result.diagnostics["log_ratio"])
    np.testing.assert_allclose(loaded.posterior["w"], result.posterior["w"])
    assert loaded.estimates == result.estimates
    assert loaded.trace.shape == result.trace.shape


def test_arviz_own_plots(result):
    import matplotlib.pyplot as plt

    data = result.to_arviz()
    for plot in (az.plot_trace, az.plot_ess):
        plot(data, var_names=["w"])
        plt.close("all")
    summary = az.summary(data, var_names=["w"])
    assert len(summary) == 3
