"""Laplace evidence: exact on Gaussian-linear models, symmetry, modes, MacKay's framework."""

from __future__ import annotations

import warnings
from itertools import permutations

import numpy as np
import pymc as pm
import pytest
from scipy.optimize import minimize
from scipy.stats import multivariate_normal, norm

import pymc_evidence as pm_evidence
from pymc_evidence import _optimize
from pymc_evidence.density import get_density
from pymc_evidence.results import EvidenceWarning
from pymc_evidence.symmetry import (
    MLPLayer, _assignment, align_units, detect_mlp_layers, log_stabiliser, resolve_layers,
    suggested_layers, transform_units,
)
from pymc_evidence.testing import liang_data, liang_mlp, unit_regression

from _linear import N_OBS, N_SLOPES, NOISE_SD, PRIOR_SD, linear_regression  # tests/_linear.py


# ------------------------------------------------------------------------- models
@pytest.fixture(scope="module")
def linear():
    return linear_regression()


def log_evidence_linear(design, y, prior_precision, noise_precision):
    """log N(y | 0, I/β + Φ Λ⁻¹ Φᵀ)."""
    cov = np.eye(len(y)) / noise_precision + design @ np.diag(1 / prior_precision) @ design.T
    return multivariate_normal(np.zeros(len(y)), cov).logpdf(y)


@pytest.fixture(scope="module")
def linear_result(linear):
    model, _, _ = linear
    return pm_evidence.laplace(model, restarts=3, random_seed=11, progressbar=False)


MLP_N, MLP_H = 30, 3
LAYER = MLPLayer(weights="w_in", bias="b_in", output="w_out")


@pytest.fixture(scope="module")
def mlp():
    """A small tanh MLP (1 input, 3 hidden units) with fixed Gaussian priors and noise."""
    rng = np.random.default_rng(3)
    x = np.linspace(-2, 2, MLP_N)[:, None]
    y = np.sin(1.5 * x[:, 0]) + 0.3 + 0.1 * rng.normal(size=MLP_N)
    with pm.Model() as model:
        w_in = pm.Normal("w_in", 0, 2.0, shape=(1, MLP_H))
        b_in = pm.Normal("b_in", 0, 2.0, shape=MLP_H)
        w_out = pm.Normal("w_out", 0, 1.0, shape=MLP_H)
        b_out = pm.Normal("b_out", 0, 1.0)
        f = pm.math.tanh(x @ w_in + b_in) @ w_out + b_out
        pm.Normal("y", f, 0.1, observed=y)
    return model


@pytest.fixture(scope="module")
def mlp_mode(mlp):
    """One mode of the MLP posterior and a copy of it under a permutation with sign flips."""
    density = get_density(mlp)
    objective = _optimize.joint_objective(density)
    start = density.prior_draws(np.random.default_rng(5), 1)[0]
    opt = _optimize.maximize(objective, start)
    copy = transform_units(density, LAYER, opt.x, permutation=[2, 0, 1], signs=[-1, 1, -1])
    return density, opt.x, copy


V, SD = 0.1, 3.0  # width of the potential's bumps; prior sd


@pytest.fixture(scope="module")
def bimodal():
    """Gaussian prior times a two-bump Potential in x[0]: modes at about ±2, a saddle at 0.

    Each bump times the Gaussian prior is Gaussian, so the two-mode Laplace sum is exact
    (the bumps overlap by e^-80) and log Z = log[2·√(2πv)·N(2 | 0, s²+v)·√(2π)·N(0 | 0, s²+1)].
    """
    with pm.Model() as model:
        x = pm.Normal("x", 0, SD, shape=2)
        bumps = pm.math.stack([-((x[0] - 2) ** 2) / (2 * V), -((x[0] + 2) ** 2) / (2 * V)])
        pm.Potential("bumps", pm.math.logsumexp(bumps) - 0.5 * x[1] ** 2)
    log_z = (
        np.log(2 * np.sqrt(2 * np.pi * V)) + norm.logpdf(2, 0, np.sqrt(SD**2 + V))
        + 0.5 * np.log(2 * np.pi) + norm.logpdf(0, 0, np.sqrt(SD**2 + 1))
    )
    return model, float(log_z)


# ------------------------------------------------------------------------- Laplace exactness
def test_exact_on_gaussian_linear_model(linear, linear_result):
    model, design, y = linear
    exact = log_evidence_linear(design, y, PRIOR_SD**-2, NOISE_SD**-2)
    res = linear_result
    assert res.method == "laplace" and res.se == 0.0
    assert abs(res.log_evidence - exact) < 1e-6
    assert not res.warnings

    diag = res.diagnostics
    assert diag.index.name == "mode"
    assert len(diag) == 1  # all three restarts merged into the one mode
    row = diag.iloc[0]
    assert row.hits == 3 and bool(row.converged) and bool(row.positive_definite)
    assert row.weight == pytest.approx(1.0)
    H = np.diag(PRIOR_SD**-2) + design.T @ design / NOISE_SD**2
    lam = np.linalg.eigvalsh(H)
    assert row.log_det_H == pytest.approx(np.linalg.slogdet(H)[1], abs=1e-9)
    assert row.min_eigenvalue == pytest.approx(lam[0], rel=1e-9)
    assert row.second_eigenvalue == pytest.approx(lam[1], rel=1e-9)
    assert row.max_eigenvalue == pytest.approx(lam[-1], rel=1e-9)
    # γ = d − tr(H⁻¹ Λ_prior) = Σ λ_i/(λ_i + α) for a Gaussian prior
    gamma = 4 - np.trace(np.linalg.solve(H, np.diag(PRIOR_SD**-2)))
    assert row.gamma == pytest.approx(gamma, abs=1e-6)
    assert 3.5 < gamma < 4
    # the MAP is the posterior mean
    mean = np.linalg.solve(H, design.T @ y / NOISE_SD**2)
    assert row.log_joint == pytest.approx(
        norm.logpdf(mean, 0, PRIOR_SD).sum() + norm.logpdf(y, design @ mean, NOISE_SD).sum(),
        abs=1e-9,
    )


def test_symmetry_adds_its_log_exactly(linear, linear_result):
    model, _, _ = linear
    res6 = pm_evidence.laplace(model, restarts=3, symmetry=6, random_seed=11, progressbar=False)
    assert res6.log_evidence - linear_result.log_evidence == pytest.approx(np.log(6), abs=1e-12)
    assert res6.settings["symmetry"] == 6
    assert res6.log_symmetry == pytest.approx(np.log(6))
    # an MLP's 2^h h! outgrows int64 from h = 17 (2^24 24! ≈ 1e31): still added exactly
    count = pm_evidence.mlp_symmetry(24, "tanh")
    assert count > np.iinfo(np.int64).max
    res24 = pm_evidence.laplace(model, restarts=3, symmetry=count, random_seed=11,
                                progressbar=False)
    expected = 24 * np.log(2) + sum(np.log(k) for k in range(1, 25))
    assert res24.log_evidence - linear_result.log_evidence == pytest.approx(expected, abs=1e-9)


def test_same_seed_same_answer_and_draws(linear, linear_result):
    model, design, y = linear
    res = pm_evidence.laplace(model, restarts=3, random_seed=11, progressbar=False, draws=4000)
    assert res.log_evidence == linear_result.log_evidence
    H = np.diag(PRIOR_SD**-2) + design.T @ design / NOISE_SD**2
    mean = np.linalg.solve(H, design.T @ y / NOISE_SD**2)
    cov = np.linalg.inv(H)
    assert res.posterior["b"].shape == (1, 4000, N_SLOPES)
    # draws from N(mean, H⁻¹): means within 4 MC standard errors
    se = np.sqrt(np.diag(cov) / 4000)
    assert np.all(np.abs(res.posterior["a"].mean() - mean[0]) < 4 * se[0])
    assert np.all(np.abs(res.posterior["b"].mean(axis=(0, 1)) - mean[1:]) < 4 * se[1:])


# ------------------------------------------------------------------------- symmetry counts
def test_mlp_symmetry_counts():
    assert pm_evidence.mlp_symmetry(3) == 48
    assert pm_evidence.mlp_symmetry(3, "relu") == 6
    assert pm_evidence.mlp_symmetry(3, "sigmoid") == 6
    assert pm_evidence.mlp_symmetry(4, "tanh") == 384
    assert pm_evidence.mlp_symmetry(0) == 1
    with pytest.raises(ValueError, match="unknown activation 'swishy'"):
        pm_evidence.mlp_symmetry(3, "swishy")
    with pytest.raises(ValueError, match="hidden_units must be an integer >= 0"):
        pm_evidence.mlp_symmetry(-1)
    with pytest.raises(TypeError, match="hidden_units must be an int"):
        pm_evidence.mlp_symmetry(2.0)


# ------------------------------------------------------------------------- MLP modes
def test_symmetric_copy_has_the_same_density(mlp_mode):
    density, x, copy = mlp_mode
    assert not np.allclose(x, copy)
    values = density(np.stack([x, copy]))
    joint = values.log_prior + values.log_likelihood
    assert joint[1] == pytest.approx(joint[0], abs=1e-9)
    # the Hessians are similar under a signed permutation: the same eigenvalues
    np.testing.assert_allclose(
        np.linalg.eigvalsh(density.hessian(copy)), np.linalg.eigvalsh(density.hessian(x)),
        rtol=1e-8, atol=1e-8,
    )
    np.testing.assert_allclose(align_units(density, [LAYER], x, copy), x, atol=1e-12)


def test_align_units_batch_maps_copies_back_point_by_point(mlp_mode):
    density, x, _ = mlp_mode
    rng = np.random.default_rng(4)
    points = x + 0.05 * rng.normal(size=(6, x.size))  # near x, so x's copy is the nearest
    copies = np.stack([
        transform_units(density, LAYER, p, permutation=rng.permutation(MLP_H),
                        signs=rng.choice([-1.0, 1.0], size=MLP_H))
        for p in points
    ])
    aligned = align_units(density, [LAYER], x, copies)
    np.testing.assert_allclose(aligned, points, atol=1e-12)
    np.testing.assert_array_equal(align_units(density, [LAYER], x, aligned), aligned)
    np.testing.assert_array_equal(aligned[2], align_units(density, [LAYER], x, copies[2]))


@pytest.mark.parametrize("h", [1, 2, 4, 5, 6])
def test_unit_assignment_is_optimal_for_every_point(h):
    # up to four units by trying every permutation at once, beyond by the Hungarian algorithm
    cost = np.random.default_rng(h).random((50, h, h))
    assigned = _assignment(cost)
    units = np.arange(h)
    best = [min(c[units, list(p)].sum() for p in permutations(units)) for c in cost]
    np.testing.assert_allclose([c[units, a].sum() for c, a in zip(cost, assigned)], best,
                               rtol=1e-12)
    assert all(sorted(a) == list(units) for a in assigned.tolist())


def test_symmetric_copies_are_merged(mlp, mlp_mode):
    density, x, copy = mlp_mode
    starts = np.stack([x, copy])
    merged = pm_evidence.laplace(
        mlp, restarts=0, start=starts, mlp_layers=LAYER, progressbar=False
    )
    assert len(merged.diagnostics) == 1
    row = merged.diagnostics.iloc[0]
    assert row.hits == 2 and bool(row.positive_definite) and bool(row.converged)
    assert merged.settings["symmetry"] == 48  # mlp_layers implies 2^3·3!
    # the same mode counted twice when the symmetry is not declared: log 2 too much
    unmerged = pm_evidence.laplace(mlp, restarts=0, start=starts, symmetry=48, mlp_layers=None,
                                   progressbar=False)
    assert len(unmerged.diagnostics) == 2
    assert unmerged.diagnostics.hits.tolist() == [1, 1]
    assert unmerged.log_evidence - merged.log_evidence == pytest.approx(np.log(2), abs=1e-6)
    # mode evidence = log joint + d/2 log 2π − ½ log det H + log 48
    d = density.dim
    expected = row.log_joint + 0.5 * d * np.log(2 * np.pi) - 0.5 * row.log_det_H + np.log(48)
    assert merged.log_evidence == pytest.approx(expected, abs=1e-9)
    assert 0 < row.gamma < d


def with_units(density, x, units: dict) -> np.ndarray:
    """``x`` with hidden unit ``k`` set to ``(w_in, b_in, w_out)`` for each ``k: values``."""
    values = {k: v[0].copy() for k, v in density.split(x[None]).items()}
    for k, (w, b, v) in units.items():
        values["w_in"][0, k], values["b_in"][k], values["w_out"][k] = w, b, v
    return np.concatenate([values[name].ravel() for name in density.names])


def test_the_symmetries_that_fix_a_point_are_counted(mlp_mode):
    """|G_θ| = Π n_c! · 2^dead over classes of units equal up to sign (tanh)."""
    density, x, _ = mlp_mode
    metric = np.eye(density.dim)
    values = {k: v[0] for k, v in density.split(x[None]).items()}
    units = {k: (values["w_in"][0, k], values["b_in"][k], values["w_out"][k]) for k in range(3)}
    count = lambda point: np.exp(log_stabiliser(density, [LAYER], point, metric))  # noqa: E731
    assert count(x) == pytest.approx(1.0)
    assert count(with_units(density, x, {2: units[1]})) == pytest.approx(2)  # coinciding
    w, b, v = units[1]
    assert count(with_units(density, x, {2: (-w, -b, -v)})) == pytest.approx(2)  # up to sign
    assert count(with_units(density, x, {0: (0, 0, 0)})) == pytest.approx(2)  # dead: its flip
    both_dead = with_units(density, x, {0: (0, 0, 0), 2: (0, 0, 0)})
    assert count(both_dead) == pytest.approx(2 * 2**2)  # swap, and each one's flip
    assert count(with_units(density, x, {0: units[1], 2: units[1]})) == pytest.approx(6)
    # within the radius in the metric's distance, not beyond it
    nearly = with_units(density, x, {2: (w + 0.6, b, v)})  # the swap moves it by 0.6·√2
    assert count(nearly) == pytest.approx(2)
    assert np.exp(log_stabiliser(density, [LAYER], nearly, metric, radius=0.8)) == 1
    relu = MLPLayer(weights="w_in", bias="b_in", output="w_out", activation="relu")
    assert np.exp(log_stabiliser(density, [relu], both_dead, metric)) == pytest.approx(2)


def test_a_mode_that_the_symmetries_fix_stands_for_fewer_copies():
    """Three exchangeable units seen only through their sum: the posterior is one Gaussian
    whose mode has all units equal, fixed by all 3! permutations, so it is its own copy and
    log S must not be added (it was: log Z came out log 6 = 1.79 nats high)."""
    rng = np.random.default_rng(0)
    x = rng.uniform(-1, 1, (25, 2))
    y = 0.3 + x @ [0.8, -0.5] + 0.4 * x[:, 0] ** 2 + 0.5 * rng.normal(size=25)
    model, exact = unit_regression(3, x, y)
    layer = MLPLayer("W", output="v", bias="b", activation="relu")
    res = pm_evidence.laplace(model, mlp_layers=layer, restarts=2, random_seed=1,
                              progressbar=False)
    assert res.log_evidence == pytest.approx(exact, abs=1e-6)
    assert res.diagnostics.copies.tolist() == [1.0] and res.log_symmetry == pytest.approx(
        np.log(6))
    # the check counts only one copy's domain, whatever the stabiliser: ~1/6 of the draws,
    # every weight equal (the posterior is the Gaussian); the fraction's noise is ~0.07 nats
    assert res.importance_ess == pytest.approx(1000 / 6, rel=0.3)
    assert abs(res.importance_log_evidence - exact) < 0.3
    assert not res.warnings
    # a symmetry given by hand is the user's count of copies, used as given
    given = pm_evidence.laplace(model, mlp_layers=layer, symmetry=6, restarts=2, random_seed=1,
                                check_draws=0, progressbar=False)
    assert given.log_evidence - exact == pytest.approx(np.log(6), abs=1e-6)


def test_mlp_layers_dict_form_and_bad_names(mlp, mlp_mode):
    density, x, copy = mlp_mode
    res = pm_evidence.laplace(
        mlp,
        restarts=0,
        start=np.stack([copy, x]),
        mlp_layers={"weights": "w_in", "bias": "b_in", "output": "w_out"},
        symmetry=1,
        progressbar=False,
    )
    assert res.diagnostics.hits.tolist() == [2]
    assert res.settings["symmetry"] == 1  # an explicit symmetry wins
    with pytest.raises(ValueError, match="'w_hidden' is not an untransformed free variable"):
        pm_evidence.laplace(mlp, restarts=1, mlp_layers=MLPLayer("w_hidden", "w_out"))


def test_an_mlp_layer_is_recognised_by_default_and_named_when_declined(mlp, mlp_mode):
    """The model of this file, written as users write MLPs: by default its layer is recognised
    and the copies counted as if it were given; with mlp_layers=None the warning names the
    layer and exactly the log S the estimate then lacks."""
    assert detect_mlp_layers(mlp) == [LAYER]
    density, x, _ = mlp_mode
    with pytest.warns(pm_evidence.EvidenceWarning,
                      match=r"looks like a neural network .* 48 symmetric copies.* 3\.87 nats too "
                            r"low.*mlp_layers=MLPLayer\('w_in', bias='b_in', output='w_out'\)"):
        bare = pm_evidence.laplace(mlp, restarts=0, start=x[None], check_draws=0,
                                   mlp_layers=None, progressbar=False)
    declared = pm_evidence.laplace(mlp, restarts=0, start=x[None], mlp_layers=LAYER,
                                   check_draws=0, progressbar=False)
    assert declared.log_evidence - bare.log_evidence == pytest.approx(np.log(48), abs=1e-9)
    assert not declared.warnings
    default = pm_evidence.laplace(mlp, restarts=0, start=x[None], check_draws=0,
                                  progressbar=False)
    assert default.log_evidence == declared.log_evidence and not default.warnings
    assert default.settings["mlp_layers"] == [vars(LAYER)]
    explicit = pm_evidence.laplace(mlp, restarts=0, start=x[None], symmetry=1, check_draws=0,
                                   mlp_layers=None, progressbar=False)
    assert explicit.log_evidence == bare.log_evidence and not explicit.warnings


def test_every_layer_of_a_deeper_network_is_recognised():
    """The second layer's inputs are the first layer's activations, not data: it is found too,
    so that laplace counts both layers' copies (48 · 8)."""
    from _deep_mlp import LAYERS, two_layer_mlp

    model = two_layer_mlp(3, 2, points=6)
    assert detect_mlp_layers(model) == list(LAYERS)
    assert resolve_layers("auto", model, get_density(model)) == list(LAYERS)
    res = pm_evidence.laplace(model, restarts=1, check_draws=0, random_seed=0,
                              progressbar=False)
    assert res.settings["symmetry"] == 48 * 8


def test_no_layer_is_recognised_where_there_is_none(linear):
    assert detect_mlp_layers(linear[0]) == []
    x = np.linspace(-2, 2, 20)
    with pm.Model() as squashed:  # a tanh of one scalar coefficient: no hidden units
        a = pm.Normal("a", 0, 1)
        pm.Normal("y", pm.math.tanh(a * x), 1.0, observed=np.sin(x))
    assert detect_mlp_layers(squashed) == []
    labels = (np.sin(np.outer(x, [1.0, 2.0, 3.0])) > 0).astype(int)
    with pm.Model() as multilabel:  # sigmoid(x W + b) with 2-D W, but no hidden layer
        w = pm.Normal("w", 0, 1, shape=(1, 3))
        b = pm.Normal("b", 0, 1, shape=3)
        pm.Bernoulli("y", p=pm.math.sigmoid(x[:, None] @ w + b), observed=labels)
    # the form of a layer whose output weights are integrated out: a candidate, which the
    # symmetry check rejects (each column belongs to its label)
    assert detect_mlp_layers(multilabel) == [MLPLayer("w", bias="b", activation="sigmoid")]
    density = get_density(multilabel)
    assert suggested_layers(multilabel, density) == []
    assert resolve_layers("auto", multilabel, density) == []
    with warnings.catch_warnings():
        warnings.simplefilter("error", EvidenceWarning)  # no "looks like a neural network"
        pm_evidence.laplace(multilabel, restarts=1, check_draws=0, random_seed=0,
                            progressbar=False)


@pytest.mark.slow  # an MLP run: a minute or more on a 2-core machine
def test_a_layer_whose_output_weights_are_integrated_out_is_recognised():
    """Liang's MLP integrates the output weights out: its layer is found without them, confirmed
    by the symmetry check, aligned by "auto" and suggested by laplace with the log S it lacks
    when declined."""
    model = liang_mlp(2, *liang_data(seed=1, n=30))
    density = get_density(model)
    layer = MLPLayer("z_in", bias="z_bias")
    assert detect_mlp_layers(model) == suggested_layers(model, density) == [layer]
    assert resolve_layers("auto", model, density) == [layer]
    start = density.prior_draws(np.random.default_rng(1), 1)
    with pytest.warns(EvidenceWarning, match=r"8 symmetric copies.* 2\.08 nats too low.*"
                                             r"mlp_layers=MLPLayer\('z_in', bias='z_bias'\)"):
        pm_evidence.laplace(model, restarts=0, start=start, check_draws=0, mlp_layers=None,
                            progressbar=False)


def test_a_recognised_layer_is_used_only_if_its_units_are_exchangeable():
    """What mlp_layers="auto" keeps: the layer of an MLP whose units' priors are exchangeable,
    not one with unit-specific prior scales or a bias prior off zero (sign flips break it)."""
    x = np.linspace(-1, 1, 20)[:, None]

    def mlp(w_sd=1.0, b_mean=0.0):
        with pm.Model() as model:
            w = pm.Normal("w_in", 0, w_sd, shape=(1, 2))
            b = pm.Normal("b_in", b_mean, 1, shape=2)
            v = pm.Normal("w_out", 0, 1, shape=2)
            pm.Normal("y", pm.math.tanh(x @ w + b) @ v, 0.1, observed=np.sin(3 * x[:, 0]))
        return model, get_density(model)

    for model, density in (mlp(np.array([[1.0, 3.0]])), mlp(b_mean=0.5)):
        assert detect_mlp_layers(model) == [LAYER]
        assert resolve_layers("auto", model, density) == []
    model, density = mlp()
    assert resolve_layers("auto", model, density) == [LAYER]
    assert resolve_layers(None, model, density) == []


# ------------------------------------------------------------------------- modes and saddles
def test_two_modes_summed_exactly(bimodal):
    model, exact = bimodal
    # symmetry=1: the two modes as distinct ones (by default they are one mode's sign flips)
    res = pm_evidence.laplace(model, restarts=6, random_seed=2, symmetry=1, progressbar=False)
    diag = res.diagnostics
    assert len(diag) == 2 and diag.hits.sum() == 6
    assert diag.weight.to_numpy() == pytest.approx([0.5, 0.5], abs=1e-9)
    assert abs(res.log_evidence - exact) < 1e-6  # PyMC float32-rounds log √(2π)
    assert res.log_evidence_top_mode == pytest.approx(exact - np.log(2), abs=1e-6)
    # the modes themselves: x[0] = ±(2/v)/(1/s² + 1/v), x[1] = 0, one row per diagnostics row
    mode_x0 = (2 / V) / (1 / SD**2 + 1 / V)
    assert res.modes["x"].shape == (2, 2)
    np.testing.assert_allclose(np.sort(res.modes["x"][:, 0]), [-mode_x0, mode_x0], rtol=1e-8)
    np.testing.assert_allclose(res.modes["x"][:, 1], 0.0, atol=1e-8)
    # By default x -> -x is found to be a symmetry: one mode standing for two copies.
    res = pm_evidence.laplace(model, restarts=6, random_seed=2, progressbar=False)
    assert res.settings["symmetries"] == [{"kind": "sign", "variables": ["x"], "copies": 2}]
    assert res.diagnostics.copies.tolist() == [2.0] and res.diagnostics.hits.sum() == 6
    assert abs(res.log_evidence - exact) < 1e-6


def test_saddle_is_climbed_off(bimodal):
    model, exact = bimodal
    # x = 0 is a saddle with zero gradient, where L-BFGS stops at once: H's eigenvalues there
    # are 1/s² − (4/v² − 1/v) along x[0] and 1/s² + 1 along x[1].
    objective = _optimize.joint_objective(get_density(model))
    at_saddle = _optimize.maximize(objective, np.zeros(2))
    assert np.all(at_saddle.x == 0.0)
    res = pm_evidence.laplace(model, restarts=0, start={"x": [0.0, 0.0]}, symmetry=1,
                              progressbar=False)
    row = res.diagnostics.iloc[0]
    assert len(res.diagnostics) == 1 and row.saddle_escapes == 1 and row.included
    assert res.log_evidence == pytest.approx(exact - np.log(2), abs=1e-6)  # one of two modes
    assert not res.warnings
    # with restarts both modes are found and the saddle start joins one of them
    res = pm_evidence.laplace(
        model, restarts=6, start={"x": [0.0, 0.0]}, random_seed=2, symmetry=1, progressbar=False
    )
    assert res.diagnostics.included.tolist() == [True, True]
    assert res.diagnostics.hits.sum() == 7
    assert abs(res.log_evidence - exact) < 1e-6  # PyMC float32-rounds log √(2π)


def test_flat_direction_warns_and_reports_finite_diagnostics():
    # The Potential cancels the prior's curvature along x[0] up to 1e-14: the log joint is flat
    # there to roundoff, so H is not safely positive definite, and there is nothing to climb.
    curvature = 1e-14
    with pm.Model() as model:
        x = pm.Normal("x", 0, SD, shape=2)
        pm.Potential("flat", (1 / SD**2 - curvature) * x[0] ** 2 / 2 - 0.5 * x[1] ** 2)
    with pytest.warns(EvidenceWarning) as record:
        res = pm_evidence.laplace(model, restarts=0, start={"x": [0.5, 0.0]}, progressbar=False)
    messages = tuple(str(w.message) for w in record)
    assert any("not positive definite" in m for m in messages)
    assert any("no positive-definite mode" in m for m in messages)
    assert res.warnings == messages
    row = res.diagnostics.iloc[0]
    assert row.saddle_escapes == 0
    assert row.min_eigenvalue == pytest.approx(curvature, abs=1e-15)
    assert row.max_eigenvalue == pytest.approx(1 / SD**2 + 1, rel=1e-9)
    assert np.isfinite(row.log_det_H) and np.isfinite(row.log_joint)
    assert not row.positive_definite and not row.included
    assert np.isnan(row.log_evidence) and np.isnan(res.log_evidence)


# ------------------------------------------------------------------------- MacKay framework
def test_mackay_framework_on_linear_model(linear):
    model, design, y = linear
    res = pm_evidence.laplace(
        model,
        framework="mackay",
        groups={"intercept": "a", "slopes": ["b"]},
        noise="y",
        restarts=2,
        random_seed=0,
        progressbar=False,
    )
    assert not res.warnings
    row = res.diagnostics.iloc[0]
    assert len(res.diagnostics) == 1 and bool(row.hyper_converged)
    alpha = np.array([row.alpha_intercept, row.alpha_slopes])
    beta = row.beta

    def log_ev(log_hyper):
        a0, a1, b = np.exp(log_hyper)
        return log_evidence_linear(design, y, np.array([a0, a1, a1, a1]), b)

    # For a linear model eq. 10's fixed point is the exact maximum of p(D | α, β)
    best = minimize(lambda z: -log_ev(z), np.zeros(3), method="BFGS", options={"gtol": 1e-10})
    np.testing.assert_allclose([*alpha, beta], np.exp(best.x), rtol=1e-5)
    at_fit = log_ev(np.log([*alpha, beta]))
    assert row.log_evidence_given_hyper == pytest.approx(at_fit, abs=1e-8)
    # γ_k = W_k − α_k Tr_k(A⁻¹); eq. 11 adds ½ Σ ln(2/γ_k) + ½ ln(2/(N − γ))
    A = np.diag([alpha[0], *[alpha[1]] * 3]) + beta * design.T @ design
    inv_diag = np.diag(np.linalg.inv(A))
    gamma = np.array([1 - alpha[0] * inv_diag[0], 3 - alpha[1] * inv_diag[1:].sum()])
    np.testing.assert_allclose([row.gamma_intercept, row.gamma_slopes], gamma, rtol=1e-8)
    assert row.gamma == pytest.approx(gamma.sum(), rel=1e-8)
    hyper = 0.5 * np.log(2 / gamma).sum() + 0.5 * np.log(2 / (N_OBS - gamma.sum()))
    assert res.log_evidence == pytest.approx(at_fit + hyper, abs=1e-8)
    assert res.hyperparameters["beta"] == pytest.approx(beta)
    # eq. 10: α_k = γ_k/‖ŵ_k‖² and 1/β = Σ residual² / (N − γ) at the mode
    mean = np.linalg.solve(A, beta * design.T @ y)
    assert alpha[1] == pytest.approx(gamma[1] / (mean[1:] @ mean[1:]), rel=1e-6)
    residual = y - design @ mean
    assert 1 / beta == pytest.approx(residual @ residual / (N_OBS - gamma.sum()), rel=1e-6)


def test_mackay_framework_validates_its_model(linear, mlp):
    model, _, _ = linear
    with pytest.raises(ValueError, match=r"\['a'\] are in none"):
        pm_evidence.laplace(model, framework="mackay", groups={"b": "b"}, progressbar=False)
    with pytest.raises(ValueError, match="noise='a' is not an observed variable"):
        pm_evidence.laplace(model, framework="mackay", noise="a", progressbar=False)
    with pytest.raises(ValueError, match="not a zero-mean Gaussian of one fixed precision"):
        pm_evidence.laplace(
            mlp,
            framework="mackay",
            groups={"mixed": ["w_in", "w_out"], "biases": ["b_in", "b_out"]},
            restarts=1,
            progressbar=False,
        )
    with pytest.raises(ValueError, match="groups and noise are options of framework='mackay'"):
        pm_evidence.laplace(model, noise="y")


# ------------------------------------------------------------------------- bad input
def test_bad_input_errors(linear):
    model, _, _ = linear
    with pytest.raises(ValueError, match=r"symmetry must be an integer >= 1 .* got 0"):
        pm_evidence.laplace(model, symmetry=0)
    with pytest.raises(TypeError, match="symmetry must be an integer or None"):
        pm_evidence.laplace(model, symmetry=2.5)
    with pytest.raises(ValueError, match=r"framework must be one of \['fixed', 'mackay'\]"):
        pm_evidence.laplace(model, framework="evidence")
    with pytest.raises(ValueError, match="restarts must be an integer >= 0"):
        pm_evidence.laplace(model, restarts=-1)
    with pytest.raises(ValueError, match="nothing to optimise"):
        pm_evidence.laplace(model, restarts=0)
    with pytest.raises(ValueError, match="start must be a dict of value variables"):
        pm_evidence.laplace(model, restarts=0, start=np.zeros(3), progressbar=False)
    with pytest.raises(ValueError, match=r"start is missing value variables \['b'\]"):
        pm_evidence.laplace(model, restarts=0, start={"a": 0.0}, progressbar=False)


def test_model_from_context(linear, linear_result):
    model, _, _ = linear
    with model:
        with warnings.catch_warnings():
            warnings.simplefilter("error", EvidenceWarning)
            res = pm_evidence.laplace(restarts=3, random_seed=11, progressbar=False)
    assert res.log_evidence == linear_result.log_evidence


def test_global_rng_untouched_and_netcdf_round_trip(linear, tmp_path):
    model, _, _ = linear
    state = np.random.get_state()[1].copy()
    res = pm_evidence.laplace(
        model, framework="mackay", noise="y", restarts=2, random_seed=4, progressbar=False
    )
    assert np.array_equal(np.random.get_state()[1], state)
    path = tmp_path / "laplace.nc"
    res.to_netcdf(path)
    back = pm_evidence.results.load_result(path)
    assert back.method == "laplace" and back.log_evidence == res.log_evidence
    assert back.diagnostics.index.name == "mode"
    np.testing.assert_allclose(back.diagnostics.alpha_a, res.diagnostics.alpha_a)
    assert back.settings["framework"] == "mackay"
    assert back.modes.keys() == res.modes.keys()
    for name, values in res.modes.items():
        np.testing.assert_array_equal(back.modes[name], values)


@pytest.mark.parametrize("data", [False, True], ids=["array", "pm.Data"])
def test_exact_with_dims_indexed_variable(data):
    """A vector declared with ``dims=`` (symbolic length) and indexed: PyTensor 2.38's scan
    Hessian gave zeros in its entries here (and crashed with ``pm.Data``)."""
    rng = np.random.default_rng(3)
    x = rng.normal(size=30)
    y = 1.0 + 2.0 * x + NOISE_SD * rng.normal(size=30)
    with pm.Model(coords={"coef": ["intercept", "slope"]}) as model:
        x_in = pm.Data("x", x) if data else x
        beta = pm.Normal("beta", 0.0, 5.0, dims="coef")
        pm.Normal("y", beta[0] + beta[1] * x_in, NOISE_SD, observed=y)
    res = pm_evidence.laplace(model, restarts=2, random_seed=1, progressbar=False)
    design = np.column_stack([np.ones_like(x), x])
    exact = log_evidence_linear(design, y, np.full(2, 1 / 25), 1 / NOISE_SD**2)
    assert res.log_evidence == pytest.approx(exact, abs=1e-6)
    assert not res.warnings


def test_wrong_hessian_is_caught_and_replaced(linear, linear_result, monkeypatch):
    """A Hessian graph that disagrees with the gradient's finite differences warns and the
    finite-difference Hessian takes its place."""
    model, _, _ = linear
    density = get_density(model)
    exact_hessian = density.hessian
    monkeypatch.setattr(density, "hessian", lambda x: exact_hessian(x) * np.array([1.0, 1, 1, 0]))
    with pytest.warns(EvidenceWarning, match="Hessian disagrees with finite differences"):
        res = pm_evidence.laplace(model, restarts=3, random_seed=11, progressbar=False)
    assert res.log_evidence == pytest.approx(linear_result.log_evidence, abs=1e-6)


def test_importance_check_confirms_a_good_fit(linear, linear_result):
    _, design, y = linear
    # Gaussian posterior: the proposal is the posterior, every weight equal.
    exact = log_evidence_linear(design, y, PRIOR_SD**-2, NOISE_SD**-2)
    assert linear_result.importance_log_evidence == pytest.approx(exact, abs=1e-6)
    assert linear_result.importance_ess == pytest.approx(1000)


def test_importance_check_flags_a_posterior_the_gaussian_misfits():
    """Eight schools with a half-Cauchy scale: in log τ the posterior has a long tail the
    Gaussian at the mode misses, and Laplace is ~6 nats below the evidence (−31.31, by
    quadrature over τ); the check's weights show it."""
    from _zoo import eight_schools  # tests/_zoo.py

    schools, _ = eight_schools(centred=False)
    with pytest.warns(pm_evidence.EvidenceWarning, match="does not fit this posterior"):
        result = pm_evidence.laplace(schools, restarts=2, random_seed=0, progressbar=False)
    assert result.log_evidence < -36
    assert result.importance_ess < 100
    assert result.importance_log_evidence > result.log_evidence + 1
    unchecked = pm_evidence.laplace(schools, restarts=2, check_draws=0, random_seed=0,
                                    progressbar=False)
    assert np.isnan(unchecked.importance_log_evidence) and not unchecked.warnings


def test_trust_region_falls_back_to_lbfgs_where_the_hessian_stops_it():
    """A Hessian with non-finite entries stops scipy's trust-exact; the start is then
    maximised by L-BFGS instead of ending the caller's fit."""
    centre = np.array([1.0, -2.0])

    def objective(x):
        return -float((x - centre) @ (x - centre)), -2 * (x - centre)

    opt = _optimize.trust_region_maximize(objective, lambda x: np.full((2, 2), np.nan),
                                          np.zeros(2), start=3)
    np.testing.assert_allclose(opt.x, centre, atol=1e-6)
    assert opt.start == 3 and opt.value == pytest.approx(0.0, abs=1e-10)
