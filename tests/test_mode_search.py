"""The search for modes the particles never reached, on a two-mode model with exact
evidences, and its effect on thermodynamic's SE and warnings."""

import importlib
import itertools
import warnings

import numpy as np
import pymc as pm
import pytest
from scipy.special import logsumexp
from scipy.stats import multivariate_normal, norm

import pymc_evidence as pm_evidence
from pymc_evidence import testing
from pymc_evidence._checkpoint import StateFile
from pymc_evidence.density import get_density
from pymc_evidence.estimators._mode_search import ModeSearch, search_modes
from pymc_evidence.estimators._reference import ModeReference, relax_at_mode
from pymc_evidence.estimators.thermodynamic import _warn_on_unreached_mode
from pymc_evidence.symmetry import (is_nearest_copy, resolve_layers, sampling_layers,
                                    transform_units)

# the module, not the function the package exports under the same name
thermodynamic_module = importlib.import_module("pymc_evidence.estimators.thermodynamic")
reference_module = importlib.import_module("pymc_evidence.estimators._reference")

PRIOR_SD, BUMP_SD, CENTRES, SHARES = 2.0, 0.3, (-3.0, 3.0), (0.1, 0.9)


@pytest.fixture(scope="module")
def two_bumps_model():
    """θ ~ N(0, 2²), L(θ) = 0.1 N(θ | −3, 0.3²) + 0.9 N(θ | 3, 0.3²): two separated
    Gaussian modes, each of evidence s N(±3 | 0, 2² + 0.3²) with s its share (0.1 or 0.9)."""
    with pm.Model() as model:
        theta = pm.Normal("theta", 0.0, PRIOR_SD)
        pm.Potential("likelihood", pm.math.logsumexp(pm.math.stack([
            np.log(share) + pm.logp(pm.Normal.dist(centre, BUMP_SD), theta)
            for centre, share in zip(CENTRES, SHARES)])))
    return model


@pytest.fixture(scope="module")
def two_bumps(two_bumps_model):
    return get_density(two_bumps_model)


def mode_evidence(k):
    return np.log(SHARES[k]) + norm.logpdf(CENTRES[k], 0.0, np.hypot(PRIOR_SD, BUMP_SD))


def population(centre, n=64):
    positions = centre + BUMP_SD * np.random.default_rng(0).standard_normal((n, 1))
    return positions, norm.logpdf(positions[:, 0], centre, BUMP_SD)


def test_a_mode_the_particles_never_reached_is_found_and_the_se_covers_its_mass(two_bumps):
    """Particles all in the lighter bump: the search finds the heavier one from prior draws.
    The bumps have the same width, hence the same Occam factor, so the estimate moved by the
    gap in log p(θ*, D) is the exact evidence of both."""
    search = search_modes(two_bumps, *population(-3.0), np.random.default_rng(1), 16, 8)
    assert search.n_optimisations == 24
    assert search.gap == pytest.approx(np.log(9), abs=1e-6) and search.unreached
    reached, total = mode_evidence(0), np.logaddexp(mode_evidence(0), mode_evidence(1))
    messages = []
    with pytest.warns(pm_evidence.EvidenceWarning, match="never reached"):
        se = _warn_on_unreached_mode(messages, search, reached, 0.05, 16)
    assert reached + se == pytest.approx(total, abs=1e-6)  # log(1 + 9) nats
    assert "2.2 nats above every mode the first round's particles lead to" in messages[0]


def test_particles_in_the_best_mode_leave_nothing_unreached(two_bumps):
    search = search_modes(two_bumps, *population(3.0), np.random.default_rng(1), 16, 8)
    assert search.gap == pytest.approx(0.0, abs=1e-6) and not search.unreached
    assert _warn_on_unreached_mode([], search, mode_evidence(1), 0.05, 16) == 0.05


def test_a_gap_within_the_se_or_the_margin_changes_nothing():
    messages = []
    # 2 nats above: the move, log(1 + e²) = 2.13 nats, is within an SE of 3
    assert _warn_on_unreached_mode(messages, ModeSearch(2.0, 0.0, 40), -10.0, 3.0, 32) == 3.0
    # within the margin: the optimisers merely stopped at different heights of one mode
    assert _warn_on_unreached_mode(messages, ModeSearch(0.9, 0.0, 40), -10.0, 0.01, 32) == 0.01
    assert not messages


def levels_raised_by(offset):
    """temper_from_mode with every level's estimate ``offset`` nats higher."""
    def temper_from_mode(*args, **kwargs):
        reached = reference_module.temper_from_mode(*args, **kwargs)
        return reached._replace(levels=[(s, level._replace(log_evidence=level.log_evidence
                                                           + offset))
                                        for s, level in reached.levels])

    return temper_from_mode


#: The robot arm's evidence with one hidden unit (mlp_calibration.md's importance sampling).
ROBOT_ARM_H1_LOG_EVIDENCE = -514.512


@pytest.mark.slow  # an MLP run: a minute or more on a 2-core machine
def test_on_an_mlp_the_tempering_from_the_best_mode_runs_and_replaces_a_lower_estimate(
        monkeypatch, tmp_path):
    """On an MLP ("auto") the search runs after the first round, from its own random stream,
    and the tempering from a reference at its best mode runs although the particles reached
    that mode. Not above the tempering from the prior by more than 2 combined SE, it is a
    cross-check the result keeps, and the estimate is the prior's as without the search;
    more than 2 above, it replaces it, with a warning. (The crude three-rung ladder leaves
    the prior's estimate tens of nats low with an SE of 9 to 300 depending on the stack and
    its NumPy and SciPy, so which way the real levels go is not fixed: they are shifted far
    either way, upwards to ten of the prior's SEs above its estimate.)"""
    model = testing.robot_arm_mlp(1)
    options = dict(ladder=[0.0, 0.01, 0.1, 1.0], n_particles=32, n_groups=2, max_groups=2,
                   target_se=None, random_seed=0, progressbar=False,
                   checkpoint=tmp_path / "run.ckpt")
    plain = pm_evidence.thermodynamic(model, mode_search=False, **options)
    assert np.isnan(plain.best_log_joint_from_prior) and "mode_search" not in plain.timing
    assert not plain.reference_sweeps
    monkeypatch.setattr(thermodynamic_module, "temper_from_mode", levels_raised_by(-1000.0))
    searched = pm_evidence.thermodynamic(model, **options)
    assert searched.log_evidence == plain.log_evidence and searched.se == plain.se
    for name, draws in plain.posterior.items():
        np.testing.assert_array_equal(searched.posterior[name], draws)
    # h = 1's posterior has one mode up to symmetry, log p(θ*, D) = −503.31
    assert searched.best_log_joint_from_prior == pytest.approx(-503.31, abs=0.01)
    assert searched.best_log_joint_from_particles == pytest.approx(-503.31, abs=0.01)
    assert searched.settings["mode_search"] == "auto" and searched.timing["mode_search"] > 0
    assert np.isnan(searched.log_evidence_from_prior)
    assert not any("from the mode" in message for message in searched.warnings)
    # the tempering from the mode, on its own adaptive ladder, gives the evidence
    assert len(searched.reference_sweeps) >= 1 + reference_module.AGREEING_MOVES
    from_mode = searched.reference_log_evidence[-1] + 1000.0
    from_mode_se = searched.reference_se[-1]
    assert abs(from_mode - ROBOT_ARM_H1_LOG_EVIDENCE) < max(3 * from_mode_se, 0.3)

    # the same run resumed from its checkpoint, its levels far above the prior's: replaced
    raised_by = max(100.0, plain.log_evidence + 10 * plain.se - from_mode)
    monkeypatch.setattr(thermodynamic_module, "temper_from_mode", levels_raised_by(raised_by))
    with pytest.warns(pm_evidence.EvidenceWarning, match="did not hold the mode in proportion"):
        replaced = pm_evidence.thermodynamic(model, **options)
    # the estimate is the last reference's groups (no more: target_se=None), resumed as saved
    assert replaced.log_evidence == pytest.approx(from_mode, abs=1e-9)
    assert replaced.log_evidence_from_prior == plain.log_evidence
    assert replaced.se_from_prior == plain.se
    assert replaced.reference_log_evidence[-1] == pytest.approx(from_mode + raised_by)
    assert abs(replaced.log_evidence - ROBOT_ARM_H1_LOG_EVIDENCE) < max(3 * replaced.se, 0.3)
    assert replaced.timing["reference"] < 0.5 * searched.timing["reference"]


#: The evidence of Liang's example-1 MLP with one hidden unit (mlp_calibration.md's
#: importance sampling).
LIANG_H1_LOG_EVIDENCE = -37.676


@pytest.mark.slow  # an MLP run: a minute or more on a 2-core machine
def test_on_an_mlp_a_first_level_that_agrees_with_the_first_round_is_the_only_one():
    """Where the tempering from the prior holds the mode (Liang's MLP with one hidden unit),
    the first level of the tempering from the mode agrees with the first round, and the
    relaxation stops there instead of doubling twice more; the estimate is the prior's."""
    model = testing.liang_mlp(1, *testing.liang_data(seed=1))
    options = dict(n_particles=64, n_groups=4, target_se=None, effort_check=False,
                   random_seed=2, progressbar=False)
    plain = pm_evidence.thermodynamic(model, mode_search=False, **options)
    searched = pm_evidence.thermodynamic(model, **options)
    assert searched.log_evidence == plain.log_evidence and searched.se == plain.se
    assert searched.reference_sweeps == (reference_module.REFERENCE_SWEEPS,)
    (level,), (level_se,) = searched.reference_log_evidence, searched.reference_se
    assert -3 * np.hypot(level_se, plain.se) <= level - plain.log_evidence
    assert level - plain.log_evidence <= 2 * np.hypot(level_se, plain.se)
    assert abs(level - LIANG_H1_LOG_EVIDENCE) < 3 * level_se


@pytest.mark.parametrize("bad", ["yes", 0, -3, 2.5])
def test_a_bad_mode_search_is_refused_before_any_work(bad):
    with pytest.raises((ValueError, TypeError), match="mode_search"):
        pm_evidence.thermodynamic(None, mode_search=bad)


def total_evidence():
    return np.logaddexp(mode_evidence(0), mode_evidence(1))


def test_tempering_from_a_found_mode_gives_the_evidence_of_both(two_bumps_model, monkeypatch):
    """When the search finds a mode the particles missed, a second tempering starts from a
    reference at it (half prior, half a Gaussian fitted at the mode). Forced here on a model
    whose evidence is known: it must agree with it within its own SE, and say what it did."""
    monkeypatch.setattr(thermodynamic_module, "_unreached_matters", lambda *args: True)
    with pytest.warns(pm_evidence.EvidenceWarning, match="starts at a reference"):
        result = pm_evidence.thermodynamic(two_bumps_model, mode_search=16, random_seed=3,
                                           progressbar=False)
    assert abs(result.log_evidence - total_evidence()) < 3 * result.se
    assert result.se < 0.2
    assert np.isfinite(result.log_evidence_from_prior) and np.isfinite(result.se_from_prior)
    # levels of relaxation, each with twice the sweeps, until the last ones agree
    sweeps = result.reference_sweeps
    assert len(sweeps) >= 1 + reference_module.AGREEING_MOVES
    assert sweeps[0] == reference_module.REFERENCE_SWEEPS
    assert all(later == 2 * earlier for earlier, later in zip(sweeps, sweeps[1:]))
    assert result.log_evidence == result.reference_log_evidence[-1]
    assert result.timing["reference"] > 0
    # the draws are the model's posterior: both bumps in their shares, the model's own density
    draws = result.posterior["theta"].ravel()
    assert np.mean(draws > 0) == pytest.approx(SHARES[1], abs=0.05)
    log_joint = result.sample_stats["log_prior"] + result.sample_stats["log_likelihood"]
    assert np.max(log_joint) == pytest.approx(
        np.log(SHARES[1]) + norm.logpdf(0, 0, BUMP_SD) + norm.logpdf(3, 0, PRIOR_SD), abs=0.5)


def test_the_reference_is_a_normalised_density_it_samples_exactly():
    """On an MLP the reference is folded over the layer's 2^h·h! copies: E_q[p/q] = 1 for the
    prior p checks its normaliser (the copies and the domain's probability) against its own
    draws; p/q ≤ 1/PRIOR_WEIGHT keeps the check's error small."""
    model = testing.robot_arm_mlp(2)
    density = get_density(model)
    layers = sampling_layers(density, resolve_layers("auto", model, density))
    rng = np.random.default_rng(5)
    mode = density.prior_draws(rng, 1)[0]
    state, _ = relax_at_mode(density, layers, mode, rng, 3, n_points=64)
    reference = ModeReference.fit(density, layers, mode, state.position, rng)
    draws = reference.prior_draws(rng, 4000)
    values = reference(draws)
    ratio = np.exp(density(draws).log_prior - values.log_prior)
    assert np.mean(ratio) == pytest.approx(1.0, abs=4 * np.std(ratio) / np.sqrt(len(ratio)))
    # invariant under the layer's symmetries, as the aligned moves need
    flipped = transform_units(density, layers[0], draws[0], [1, 0], [-1.0, 1.0])
    assert reference(flipped[None]).log_prior[0] == pytest.approx(values.log_prior[0])
    # the "likelihood" makes up the rest of the model's log density
    model_values = density(draws)
    np.testing.assert_allclose(values.log_prior + values.log_likelihood,
                               model_values.log_prior + model_values.log_likelihood)
    # as the tempering samples it: drawn into the anchor's domain, where it is the same density
    on_domain = reference.on_domain()
    inside = on_domain.prior_draws(rng, 500)
    assert is_nearest_copy(density, layers, reference.anchor, inside).all()
    for unfolded, folded in zip(on_domain(inside), reference(inside)):
        np.testing.assert_allclose(unfolded, folded, rtol=1e-9, atol=1e-9)


def test_at_a_mode_that_the_symmetries_fix_the_reference_is_still_normalised():
    """Exchangeable units that the data see only through their sum have a posterior mode with
    all units equal, which every permutation fixes: every point ties between its copies. The
    reference must still integrate to one (its fold held 0.67 of its Gaussian's mass when its
    domain was the mode's own, putting the evidence 0.25–0.43 nats high at 5–8 SE)."""
    rng = np.random.default_rng(0)
    x = rng.uniform(-1, 1, size=(25, 2))
    y = 0.3 + x @ np.array([0.8, -0.5]) + 0.5 * rng.normal(size=25)
    model, _ = testing.unit_regression(3, x, y)
    density = get_density(model)
    layer = pm_evidence.MLPLayer("W", output="v", bias="b", activation="relu")
    layers = sampling_layers(density, [layer])
    units = {"c": [0.3], "W": [0.36] * 3 + [-0.3] * 3, "b": [0.15] * 3, "v": [-0.08] * 3}
    mode = np.concatenate([units[name] for name in density.names])
    state, _ = relax_at_mode(density, layers, mode, rng, 3, n_points=256)
    assert len(state.position) == 256  # every start is moved into the domain, none dropped
    reference = ModeReference.fit(density, layers, mode, state.position, rng)
    # Draws from the Gaussian spread evenly over all 3! copies, m(θ) = Σ_g q₀(g θ) / 3!:
    # E_m[q_fold / m] = ∫ q_fold = 1.
    gaussian = reference.gaussian
    draws = gaussian.mean + rng.standard_normal((20_000, density.dim)) @ gaussian.chol.T
    copies = list(itertools.permutations(range(3)))
    spread = np.array([transform_units(density, layers[0], point, copies[k])
                       for point, k in zip(draws, rng.integers(len(copies), size=len(draws)))])
    log_q0 = multivariate_normal(gaussian.mean, gaussian.chol @ gaussian.chol.T).logpdf
    log_m = logsumexp([log_q0(np.array([transform_units(density, layers[0], point, g)
                                        for point in spread])) for g in copies],
                      axis=0) - np.log(len(copies))
    fold = np.exp(reference._log_gaussian(spread)[0] - log_m)
    assert np.mean(fold) == pytest.approx(1.0, abs=4 * np.std(fold) / np.sqrt(len(fold))
                                          + 3 * gaussian.log_domain_se)


def test_an_estimate_from_the_mode_that_keeps_moving_keeps_the_gap_rules_se(two_bumps_model,
                                                                             monkeypatch):
    """If the estimates from longer relaxations never agree, the last is reported with an SE
    of at least its last move and reaching where the gap rule would put the evidence."""
    monkeypatch.setattr(thermodynamic_module, "_unreached_matters", lambda *args: True)
    # an empty band: no two levels agree
    monkeypatch.setattr(thermodynamic_module, "_MOVE_UP", -1.0)
    monkeypatch.setattr(thermodynamic_module, "_MOVE_DOWN", -1.0)
    first_sweeps = reference_module.REFERENCE_SWEEPS
    monkeypatch.setattr(reference_module, "MAX_REFERENCE_SWEEPS", 2 * first_sweeps)
    with pytest.warns(pm_evidence.EvidenceWarning, match="kept moving"):
        result = pm_evidence.thermodynamic(two_bumps_model, mode_search=16, random_seed=3,
                                           progressbar=False)
    assert result.reference_sweeps == (first_sweeps, 2 * first_sweeps)
    first, last = result.reference_log_evidence
    gap = result.best_log_joint_from_prior - result.best_log_joint_from_particles
    by_gap = result.log_evidence_from_prior + np.logaddexp(0.0, gap) - result.log_evidence
    assert result.se >= max(abs(last - first), by_gap) - 1e-12


def levels_rising_by(rise):
    """temper_from_mode with every level before the last set ``rise`` below it."""
    def temper_from_mode(*args, **kwargs):
        reached = reference_module.temper_from_mode(*args, **kwargs)
        *before, (sweeps, last) = reached.levels
        lower = [(s, level._replace(log_evidence=last.log_evidence - rise))
                 for s, level in before]
        return reached._replace(levels=[*lower, (sweeps, last)])

    return temper_from_mode


def test_levels_that_agree_but_still_rose_keep_their_rise_in_the_se(two_bumps_model,
                                                                      monkeypatch):
    """A reference narrower than the posterior gives estimates that run low: levels that
    agree within the band but still rose leave an SE of at least that rise, and no groups
    are added that could not bring the SE below it."""
    monkeypatch.setattr(thermodynamic_module, "_unreached_matters", lambda *args: True)
    rise = 0.5
    monkeypatch.setattr(thermodynamic_module, "temper_from_mode", levels_rising_by(rise))
    with pytest.warns(pm_evidence.EvidenceWarning, match="rose by 0.50"):
        result = pm_evidence.thermodynamic(two_bumps_model, mode_search=16, random_seed=3,
                                           target_se=0.05, progressbar=False)
    assert result.se >= rise and result.reference_se[-1] < rise
    assert result.n_groups == 4


def test_more_groups_from_the_mode_until_target_se(two_bumps_model, monkeypatch):
    """Settled levels that did not rise, with an SE above ``target_se``: more groups
    tempered from the last reference on its ladder, pooled, within ``max_groups``."""
    monkeypatch.setattr(thermodynamic_module, "_unreached_matters", lambda *args: True)
    monkeypatch.setattr(thermodynamic_module, "temper_from_mode", levels_rising_by(0.0))
    with pytest.warns(pm_evidence.EvidenceWarning, match="starts at a reference"):
        result = pm_evidence.thermodynamic(two_bumps_model, mode_search=16, random_seed=3,
                                           target_se=0.01, max_groups=12, progressbar=False)
    assert result.n_groups == 12
    assert result.se < result.reference_se[-1]
    assert abs(result.log_evidence - total_evidence()) < 3 * result.se


def test_a_failed_tempering_from_the_mode_keeps_the_gap_rules_se(two_bumps_model, monkeypatch):
    """A reference that cannot be built loses nothing: the estimate is the tempering from the
    prior's, its SE widened by the gap rule, and both failures are said."""
    def fail(*args, **kwargs):
        raise np.linalg.LinAlgError("Matrix is not positive definite")

    monkeypatch.setattr(thermodynamic_module, "temper_from_mode", fail)
    def gapped(*args):  # the two bumps' particles reach both: give the search a gap of log 9
        found = search_modes(*args)
        return found._replace(best_from_prior=found.best_from_particles + np.log(9))

    monkeypatch.setattr(thermodynamic_module, "search_modes", gapped)
    with pytest.warns(pm_evidence.EvidenceWarning, match="failed"):
        result = pm_evidence.thermodynamic(two_bumps_model, mode_search=16, random_seed=3,
                                           progressbar=False)
    plain = pm_evidence.thermodynamic(two_bumps_model, mode_search=False, random_seed=3,
                                      progressbar=False)
    assert result.log_evidence == plain.log_evidence
    assert result.se == pytest.approx(np.log(10))
    assert any("never reached" in message for message in result.warnings)
    assert not result.reference_sweeps and "reference" in result.timing


class Killed(Exception):
    """Stands for a run stopped right after a checkpoint was written."""


@pytest.mark.filterwarnings("ignore:target_se=0.01 not reached")
def test_a_killed_tempering_from_the_mode_resumes_to_the_same_result(two_bumps_model,
                                                                      monkeypatch, tmp_path):
    """The tempering from the mode saves its progress beside the tempering from the prior:
    stopped during the relaxation, during a level's tempering, during and between the extra
    groups, it goes on from there to the uninterrupted result."""
    monkeypatch.setattr(thermodynamic_module, "_unreached_matters", lambda *args: True)
    monkeypatch.setattr(thermodynamic_module, "temper_from_mode", levels_rising_by(0.0))
    options = dict(mode_search=16, random_seed=3, target_se=0.01, max_groups=12,
                   progressbar=False)
    save = StateFile.save
    kinds = []

    def recording(self, state):
        save(self, state)
        from_mode = state.get("from_mode")
        progress = from_mode and from_mode["progress"]
        kinds.append("prior" if from_mode is None
                     else "more stage" if from_mode.get("partial") is not None
                     else "more" if from_mode["more"]
                     else "relaxation" if progress.gaussian is None
                     else "stage" if progress.round is not None and progress.round.stages
                     and progress.round.stages[-1].lam < 1 else "other")

    monkeypatch.setattr(StateFile, "save", recording)
    with pytest.warns(pm_evidence.EvidenceWarning, match="starts at a reference"):
        uninterrupted = pm_evidence.thermodynamic(two_bumps_model,
                                                  checkpoint=tmp_path / "whole.ckpt", **options)
    assert uninterrupted.n_groups == 12
    # stop after the 2nd relaxation sweep, in the middle of the second level's tempering, in
    # the middle of the first chunk of extra groups and after it
    stops = [kinds.index("relaxation") + 1,
             [i for i, kind in enumerate(kinds) if kind == "stage"][-3],
             [i for i, kind in enumerate(kinds) if kind == "more stage"][2],
             kinds.index("more")]
    written = []

    def killing(self, state):
        save(self, state)
        written.append(state)
        if len(written) in stops:
            raise Killed

    monkeypatch.setattr(StateFile, "save", killing)
    path = tmp_path / "killed.ckpt"
    for _ in stops:
        with pytest.raises(Killed), warnings.catch_warnings():
            warnings.simplefilter("ignore", pm_evidence.EvidenceWarning)
            pm_evidence.thermodynamic(two_bumps_model, checkpoint=path, **options)
    with pytest.warns(pm_evidence.EvidenceWarning, match="starts at a reference"):
        resumed = pm_evidence.thermodynamic(two_bumps_model, checkpoint=path, **options)
    # each state was written once: the resumed runs went on from where they stopped
    assert len(written) == len(kinds)
    assert resumed.log_evidence == uninterrupted.log_evidence
    assert resumed.se == uninterrupted.se
    assert resumed.reference_log_evidence == uninterrupted.reference_log_evidence
    assert resumed.diagnostics.equals(uninterrupted.diagnostics)
    np.testing.assert_array_equal(resumed.posterior["theta"], uninterrupted.posterior["theta"])
