"""Thermodynamic chaining against exact evidences: each estimate within 3 reported SE and a cap."""

import pickle

import numpy as np
import pymc as pm
import pytest

import pymc_evidence as pm_evidence
from pymc_evidence import testing
from pymc_evidence import power_ladder
from pymc_evidence.estimators import thermodynamic as thermodynamic_module

CAP = 0.5  # nats: a fixed bound besides the SE-relative one, so a huge SE cannot hide a bug


def assert_close_to_exact(result, exact, k=3.0, cap=CAP):
    error = result.log_evidence - exact
    assert result.se > 0
    assert abs(error) <= k * result.se, f"error {error:.3f} > {k} × SE {result.se:.3f}"
    assert abs(error) <= cap, f"error {error:.3f} beyond {cap} nats"


@pytest.fixture(scope="module")
def regression5():
    return testing.conjugate_regression(dim=5)


CASES = {
    "regression_d5": lambda: testing.conjugate_regression(dim=5),
    "regression_d20": lambda: testing.conjugate_regression(dim=20, n_obs=50),
    "normal_inverse_gamma": lambda: testing.normal_inverse_gamma_regression(),
    "beta_binomial": lambda: testing.beta_binomial(),
    "dirichlet_categorical": lambda: testing.dirichlet_categorical(testing.ANNOTATOR_1, 3),
    "gaussian_mixture_potential": lambda: testing.gaussian_mixture_potential(),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_exact_evidence(case):
    model, exact = CASES[case]()
    result = pm_evidence.thermodynamic(model, random_seed=2024, progressbar=False)
    assert_close_to_exact(result, exact)
    assert result.ti_log_evidence == pytest.approx(exact, abs=max(4 * result.ti_se, 0.1))
    assert not result.warnings


@pytest.mark.slow
def test_correlated_gaussian_100d():
    # Seeds 7-10: errors -0.01, +0.39, -0.46, +0.05 nats with SEs 0.26, 0.19, 0.20, 0.19 (moves
    # that stopped once decorrelated: -0.39, -0.16, -0.13, -0.07; see benchmarks/metric_bias).
    # One round (4 groups of 256): the default target_se=0.1 takes ~8x longer, see benchmarks/
    model, exact = testing.correlated_gaussian(dim=100)
    result = pm_evidence.thermodynamic(model, random_seed=7, progressbar=False, target_se=None)
    assert_close_to_exact(result, exact, cap=1.0)


def test_moves_that_leave_the_population_correlated_are_warned_about():
    # Two separated modes that HMC does not cross: each chain keeps its mode, so after the 2
    # transitions of every stage the population is still correlated with its start (0.87).
    # The exact-evidence tests check that fits whose moves decorrelate stay silent.
    model, _ = testing.gaussian_mixture_potential()
    result = pm_evidence.thermodynamic(model, n_particles=64, target_se=None, max_transitions=2,
                                       decorrelation=0.0, random_seed=3, progressbar=False)
    assert (result.diagnostics["n_transitions"] == 2).all()
    assert any("still correlated with its start (median 0.87" in w for w in result.warnings)


def test_same_seed_same_result(regression5):
    model, _ = regression5
    a = pm_evidence.thermodynamic(model, random_seed=3, progressbar=False, target_se=None)
    b = pm_evidence.thermodynamic(model, random_seed=3, progressbar=False, target_se=None)
    c = pm_evidence.thermodynamic(model, random_seed=4, progressbar=False, target_se=None)
    assert a.log_evidence == b.log_evidence
    assert a.diagnostics.equals(b.diagnostics)
    assert a.log_evidence != c.log_evidence


def test_global_numpy_rng_untouched(regression5):
    model, _ = regression5
    state = np.random.get_state()[1].copy()
    pm_evidence.thermodynamic(model, random_seed=3, progressbar=False, target_se=None)
    assert np.array_equal(np.random.get_state()[1], state)


def test_user_ladder(regression5):
    model, exact = regression5
    ladder = power_ladder(30, power=4)
    result = pm_evidence.thermodynamic(model, ladder=ladder, random_seed=5, progressbar=False)
    np.testing.assert_allclose(result.diagnostics["lambda"], ladder[1:])
    assert_close_to_exact(result, exact)


def test_result_contents(regression5):
    model, _ = regression5
    result = pm_evidence.thermodynamic(model, random_seed=1, progressbar=False, target_se=None)
    diagnostics = result.diagnostics
    for column in ["lambda", "log_ratio", "log_ratio_se", "ess", "rhat", "acceptance",
                   "step_size", "mean_log_likelihood", "var_log_likelihood"]:
        assert column in diagnostics
    assert diagnostics["lambda"].iloc[-1] == 1.0
    assert np.all(np.diff(diagnostics["lambda"]) > 0)
    # the adaptive ladder crowds rungs near the prior
    assert diagnostics["lambda"].iloc[len(diagnostics) // 2] < 0.2
    assert np.isclose(diagnostics["log_ratio"].sum(), result.log_evidence, atol=3 * result.se)
    assert result.posterior["w"].shape == (4, 256, 5)
    assert result.sample_stats["log_likelihood"].shape == (4, 256)
    assert 0.5 < diagnostics["acceptance"].mean() < 1.0
    # The first stage runs max_transitions; each later one the transitions its predecessor
    # needed to decorrelate the population, fewer on this easy posterior.
    assert diagnostics["n_transitions"].iloc[0] == 20
    assert diagnostics["n_transitions"].iloc[1:].max() < 20
    assert result.timing["total"] > 0


def test_with_model_context(regression5):
    model, _ = regression5
    with model:
        result = pm_evidence.thermodynamic(random_seed=1, progressbar=False, target_se=None)
    assert np.isfinite(result.log_evidence)


@pytest.mark.parametrize(
    "options, error, message",
    [
        (dict(n_particles=2), ValueError, "n_particles must be an integer >= 8, got 2"),
        (dict(n_particles=64.5), TypeError, "n_particles must be an integer, got 64.5"),
        (dict(n_groups=1), ValueError, "n_groups must be an integer >= 2"),
        (dict(target_se=-1.0), ValueError, r"target_se must be > 0, got -1.0"),
        (dict(target_se="x"), TypeError, "target_se must be a number or None, got 'x'"),
        (dict(ladder=[0.0, 0.5, 0.4, 1.0]), ValueError, "strictly increasing"),
        (dict(ladder=[0.1, 1.0]), ValueError, "from 0 to 1"),
        (dict(target_cess=1.5), ValueError, r"target_cess must be in \(0, 1\), got 1.5"),
        (dict(target_cess="fine"), TypeError, r"target_cess must be .* or 'auto', got 'fine'"),
        (dict(mass_matrix="full"), ValueError, r"mass_matrix must be one of \['auto', 'dense'"),
        (dict(max_groups=2), ValueError, r"max_groups must be an integer >= 4 \(n_groups\)"),
        (dict(cores=0), ValueError, "cores must be an integer >= 1"),
        (dict(cores=1.5), TypeError, "cores must be an integer or None, got 1.5"),
        (dict(max_transitions=0), ValueError, "max_transitions must be an integer >= 1"),
        (dict(decorrelation=1.0), ValueError, r"decorrelation must be in \[0, 1\), got 1.0"),
        (dict(model="m"), TypeError, "model must be a pymc.Model, got a str"),
    ],
)
def test_bad_options(regression5, options, error, message):
    options = dict(dict(model=regression5[0]), **options)
    with pytest.raises(error, match=message):
        pm_evidence.thermodynamic(progressbar=False, **options)


#: A run that needs extra groups after the first round: 3 chunks of 4, 4 and 2 groups.
EXTRA_GROUPS = dict(random_seed=5, progressbar=False, n_particles=64, target_se=0.02, max_groups=14)


@pytest.mark.filterwarnings("ignore:target_se=0.02 not reached")
def test_extra_groups_in_parallel_processes_give_the_sequential_result(regression5):
    model, exact = regression5
    sequential = pm_evidence.thermodynamic(model, cores=1, **EXTRA_GROUPS)
    parallel = pm_evidence.thermodynamic(model, cores=2, **EXTRA_GROUPS)
    assert sequential.n_groups == 14
    assert parallel.log_evidence == sequential.log_evidence
    assert parallel.se == sequential.se
    assert parallel.diagnostics.equals(sequential.diagnostics)
    np.testing.assert_array_equal(parallel.posterior["w"], sequential.posterior["w"])
    assert_close_to_exact(parallel, exact)


@pytest.mark.slow
@pytest.mark.parametrize("hidden_units", [2, 8])
def test_robot_arm_mlp_runs_to_completion(hidden_units):
    # pm.sample_smc crashes on this model at h = 2 (benchmarks/results/thermodynamic_vs_smc.md)
    model = testing.robot_arm_mlp(hidden_units)
    result = pm_evidence.thermodynamic(
        model, random_seed=1, progressbar=False, target_se=None, n_particles=128
    )
    assert np.isfinite(result.log_evidence) and np.isfinite(result.se)
    assert result.diagnostics["lambda"].iloc[-1] == 1.0
    # the data fix the noise level: posterior noise sd near the true 0.05
    noise_sd = 1 / np.sqrt(result.posterior["beta"])
    assert 0.03 < np.median(noise_sd) < 0.2


def test_nan_likelihood_at_prior_draws_is_reported_before_sampling():
    import pymc as pm
    import pytensor.tensor as pt

    with pm.Model() as model:
        mu = pm.Normal("mu", 0.0, 1.0)
        pm.Potential("broken", pt.log(mu))  # NaN for every negative prior draw
    with pytest.raises(ValueError, match=r"log likelihood is not finite at \d+ of 1024 exact prior draws, e.g. at \{'mu'"):
        pm_evidence.thermodynamic(model, progressbar=False)


@pytest.fixture(scope="module")
def box_model():
    """Data possible only in a small box: zero likelihood on ~99.8 % of the prior, so most
    groups start with one particle of positive weight or none. Returns (model, exact log Z)."""
    import pymc as pm
    import pytensor.tensor as pt
    from scipy.stats import norm

    with pm.Model() as model:
        theta = pm.Normal("theta", 0.0, 1.0, shape=2)
        pm.Potential("box", pt.switch(pt.all(pt.abs(theta - 1.0) < 0.1), 0.0, -np.inf))
    return model, 2 * np.log(norm.cdf(1.1) - norm.cdf(0.9))


def test_pathological_model_warns(box_model):
    model, exact = box_model
    with pytest.warns(pm_evidence.EvidenceWarning, match="ESS collapsed"):
        result = pm_evidence.thermodynamic(model, random_seed=0, progressbar=False, target_se=None)
    assert result.warning
    assert np.isfinite(result.log_evidence)
    assert abs(result.log_evidence - exact) <= 3 * result.se


def test_extra_groups_without_a_live_particle_count_as_dead_groups(box_model):
    # with this seed a later chunk of 4 × 256 prior draws misses the box entirely: its groups
    # estimate Z = 0, as dead groups of the first round do, instead of the chunk calling the
    # data impossible after the first round proved them possible
    model, exact = box_model
    with pytest.warns(pm_evidence.EvidenceWarning, match="14 of 32 groups have a non-finite"):
        result = pm_evidence.thermodynamic(model, random_seed=1, progressbar=False)
    assert np.isfinite(result.log_evidence)
    assert abs(result.log_evidence - exact) <= 3 * result.se
    # the groups' spread is that of the 18 live groups, not NaN from the dead ones
    assert 0 < result.group_log_sd < 1
    # the posterior draws come from the 18 live groups only, all inside the box
    theta = np.asarray(result.posterior["theta"])
    assert theta.shape == (18, 256, 2)
    assert np.all(np.abs(theta - 1.0) < 0.1)


def test_coarse_ladder_warns_of_collapsed_ess(regression5):
    model, _ = regression5
    with pytest.warns(pm_evidence.EvidenceWarning, match="ESS collapsed"):
        result = pm_evidence.thermodynamic(
            model, ladder=[0.0, 1.0], random_seed=0, progressbar=False, target_se=None
        )
    assert result.warning


def test_se_covers_heavy_tailed_group_estimates():
    """Groups whose log estimates are N(log Z − σ²/2, σ²), SMC's lognormal law: the reported SE
    covers the error of log mean_g Ẑ_g about as a normal SE should, where the delta-method spread
    of the Ẑ_g alone (one group dominating the mean) is far too small."""
    from pymc_evidence.estimators._stepping_stone import stepping_stone

    rng = np.random.default_rng(5)
    G, sigma, replicates = 12, 2.0, 2000
    log_z_groups = rng.normal(-(sigma**2) / 2, sigma, size=(replicates, G))  # true log Z = 0
    errors, ses, delta_only = [], [], []
    for row in log_z_groups:
        estimate = stepping_stone(row[:, None], np.zeros((G, 1)))
        relative = np.exp(row - estimate.log_evidence)
        errors.append(estimate.log_evidence)
        ses.append(estimate.se)
        delta_only.append(np.std(relative, ddof=1) / np.sqrt(G))
    errors, ses, delta_only = map(np.asarray, (errors, ses, delta_only))
    # 2 SE cover 86 % (a normal SE: 95 %; the log of a mean of lognormals is skewed), the
    # delta method alone 65 %; the SE is of the size of the actual error.
    assert np.mean(np.abs(errors) <= 2 * ses) > 0.8
    assert np.mean(np.abs(errors) <= 2 * delta_only) < 0.7
    assert 0.5 < np.median(ses) / np.sqrt(np.mean(errors**2)) < 2
    # With a small spread the bound is the familiar σ/√G.
    tight = stepping_stone(rng.normal(0, 0.05, size=(G, 1)), np.zeros((G, 1)))
    assert tight.se == pytest.approx(np.std(tight.per_group, ddof=1) / np.sqrt(G), rel=0.05)


@pytest.fixture(scope="module")
def units3():
    rng = np.random.default_rng(0)
    n = 25
    x = rng.uniform(-1, 1, size=(n, 2))
    y = 0.3 + x @ np.array([0.8, -0.5]) + 0.4 * x[:, 0] ** 2 + 0.5 * rng.normal(size=n)
    return testing.unit_regression(3, x, y)


def test_mlp_layers_alignment_keeps_the_evidence(units3):
    """Aligning particles under the units' permutations is a move that keeps every tempered
    target: exact evidence of exchangeable units, within 3 SE."""
    model, exact = units3
    layer = pm_evidence.MLPLayer("W", output="v", bias="b", activation="relu")
    result = pm_evidence.thermodynamic(
        model, mlp_layers=layer, n_particles=128, target_se=0.15, random_seed=3,
        progressbar=False,
    )
    assert_close_to_exact(result, exact)
    assert result.settings["mlp_layers"][0]["weights"] == "W"


def test_of_several_layers_the_one_with_most_copies_is_aligned():
    from _deep_mlp import LAYERS, two_layer_mlp

    from pymc_evidence.density import get_density
    from pymc_evidence.symmetry import sampling_layers

    first, second = LAYERS
    density = get_density(two_layer_mlp(2, 3))
    assert sampling_layers(density, [first, second]) == [second]  # 2³·3! = 48 copies, not 8
    assert sampling_layers(density, [first]) == [first]
    # bridge counts that layer's copies and names the other's log copies in its warning
    from pymc_evidence.estimators.bridge import _counted_layer
    assert _counted_layer([first, second], density) == (second, pytest.approx(np.log(8)))


def test_a_diverged_point_aligns_to_itself_and_is_in_no_copys_domain():
    """A diverged point (NaN, inf, or so large that its squared distances overflow) maps to
    itself and is outside every domain, instead of failing the assignment that aligns it
    (scipy's Hungarian solver, used from five hidden units on); the batch's other points align
    as they would alone."""
    from pymc_evidence.density import get_density
    from pymc_evidence.symmetry import _unit_coordinates, alignment_map, is_nearest_copy

    layer = testing.ROBOT_ARM_LAYER
    for h in (2, 6):  # every permutation tried at once; one Hungarian assignment per point
        density = get_density(testing.robot_arm_mlp(h))
        weight = _unit_coordinates(density, layer)[0][0, 0]  # a hidden unit's input weight
        x = density.prior_draws(np.random.default_rng(1), 5)
        reference = density.prior_draws(np.random.default_rng(2), 1)[0]
        x[1, weight], x[2, weight], x[3, weight] = np.nan, np.inf, 1e200
        index, signs = alignment_map(density, [layer], reference, x)
        alone_index, alone_signs = alignment_map(density, [layer], reference, x[[0, 4]])
        np.testing.assert_array_equal(index[[0, 4]], alone_index)
        np.testing.assert_array_equal(signs[[0, 4]], alone_signs)
        assert not np.array_equal(alone_index[0], np.arange(density.dim))  # a real alignment
        np.testing.assert_array_equal(index[1:4], np.tile(np.arange(density.dim), (3, 1)))
        np.testing.assert_array_equal(signs[1:4], 1.0)
        inside = is_nearest_copy(density, [layer], x[0], x)
        np.testing.assert_array_equal(inside, [True, False, False, False, False])


def test_align_moves_particles_to_equivalent_points():
    """Aligned particles have the log density and gradients the density computes there, their
    hidden units are nearer the reference's than before, and each is its own nearest copy."""
    from pymc_evidence import kernels
    from pymc_evidence.density import get_density
    from pymc_evidence.estimators._tempering import align_population
    from pymc_evidence.symmetry import is_nearest_copy

    density = get_density(testing.robot_arm_mlp(2))
    state = kernels.init(density, density.prior_draws(np.random.default_rng(0), 16))
    layers, reference = [testing.ROBOT_ARM_LAYER], state.position[0]
    assert not is_nearest_copy(density, layers, reference, state.position).all()
    aligned = align_population(density, layers, state, reference)
    assert is_nearest_copy(density, layers, reference, aligned.position).all()
    again = kernels.init(density, aligned.position)
    np.testing.assert_allclose(aligned.log_likelihood, again.log_likelihood, rtol=1e-10)
    np.testing.assert_allclose(aligned.log_prior, again.log_prior, rtol=1e-10)
    np.testing.assert_allclose(aligned.grad_log_likelihood, again.grad_log_likelihood,
                               rtol=1e-8, atol=1e-8)
    before = np.linalg.norm(state.position - reference, axis=1)
    after = np.linalg.norm(aligned.position - reference, axis=1)
    assert np.all(after <= before + 1e-12) and np.any(after < before - 1e-6)


def test_the_metric_averaged_over_the_symmetries_makes_the_moves_commute_with_them():
    """The aligned particles' covariance averaged over the layer's 2³·3! signed permutations
    is their group mean, and is left unchanged by each of them: HMC with it moves a copy of a
    point to the same copy of where it moves the point."""
    import itertools

    from pymc_evidence.density import get_density
    from pymc_evidence.symmetry import symmetrised_covariance, transform_units

    density, layer = get_density(testing.robot_arm_mlp(3)), testing.ROBOT_ARM_LAYER
    random = np.random.default_rng(1).standard_normal((density.dim, density.dim))
    cov = random @ random.T

    def matrix(permutation, signs):
        return np.array([transform_units(density, layer, e, list(permutation), list(signs))
                         for e in np.eye(density.dim)]).T

    group = [matrix(p, s) for p in itertools.permutations(range(3))
             for s in itertools.product([-1.0, 1.0], repeat=3)]
    averaged = symmetrised_covariance(density, layer, cov)
    np.testing.assert_allclose(averaged, np.mean([g @ cov @ g.T for g in group], axis=0),
                               atol=1e-12)
    for g in group:
        np.testing.assert_allclose(g @ averaged @ g.T, averaged, atol=1e-12)


def test_aligned_tempering_moves_with_the_averaged_matrix_and_no_restriction(monkeypatch):
    """On an MLP every rung's moves get the mass matrix averaged over the layer's symmetries,
    unrestricted: a restriction to one copy's domain stops them with many hidden units."""
    from pymc_evidence import kernels
    from pymc_evidence.density import get_density
    from pymc_evidence.symmetry import transform_units

    calls, mutate = [], kernels.mutate

    def recording(rng, state, density, lam, metric, step_size, **kwargs):
        calls.append((metric, kwargs.get("support")))
        return mutate(rng, state, density, lam, metric, step_size, **kwargs)

    monkeypatch.setattr(kernels, "mutate", recording)
    model = testing.robot_arm_mlp(2)
    pm_evidence.thermodynamic(model, ladder=[0.0, 0.01, 0.1, 1.0], n_particles=32, n_groups=2,
                              max_groups=2, target_se=None, mode_search=False,
                              random_seed=0, progressbar=False)
    density, layer = get_density(model), testing.ROBOT_ARM_LAYER
    swap = np.array([transform_units(density, layer, e, [1, 0], [-1.0, 1.0])
                     for e in np.eye(density.dim)]).T
    assert len(calls) == 3
    for metric, support in calls:
        assert support is None
        np.testing.assert_allclose(swap @ metric.cov @ swap.T, metric.cov, atol=1e-10)


def test_integration_is_nan_where_the_rungs_do_not_resolve_the_integrand():
    """Eight schools with a half-Cauchy scale: E_0[log L] diverges (E[τ²] is infinite), so the
    trapezoid rule from λ = 0 has no meaning; the cross-check reports NaN, not 10⁵ ± 10⁵."""
    from _zoo import eight_schools  # tests/_zoo.py

    schools, _ = eight_schools(centred=False)
    result = pm_evidence.thermodynamic(schools, random_seed=0, progressbar=False)
    assert np.isnan(result.ti_log_evidence) and np.isnan(result.ti_se)
    assert -32 < result.log_evidence < -30.5 and result.se < 0.1
    assert not any("thermodynamic integration" in w for w in result.warnings)


def test_integration_keeps_resolved_integrands_and_rejects_unresolved_ones():
    from pymc_evidence.estimators._stepping_stone import thermodynamic_integration

    # log L = −x²/2 under a N(0, 1) prior: E_λ[log L] = −1/(2(1+λ)), Var_λ = 1/(2(1+λ)²).
    lambdas = np.linspace(0, 1, 6)
    mean_ll = -1 / (2 * (1 + lambdas))[None, :].repeat(2, axis=0)
    var_ll = 1 / (2 * (1 + lambdas) ** 2)[None, :].repeat(2, axis=0)
    resolved = thermodynamic_integration(lambdas, mean_ll, var_ll, n_particles=100)
    assert resolved.log_evidence == pytest.approx(-np.log(2) / 2, abs=1e-3)
    # A prior mean and variance of log L that the first rung's values contradict (a heavy tail).
    mean_ll[:, 0], var_ll[:, 0] = -900.0, 1e8
    unresolved = thermodynamic_integration(lambdas, mean_ll, var_ll, n_particles=100)
    assert np.isnan(unresolved.log_evidence)


def test_an_mlps_layers_are_recognised_and_used_unless_declined():
    """With its layers the MLP also gets the finer adaptive ladder (target_cess="auto") and
    moves without the stall test."""
    model = testing.robot_arm_mlp(1)
    options = dict(ladder=[0.0, 1.0], n_particles=16, n_groups=2, max_groups=2, target_se=None,
                   mode_search=False, random_seed=0, progressbar=False)
    res = pm_evidence.thermodynamic(model, **options)
    assert res.settings["mlp_layers"] == [vars(testing.ROBOT_ARM_LAYER)]
    assert res.settings["target_cess"] == 0.95 and res.settings["stall_rule"] is False
    assert res.effort_particles == ()  # max_groups = n_groups leaves no budget to double
    assert any("effort check did not run" in w and "max_groups >= 4 to check it" in w
               for w in res.warnings)
    declined = pm_evidence.thermodynamic(model, mlp_layers=None, **options)
    assert declined.settings["mlp_layers"] is None
    assert declined.settings["target_cess"] == 0.8 and declined.settings["stall_rule"] is True
    chosen = pm_evidence.thermodynamic(model, target_cess=0.9, **options)
    assert chosen.settings["target_cess"] == 0.9


def test_the_effort_check_pools_two_levels_that_agree():
    model, exact = testing.gaussian_mixture_potential(dim=2)
    res = pm_evidence.thermodynamic(model, n_particles=64, effort_check=True, random_seed=3,
                                    progressbar=False)
    assert res.effort_particles == (64, 128)
    assert len(res.effort_transitions) == 2
    first, doubled = res.effort_log_evidence
    assert abs(doubled - first) <= 2 * np.hypot(*res.effort_se)
    assert abs(res.log_evidence - exact) < 3 * res.se
    assert res.posterior["theta"].shape[1] == 128  # draws from the doubled groups
    assert not any("doubled" in message for message in res.warnings)
    unchecked = pm_evidence.thermodynamic(model, n_particles=64, random_seed=3, progressbar=False)
    assert unchecked.effort_particles == ()  # "auto": one mode-free posterior, groups agree


def test_on_an_mlp_the_effort_check_doubles_the_moves_and_resumes_identically(tmp_path,
                                                                              monkeypatch):
    """Aligned MLP particles: the second level runs the first round's transitions twice over
    at every stage, with as many particles; a run stopped before that level reruns it.
    Without the scale moves (taken away here) the first round's moves stay correlated with
    their start, which shows which level the short-moves warning is judged on."""
    monkeypatch.setattr(thermodynamic_module, "find_scale_pairs", lambda density: ())
    model = testing.robot_arm_mlp(1)
    path = tmp_path / "run.ckpt"
    options = dict(ladder=power_ladder(30), n_particles=32, n_groups=2, max_groups=4,
                   max_transitions=3, target_se=None, effort_check=True, mode_search=False,
                   checkpoint=path, random_seed=1, progressbar=False)
    res = pm_evidence.thermodynamic(model, **options)
    assert res.settings["scale_moves"] is None
    assert res.effort_particles == (32, 32)
    first, doubled = res.effort_transitions
    assert doubled == 2 * first and first > 0
    # Whether the moves were long enough is judged on the doubled moves: the first round's 3
    # per stage leave the population correlated with its start (median 0.84 at λ > 0.5), which
    # warns when that round is all there is; the doubled level's 6 sit near the threshold
    # (0.76 here, 0.75 in other versions of the stack), and a warning, if any, names them.
    correlated = [message for message in res.warnings if "still correlated" in message]
    assert all(message.startswith("after 6 HMC transitions") for message in correlated)
    unchecked = pm_evidence.thermodynamic(model, **{**options, "effort_check": False,
                                                    "checkpoint": None})
    assert any(message.startswith("after 3 HMC transitions per stage")
               and "still correlated" in message for message in unchecked.warnings)
    with open(path, "rb") as file:
        saved = pickle.load(file)
    saved["state"]["checks"].pop()
    with open(path, "wb") as file:
        pickle.dump(saved, file)
    resumed = pm_evidence.thermodynamic(model, **options)
    assert resumed.effort_log_evidence == res.effort_log_evidence
    assert resumed.log_evidence == res.log_evidence


class _Stopped(Exception):
    """Stands for a session stopped part-way through a round."""


def _stop_tuned_rounds(monkeypatch, after_stages):
    """run_round, whose rounds on the first round's tuning (extra groups, effort-check levels)
    stop once ``after_stages`` stages are saved while ``armed[0]``; ``resumed`` collects the
    rounds so far those rounds were handed to go on from."""
    real, armed, resumed = thermodynamic_module.run_round, [True], []

    def run_round(*args, partial=None, on_stage=None, **kwargs):
        tuning = kwargs["tuning"] if "tuning" in kwargs else args[5]
        if tuning is None:  # the first round
            return real(*args, partial=partial, on_stage=on_stage, **kwargs)
        if partial is not None:
            resumed.append(len(partial.stages))

        def stage_saved(current):
            on_stage(current)
            if armed[0] and len(current.stages) == after_stages:
                raise _Stopped

        return real(*args, partial=partial, on_stage=stage_saved, **kwargs)

    monkeypatch.setattr(thermodynamic_module, "run_round", run_round)
    return armed, resumed


@pytest.mark.parametrize("case", ["extra groups", "effort check"])
def test_a_run_stopped_part_way_through_a_round_goes_on_from_its_last_stage(case, tmp_path,
                                                                            monkeypatch):
    """Extra groups (in one process) and effort-check levels are saved after every stage: a
    resumed run goes on from the last one saved and gives what an unstopped run gives."""
    if case == "extra groups":
        model, _ = testing.beta_binomial()
        options = dict(n_particles=64, n_groups=2, max_groups=8, target_se=1e-3,
                       effort_check=False, ladder=power_ladder(12), cores=1)
    else:
        model = testing.robot_arm_mlp(1)
        options = dict(ladder=power_ladder(30), n_particles=32, n_groups=2, max_groups=4,
                       max_transitions=3, target_se=None, effort_check=True, mode_search=False)
    options.update(random_seed=5, progressbar=False)
    unstopped = pm_evidence.thermodynamic(model, **options)
    armed, resumed = _stop_tuned_rounds(monkeypatch, after_stages=4)
    path = tmp_path / "run.ckpt"
    with pytest.raises(_Stopped):
        pm_evidence.thermodynamic(model, checkpoint=path, **options)
    armed[0] = False
    result = pm_evidence.thermodynamic(model, checkpoint=path, **options)
    assert resumed == [4]
    assert result.log_evidence == unstopped.log_evidence and result.se == unstopped.se
    assert result.n_groups == unstopped.n_groups
    assert result.effort_log_evidence == unstopped.effort_log_evidence


def test_an_effort_check_that_moves_warns_and_its_se_covers_the_move():
    from pymc_evidence.estimators._stepping_stone import Estimate
    from pymc_evidence.estimators.thermodynamic import EffortCheck, EffortLevel, _warn_on_effort

    def level(particles, log_z, se, transitions=100):
        return EffortLevel(particles, transitions, Estimate(log_z, se, se, se, np.array([log_z])))

    settled = EffortCheck([], [level(64, -10.0, 0.1), level(128, -9.0, 0.1),
                               level(256, -9.05, 0.1)], "particles", None)
    messages = []
    # Having moved once, the check bounds the last move by |δ| + c: 0.05 + 0.141.
    assert _warn_on_effort(messages, settled, -9.03, 0.08) == pytest.approx(
        np.hypot(0.08, 0.05 + np.hypot(0.1, 0.1)))
    assert "-10.00 ± 0.10 with 64, -9.00 ± 0.10 with 128" in messages[0]
    assert "n_particles=128 next time" in messages[0]
    # The first move (0.40 > 2 × 0.141) set the first level aside, but the last level is
    # within the band of it (0.25): the first move may have been noise, and the SE also covers
    # the estimate's distance to the first level beyond their noise, √(0.32² − 0.07² − 0.1²).
    unconfirmed = EffortCheck([], [level(64, -10.0, 0.1), level(128, -9.6, 0.1),
                                   level(256, -9.75, 0.1)], "particles", None)
    messages = []
    assert _warn_on_effort(messages, unconfirmed, -9.68, 0.07, lower_share=0.5) == pytest.approx(
        np.sqrt(0.07**2 + (1.5 * (0.15 + np.sqrt(0.02))) ** 2 + 0.32**2 - 0.07**2 - 0.1**2))
    assert "the first move may have been noise" in messages[0]
    unsettled = EffortCheck([], [level(64, -10.0, 0.1), level(128, -9.0, 0.1)], "particles", 1.0)
    messages = []
    assert _warn_on_effort(messages, unsettled, -9.0, 0.1) == 1.0
    assert "it may still be low" in messages[0] and "Raise n_particles" in messages[0]
    assert _warn_on_effort([], EffortCheck([], [level(64, -10.0, 0.1)] * 2, "particles", None),
                           -10.0, 0.1) == 0.1
    # Settled within the band (0.25 < 2 × 0.141) but beyond the noise: the SE adds the excess,
    # √(0.25² − 0.02), times 1 + the lower level's share of the pooled Z.
    moved = EffortCheck([], [level(64, -10.0, 0.1), level(128, -9.75, 0.1)], "particles", None)
    assert _warn_on_effort([], moved, -9.8, 0.08, lower_share=0.3) == pytest.approx(
        np.hypot(0.08, 1.3 * np.sqrt(0.25**2 - 0.02)))
    # On an MLP the moves double: the levels and the advice are in transitions.
    longer = EffortCheck([], [level(64, -10.0, 0.1, 580), level(64, -9.0, 0.1, 1160),
                              level(64, -9.05, 0.1, 2320)], "transitions", None)
    messages = []
    _warn_on_effort(messages, longer, -9.03, 0.08, max_transitions=20)
    assert ("-10.00 ± 0.10 with 580, -9.00 ± 0.10 with 1160, -9.05 ± 0.10 with 2320 HMC "
            "transitions per particle" in messages[0])
    assert "max_transitions=40 next time" in messages[0]
    messages = []
    _warn_on_effort(messages, longer._replace(unsettled=1.0), -9.05, 0.08)
    assert "moves are too short" in messages[0] and "Raise max_transitions" in messages[0]
    # A rise that did not halve: the SE is at least the whole rise over the levels.
    rising = EffortCheck([], [level(64, 157.31, 0.70, 580), level(64, 158.01, 0.14, 1160),
                              level(64, 159.48, 0.12, 2320)], "transitions", 1.47)
    messages = []
    assert _warn_on_effort(messages, rising, 159.48, 0.1) == pytest.approx(159.48 - 157.31)
    assert "the rise did not halve (+0.70, then +1.47 nats)" in messages[0]
    halving = EffortCheck([], [level(64, 157.31, 0.70, 580), level(64, 158.01, 0.05, 1160),
                               level(64, 158.31, 0.05, 2320)], "transitions", 0.30)
    assert _warn_on_effort([], halving, 158.31, 0.1) == pytest.approx(0.30)
    # The budget ended on a pair refused for the lower level's noise alone (a move of 0.70
    # within the band): the SE is at least the move plus its noise.
    noisy = EffortCheck([], rising.levels[:2], "transitions", 0.70)
    messages = []
    assert _warn_on_effort(messages, noisy, 158.01, 0.1) == pytest.approx(0.70 + np.hypot(0.70, 0.14))
    assert "too noisy (SE 0.70 against 0.14)" in messages[0]


def test_levels_settle_only_when_they_agree_and_the_lower_one_could_show_a_move():
    """The robot-arm MLP with four hidden units, with the scale moves: 20 → 40 transitions per
    stage moved the estimate within the band (0.70 < 2 × 0.71), but the first level's SE was
    five times the second's, and 80 put the estimate 1.47 higher."""
    from pymc_evidence.estimators._stepping_stone import Estimate
    from pymc_evidence.estimators.thermodynamic import _settled

    def estimate(log_z, se):
        return Estimate(log_z, se, se, se, np.array([log_z]))

    t20, t40, t80 = estimate(157.31, 0.70), estimate(158.01, 0.14), estimate(159.48, 0.12)
    assert abs(t40.log_evidence - t20.log_evidence) < 2 * np.hypot(t20.se, t40.se)
    assert not _settled(t20, t40)
    assert not _settled(t40, t80)
    # Liang's MLP with one hidden unit (seed 2): levels whose SEs differ as much as any
    # calibrated fit's (ratio 1.58) settle.
    assert _settled(estimate(-37.645, 0.060), estimate(-37.696, 0.038))
    # Twice the particles explains an SE √2 times smaller: 2.8 times still settles.
    assert _settled(estimate(-10.0, 0.28), estimate(-10.0, 0.1), shrink=np.sqrt(2))
    assert not _settled(estimate(-10.0, 0.29), estimate(-10.0, 0.1), shrink=np.sqrt(2))
    assert not _settled(estimate(-10.0, 0.1), estimate(-9.5, 0.1))  # beyond the band


def test_the_lower_levels_share_of_the_pooled_evidence():
    """w: the lower level's groups' share of the averaged Z (the last level's groups come
    last); 0 when the last level alone is reported or no group is finite."""
    from types import SimpleNamespace

    from pymc_evidence.estimators._stepping_stone import Estimate
    from pymc_evidence.estimators.thermodynamic import EffortCheck, EffortLevel, _lower_share

    rounds = [SimpleNamespace(final_log_weights=np.zeros((4, n))) for n in (64, 128)]
    levels = [EffortLevel(n, 100, Estimate(z, 0.1, 0.1, 0.1, np.full(4, z)))
              for n, z in ((64, -10.0), (128, -9.7))]
    per_group = np.r_[np.full(4, -10.0), np.full(4, -9.7)]
    pooled = EffortCheck(rounds, levels, "particles", None)
    assert _lower_share(pooled, per_group) == pytest.approx(1 / (1 + np.exp(0.3)))
    assert _lower_share(pooled._replace(rounds=rounds[-1:], unsettled=0.3), per_group[4:]) == 0.0
    assert _lower_share(pooled, np.full(8, -np.inf)) == 0.0


@pytest.mark.filterwarnings("ignore:target_se=0.1 not reached")
def test_groups_whose_log_evidences_spread_too_wide_are_replaced_by_larger_ones(regression5):
    """Groups of 8 particles spread by 1.1 nats on this seed (variance 1.2): the estimate pools
    groups of 32 instead (variance about 0.3), as many as the same particle budget allows, and
    says so."""
    model, exact = regression5
    with pytest.warns(pm_evidence.EvidenceWarning, match="n_particles=32 next time"):
        res = pm_evidence.thermodynamic(model, n_particles=8, random_seed=2, progressbar=False)
    assert res.n_groups == 8  # max_groups × n_particles = 256 particles in groups of 32
    assert res.posterior["w"].shape[:2] == (8, 32)
    assert_close_to_exact(res, exact)


def test_resized_groups_leave_the_effort_check_a_doubling():
    """At the defaults (4 groups, 32 × 256 particles) groups grow to 1024, not 2048, so that
    the check can still double their effort; without the check they may take it all."""
    from pymc_evidence.estimators.thermodynamic import _largest_group

    defaults = dict(n_particles=256, n_groups=4, max_groups=32, effort_check="auto")
    assert _largest_group(defaults) == 1024
    assert _largest_group(dict(defaults, effort_check=False)) == 2048
    assert _largest_group(dict(defaults, max_groups=8)) == 256
    assert _largest_group(dict(defaults, max_groups=4)) == 256


def test_the_group_size_predicted_from_the_groups_spread():
    """Variance ∝ 1 / particles: past one nat², doubled until the variance would be a half,
    within the largest size; groups already run are replaced only on a clear excess."""
    from pymc_evidence.estimators.thermodynamic import _group_particles

    wide = np.array([-2.0, 0.0, 2.0, 0.5])  # sample variance 2.73: three doublings
    assert _group_particles(wide, 256, 4096, None) == 2048
    assert _group_particles(wide, 256, 512, None) == 512
    assert _group_particles(wide / 2, 256, 2048, None) == 256  # variance 0.68
    assert _group_particles(np.array([0.0, np.nan, -np.inf]), 256, 2048, None) == 256
    # 32 groups of variance 1.74 (chi-square bound at 90 % 1.30): replaced; 8 of variance 1.2
    # (bound 0.70) are not.
    rng = np.random.default_rng(0)
    many = rng.normal(size=32)
    many *= np.sqrt(1.74) / np.std(many, ddof=1)
    assert _group_particles(many, 256, 2048, 0.9) == 1024
    few = rng.normal(size=8)
    few *= np.sqrt(1.2) / np.std(few, ddof=1)
    assert _group_particles(few, 1024, 8192, 0.9) == 1024
    assert _group_particles(few, 1024, 8192, None) == 4096


def test_extra_groups_wanted_for_the_reported_se():
    """As many groups as bring the reported SE (its Student factor shrinking with them) to
    target_se with 10 % of variance to spare; fewer than two groups with a finite estimate
    give an infinite SE: every group the budget allows, not an overflow."""
    from pymc_evidence.estimators._stepping_stone import Estimate
    from pymc_evidence.estimators.thermodynamic import _extra_groups_wanted

    def estimate(within, between):
        return Estimate(0.0, max(within, between), within, between, np.zeros(4))

    settings = dict(target_se=0.1)
    assert _extra_groups_wanted(estimate(0.0, np.inf), 32, settings) == 28
    assert _extra_groups_wanted(estimate(0.2, 0.0), 32, settings) == 14  # 4 × 2² × 1.1 → 18
    # 1.62 × 0.1 at 4 groups; at 7, 1.25 × 0.1 × √(4/7) × √1.1 = 0.099
    assert _extra_groups_wanted(estimate(0.0, 0.1), 32, settings) == 3
    assert _extra_groups_wanted(estimate(0.05, 0.06), 32, settings) == 0
    assert _extra_groups_wanted(estimate(0.0, 0.1), 6, settings) == 2


def test_the_reported_se_widens_a_spread_from_few_groups():
    """Four groups whose log estimates spread by σ = 0.2 (no within-group error): their spread
    alone covers the error like a Student t with 3 degrees of freedom, 86 % within 2 SE; the
    reported SE, widened by t₃(0.975) / z(0.975), covers 95 %. A within-group error larger
    than the widened spread is reported as it is."""
    from pymc_evidence.estimators._stepping_stone import (
        reported_se, stepping_stone, student_factor)

    assert student_factor(4) == pytest.approx(3.182 / 1.960, abs=1e-3)
    assert student_factor(32) == pytest.approx(2.040 / 1.960, abs=1e-3)
    rng = np.random.default_rng(11)
    G, sigma = 4, 0.2
    errors, spread, reported = [], [], []
    for row in rng.normal(-(sigma**2) / 2, sigma, size=(4000, G)):
        estimate = stepping_stone(row[:, None], np.zeros((G, 1)))
        errors.append(abs(estimate.log_evidence))
        spread.append(estimate.se)
        reported.append(reported_se(estimate))
    errors, spread, reported = map(np.asarray, (errors, spread, reported))
    assert 0.84 < np.mean(errors <= 2 * spread) < 0.89
    assert 0.94 < np.mean(errors <= 2 * reported) < 0.97
    precise = stepping_stone(np.array([[0.0], [0.01], [0.02], [0.03]]), np.full((G, 1), 0.04))
    assert precise.se_within == pytest.approx(0.1, rel=1e-3)
    assert reported_se(precise) == precise.se_within
