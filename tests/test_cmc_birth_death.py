"""CMC with Liang's birth/death moves (§2.3) on models nested by hidden units, exact evidences."""

import numpy as np
import pymc as pm
import pytest

from pymc_evidence import MLPLayer
from pymc_evidence.estimators._birth_death import (
    BirthDeath, LiangUnits, StandardNormalUnits, validate_nested, pooled_units, unit_layout,
)
from pymc_evidence.estimators.cmc import cmc
from pymc_evidence.density import get_density
from pymc_evidence.testing import unit_regression

LAYER = MLPLayer("W", output="v", bias="b", activation="relu")  # units enter linearly: no flips


def unit_models(hidden=(1, 2, 3)):
    rng = np.random.default_rng(0)
    n, scale = 15, 0.3
    x = rng.uniform(-1, 1, size=(n, 2))
    y = 0.3 + scale * (x @ rng.normal(size=(2, 2)).sum(1) + rng.normal(size=2).sum()
                       + x[:, 0] ** 2 * rng.normal(size=2).sum()) + 0.5 * rng.normal(size=n)
    models, log_z = {}, {}
    for h in hidden:
        models[f"h={h}"], log_z[f"h={h}"] = unit_regression(h, x, y, scale=scale)
    return models, log_z


@pytest.fixture(scope="module")
def nested():
    models, log_z = unit_models()
    results = cmc(models, mlp_layer=LAYER, n_chains=16, n_pilot=32, anchor_draws=0,
                  random_seed=1, progressbar=False)
    return models, log_z, results


def test_birth_death_probabilities_match_exact(nested):
    _, log_z, results = nested
    exact = np.array(list(log_z.values()))
    truth = np.exp(exact - exact.max())
    truth /= truth.sum()  # (0.217, 0.368, 0.415)
    p = np.array([r.probability for r in results.values()])
    p_se = np.array([r.probability_se for r in results.values()])
    assert np.all(np.abs(p - truth) < 0.03), (p, truth)
    assert np.all(np.abs(p - truth) <= 4 * p_se + 0.005), (p, truth, p_se)
    assert p.sum() == pytest.approx(1.0)


def test_birth_death_diagnostics(nested):
    _, _, results = nested
    first, middle, last = results.values()
    assert [r.hidden_units for r in results.values()] == [1, 2, 3]
    assert np.isnan(first.death_acceptance)  # no model below h = 1
    assert np.isnan(last.birth_acceptance)
    for rate in (first.birth_acceptance, middle.birth_acceptance,
                 middle.death_acceptance, last.death_acceptance):
        assert 0.05 < rate < 0.6
    assert {"birth_acceptance", "death_acceptance"} <= set(middle.diagnostics.columns)
    assert middle.diagnostics["birth_acceptance"].notna().all()
    assert first.settings["model_proposal"] == "neighbour"
    assert first.settings["mlp_layer"]["weights"] == "W"
    assert set(np.unique(first.sample_stats["model_index"])) == {0, 1, 2}
    for res in results.values():
        assert abs(res.frequency - 1 / 3) < 0.05
        assert not res.warnings


def test_birth_then_death_is_the_identity(nested):
    models, _, _ = nested
    densities = [get_density(m) for m in models.values()]
    layouts = [unit_layout(d, LAYER, ["c"]) for d in densities]
    assert [lay.hidden_units for lay in layouts] == [1, 2, 3]
    assert layouts[1].units.shape == (2, 4) and layouts[1].n_incoming == 3
    move = BirthDeath(layouts, [StandardNormalUnits(), StandardNormalUnits()])
    rng = np.random.default_rng(0)
    x = densities[1].prior_draws(rng, 50)
    born, log_t = move(rng, 1, 2, x)
    units_x, units_born = x[:, layouts[1].units], born[:, layouts[2].units]
    np.testing.assert_array_equal(born[:, layouts[2].shared], x[:, layouts[1].shared])
    new = []
    for row in range(50):  # the old units, in order, plus one new unit somewhere
        keep = [k for k in range(3) if any(np.array_equal(units_born[row, k], u) for u in units_x[row])]
        assert len(keep) == 2
        np.testing.assert_array_equal(units_born[row, keep], units_x[row])
        new.append(units_born[row, ({0, 1, 2} - set(keep)).pop()])
    np.testing.assert_allclose(log_t, 0.5 * np.sum(np.array(new) ** 2, axis=1) + 2 * np.log(2 * np.pi))
    # a death from the born points removes one unit: either the new one (x again) or an old one
    died, log_t_death = move(rng, 2, 1, born)
    assert died.shape == x.shape
    removed = [next(u for u in units_born[r] if not any(np.array_equal(u, v) for v in died[r, layouts[1].units]))
               for r in range(50)]
    np.testing.assert_allclose(log_t_death, -0.5 * np.sum(np.array(removed) ** 2, axis=1) - 2 * np.log(2 * np.pi))
    with pytest.raises(ValueError, match="neighbouring models only"):
        move(rng, 0, 2, x)


def test_unit_proposals():
    rng = np.random.default_rng(1)
    kept = rng.normal(1.0, 2.0, size=(4000, 3, 5))
    q = LiangUnits()
    u = q.draw(rng, kept)
    mu, var = kept.reshape(4000, -1).mean(axis=1), kept.reshape(4000, -1).var(axis=1, ddof=1)
    np.testing.assert_allclose(np.mean((u - mu[:, None]) / np.sqrt(var[:, None])), 0.0, atol=0.02)
    expected = -0.5 * ((u - mu[:, None]) ** 2 / var[:, None] + np.log(2 * np.pi * var[:, None])).sum(axis=1)
    np.testing.assert_allclose(q.logpdf(u, kept), expected)


def test_pooled_units_symmetrised():
    from pymc_evidence.estimators._birth_death import UnitLayout

    layout = UnitLayout(np.array([[0, 1, 2], [3, 4, 5]]), np.array([6]), 2)
    draws = np.arange(14.0).reshape(2, 7)
    tanh = pooled_units(layout, MLPLayer("w", output="v", activation="tanh"), draws)
    np.testing.assert_array_equal(tanh[:4], [[0, 1, 2], [3, 4, 5], [7, 8, 9], [10, 11, 12]])
    np.testing.assert_array_equal(tanh[4:], -tanh[:4])  # odd: all of a unit flips
    even = pooled_units(layout, MLPLayer("w", output="v", activation="cos"), draws)
    np.testing.assert_array_equal(even[4:, :2], -even[:4, :2])  # even: incoming only
    np.testing.assert_array_equal(even[4:, 2], even[:4, 2])
    assert pooled_units(layout, LAYER, draws).shape == (4, 3)


def test_nesting_is_checked_before_compiling():
    models, _ = unit_models((1, 2))
    with pytest.raises(ValueError, match="'nope' is not a free variable"):
        validate_nested(models, MLPLayer("nope", output="v"))
    with pytest.raises(TypeError, match="mlp_layer must be an MLPLayer"):
        validate_nested(models, "W")
    reordered = {"h=2": models["h=2"], "h=1": models["h=1"]}
    with pytest.raises(ValueError, match="ordered by hidden units"):
        validate_nested(reordered, LAYER)
    layer, hidden = validate_nested(models, {"weights": "W", "output": "v", "bias": "b",
                                          "activation": "relu"})
    assert hidden == [1, 2] and layer == LAYER
    with pm.Model() as other:  # h = 3 but a different shared variable
        pm.Normal("W", shape=(2, 3))
        pm.Normal("b", shape=3)
        pm.Normal("v", shape=3)
        d = pm.Normal("d")
        pm.Normal("y", d, 1.0, observed=np.zeros(3))
    with pytest.raises(ValueError, match="differ in more than the hidden units"):
        validate_nested({**models, "h=3": other}, LAYER)
    with pm.Model() as bounded:
        pm.HalfNormal("W", shape=(2, 1))
        pm.Normal("y", 0.0, 1.0, observed=np.zeros(3))
    with pytest.raises(ValueError, match="has a transform"):
        validate_nested({"a": bounded}, MLPLayer("W"))
    with pytest.raises(ValueError, match="unit_proposal must be one of"):
        cmc(models, mlp_layer=LAYER, unit_proposal="prior", progressbar=False)
    with pytest.raises(ValueError, match="only propose neighbouring models"):
        cmc({**models, "h=3": unit_models((3,))[0]["h=3"]}, mlp_layer=LAYER,
            model_proposal="uniform", progressbar=False)
