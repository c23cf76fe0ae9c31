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
    result = pm_evidence.BICResult(-1.0, 0.0)
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
    assert type(loaded) is pm_evidence.ThermodynamicResult and loaded.method == "thermodynamic"
    np.testing.assert_allclose(loaded.diagnostics["log_ratio"], result.diagnostics["log_ratio"])
    np.testing.assert_allclose(loaded.posterior["w"], result.posterior["w"])
    np.testing.assert_equal(loaded.estimates, result.estimates)  # NaN (no mode search) == NaN
    assert loaded.trace.shape == result.trace.shape


def test_arviz_own_plots(result):
    import matplotlib.pyplot as plt

    data = result.to_arviz()
    for plot in (az.plot_trace, az.plot_ess):
        plot(data, var_names=["w"])
        plt.close("all")
    summary = az.summary(data, var_names=["w"])
    assert len(summary) == 3


def test_results_are_typed_and_frozen(result):
    import dataclasses

    assert isinstance(result, pm_evidence.ThermodynamicResult)
    assert result.n_groups == 4 and result.n_stages == len(result.diagnostics)
    assert result.estimates["ti_log_evidence"] == result.ti_log_evidence
    with pytest.raises(dataclasses.FrozenInstanceError):
        result.log_evidence = 0.0
    renamed = result.renamed("other")
    assert renamed.model_name == "other" and result.model_name != "other"
    assert renamed.log_evidence == result.log_evidence


@pytest.mark.parametrize("result_type", [pm_evidence.LaplaceResult, pm_evidence.BICResult,
                                          pm_evidence.BridgeResult, pm_evidence.CMCResult,
                                          pm_evidence.NestedResult])
def test_every_result_type_round_trips(result_type, tmp_path):
    import pandas as pd

    own = {"LaplaceResult": dict(n_modes=2, hyperparameters={"alpha_w": 1.5, "beta": 3.0}),
           "BICResult": dict(log_likelihood=-3.0, bic=9.5, k=2, n=10),
           "BridgeResult": dict(re2=0.01, cv=0.1, log_evidence_first_iteration=-4.2),
           "CMCResult": dict(probability=0.25, anchor=-3.5, n_iterations=400, hidden_units=2),
           "NestedResult": dict(run_log_evidence=(-4.1, -3.9), n_runs=2, information=2.5,
                                  insertion_z=0.4)}
    original = result_type(log_evidence=-4.0, se=0.1, model_name="m", settings={"a": [1, 2]},
                           diagnostics=pd.DataFrame({"x": [1.0, 2.0]}), warnings=["careful"],
                           **own[result_type.__name__])
    original.to_netcdf(tmp_path / "r.nc")
    loaded = pm_evidence.load_result(tmp_path / "r.nc")
    assert type(loaded) is result_type
    for name, value in own[result_type.__name__].items():
        assert getattr(loaded, name) == value and type(getattr(loaded, name)) is type(value)
    assert loaded.warnings == ("careful",) and loaded.settings == {"a": [1, 2]}


@pytest.mark.parametrize("name, result_type, fields", [
    ("thermodynamic", pm_evidence.ThermodynamicResult,
     {"ti_log_evidence": -2.4794876609828247, "n_stages": 2, "n_groups": 4}),
    ("laplace_mackay", pm_evidence.LaplaceResult,
     {"n_modes": 1, "hyperparameters": {"alpha_w": 1.3107732078655323,
                                         "gamma_w": 1.9576330586797845,
                                         "beta": 3.0441321829668166}}),
    ("cmc", pm_evidence.CMCResult,
     {"importance_log_evidence": -23.255643231304134, "importance_se": 0.003952571787640187,
      "anchor": -23.253538939804642, "n_iterations": 50}),
])
def test_files_written_before_results_were_typed_still_load(name, result_type, fields):
    from pathlib import Path

    loaded = pm_evidence.load_result(Path(__file__).parent / "data" / f"v0_{name}.nc")
    assert type(loaded) is result_type
    for field_name, value in fields.items():
        assert getattr(loaded, field_name) == value
        assert type(getattr(loaded, field_name)) is type(value)


def test_repr_is_the_summary(result):
    assert repr(result) == result.summary()
    assert "ti_log_evidence" in result.summary() and "log evidence =" in result.summary()


@pytest.mark.parametrize("result_type", [pm_evidence.LaplaceResult, pm_evidence.BICResult])
def test_an_approximation_is_not_shown_with_a_zero_standard_error(result_type):
    summary = result_type(log_evidence=-3.25, se=0.0).summary()
    assert "log evidence = -3.2500 (an approximation" in summary and "±" not in summary


def _labelled_ticks(axis) -> list[str]:
    axis.axes.figure.canvas.draw()
    low, high = sorted(axis.get_view_interval())
    return [t.get_text() for t in axis.get_ticklabels()
            if t.get_text() and low <= t.get_position()[axis is axis.axes.yaxis] <= high]


def test_plots_label_several_ticks_and_show_every_ratio_error(result):
    left, right = pm_evidence.plot_stages(result)
    assert len(_labelled_ticks(left.xaxis)) >= 3 and len(_labelled_ticks(right.xaxis)) >= 3
    errors = [a for a in left.figure.axes if a is not left and a.bbox.bounds == left.bbox.bounds]
    np.testing.assert_allclose(errors[0].lines[0].get_ydata(), result.diagnostics["log_ratio_se"])
    ax = pm_evidence.plot_trace_energy(result)
    assert len(_labelled_ticks(ax.yaxis)) >= 3


def test_plot_evidence_joins_only_a_numeric_series_and_shows_the_reference_in_front(table):
    table, exact = table
    ax = pm_evidence.plot_evidence(table, reference=exact)
    estimate, cross = ax.lines[0], ax.lines[-1]
    assert estimate.get_linestyle() == "None"  # two models by name are not a series
    assert cross.get_zorder() > estimate.get_zorder()
    ax = pm_evidence.plot_evidence(table, x={"indep": 2, "same": 1})
    assert ax.lines[0].get_linestyle() == "-"
