"""The benchmark's extraction of ``pm.sample_smc``'s log evidence, on every layout seen so far.

``sample_stats["log_marginal_likelihood"]`` holds one entry per stage and chain (NaN until the
last stage); its layout differs between PyMC 5 and 6, with the number of chains, and when chains
ran different numbers of stages (ragged object arrays). Layouts below were recorded on PyMC 5.28
and 6.4.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from _scripts import load_script  # tests/_scripts.py
import xarray as xr



@pytest.fixture(scope="module")
def bench():
    return load_script("benchmarks/thermodynamic_vs_smc.py")


def _idata(values, dims, n_chains):
    """Minimal stand-in: the two groups the helper reads, as a dict of Datasets."""
    stats = xr.Dataset({"log_marginal_likelihood": xr.DataArray(values, dims=dims)})
    posterior = xr.Dataset({"p": xr.DataArray(np.zeros((n_chains, 3)), dims=("chain", "draw"))})
    return {"sample_stats": stats, "posterior": posterior}


def _obj(rows):
    out = np.empty(len(rows), dtype=object)
    out[:] = rows
    return out


NAN = math.nan


def test_regular_object_chain_stage(bench):
    # PyMC 5 and 6, 2 chains, same number of stages: object array (chain, stage).
    values = np.array([[NAN, NAN, -31.8], [NAN, NAN, -31.9]], dtype=object)
    got = bench.smc_log_evidence_per_chain(_idata(values, ("chain", "draw"), 2))
    np.testing.assert_allclose(got, [-31.8, -31.9])


def test_one_stage(bench):
    values = np.array([[-2.55], [-2.52]], dtype=object)
    got = bench.smc_log_evidence_per_chain(_idata(values, ("chain", "log_marginal_likelihood_dim_0"), 2))
    np.testing.assert_allclose(got, [-2.55, -2.52])


def test_one_chain_pymc5(bench):
    values = np.array([[NAN, NAN, NAN, -31.94]])
    got = bench.smc_log_evidence_per_chain(_idata(values, ("chain", "draw"), 1))
    np.testing.assert_allclose(got, [-31.94])


def test_one_chain_pymc6_stage_axis_labelled_chain(bench):
    values = np.array([NAN, NAN, NAN, -31.94])
    got = bench.smc_log_evidence_per_chain(_idata(values, ("chain",), 1))
    np.testing.assert_allclose(got, [-31.94])


def test_ragged_pymc5_chains_on_draw_axis(bench):
    # PyMC 5, chains ran 4 and 3 stages: shape (chain=1, draw=2) of lists.
    values = np.empty((1, 2), dtype=object)
    values[0, 0] = [NAN, NAN, NAN, -127.4]
    values[0, 1] = [NAN, NAN, -126.3]
    got = bench.smc_log_evidence_per_chain(_idata(values, ("chain", "draw"), 2))
    np.testing.assert_allclose(got, [-127.4, -126.3])


def test_ragged_pymc6(bench):
    # PyMC 6: shape (chain=2,) of lists.
    values = _obj([[NAN, NAN, NAN, -127.4], [NAN, NAN, -126.3]])
    got = bench.smc_log_evidence_per_chain(_idata(values, ("chain",), 2))
    np.testing.assert_allclose(got, [-127.4, -126.3])


def test_mismatch_raises(bench):
    values = np.array([[NAN, -1.0], [NAN, -2.0], [NAN, -3.0]], dtype=object)
    with pytest.raises(ValueError):
        bench.smc_log_evidence_per_chain(_idata(values, ("chain", "draw"), 2))


def test_estimate_is_log_mean_exp_and_se_over_chains(bench):
    est = bench.smc_estimate([-1.0, -3.0])
    assert est["log_z"] == pytest.approx(np.log((np.exp(-1.0) + np.exp(-3.0)) / 2))
    assert est["smc_mean_log"] == pytest.approx(-2.0)
    assert est["se"] == pytest.approx(np.std([-1.0, -3.0], ddof=1) / np.sqrt(2))


@pytest.mark.parametrize("chains", [1, 2])
def test_live_sample_smc(bench, chains):
    import pymc as pm

    from pymc_evidence import testing

    model, exact = testing.beta_binomial()
    idata = pm.sample_smc(
        draws=500, chains=chains, model=model, random_seed=1, progressbar=False, **bench.smc_kwargs()
    )
    got = bench.smc_log_evidence_per_chain(idata)
    assert got.shape == (chains,)
    assert np.all(np.abs(got - exact) < 0.5)
