"""nested(): exact-evidence models within their reported error, reproducibility, validation,
and its place in compare and the result files."""

from __future__ import annotations

import numpy as np
import pytest

import pymc_evidence as pm_evidence
from pymc_evidence import testing
from pymc_evidence.results import EvidenceWarning

from _scripts import load_script  # tests/_scripts.py


@pytest.fixture(scope="module")
def regression():
    model, exact = testing.conjugate_regression(dim=5)
    result = pm_evidence.nested(model, random_seed=1, progressbar=False)
    return model, exact, result


def test_exact_regression_within_its_error(regression):
    _, exact, res = regression
    assert type(res) is pm_evidence.NestedResult and res.method == "nested"
    assert abs(res.log_evidence - exact) < 3 * res.se, (res.log_evidence, res.se, exact)
    assert res.se <= 0.1 and not res.warnings  # target_se reached: more runs were started
    assert abs(res.insertion_z) < 3.3  # the slice moves pass the insertion-rank test
    assert res.n_runs == len(res.run_log_evidence) > 2
    assert res.se == max(res.se_within, res.se_between)
    assert res.n_live == 125 and res.settings["num_inner_steps"] == 25  # defaults for d = 5
    assert res.settings["num_delete"] == 62
    assert res.moves_levels == () and set(res.run_inner_steps) == {25}  # no check off MLPs


def test_diagnostics_and_posterior(regression):
    model, _, res = regression
    frame = res.diagnostics
    assert frame.index.name == "step" and set(frame["run"]) == set(range(res.n_runs))
    for _, steps in frame.groupby("run"):
        assert np.all(np.diff(steps["log_x"]) < 0)  # the volume shrinks every step
        assert np.all(np.diff(steps["log_threshold"]) >= 0)  # the contour only rises
    draws = res.posterior["w"]
    assert draws.shape[:2] == (res.n_runs, res.sample_stats["log_likelihood"].shape[1])
    # The posterior of a conjugate regression is Gaussian with a known mean.
    X, y = _regression_data(model)
    precision = np.eye(5) + X.T @ X / 0.5**2
    mean = np.linalg.solve(precision, X.T @ y / 0.5**2)
    sd = np.sqrt(np.diag(np.linalg.inv(precision)))
    assert np.all(np.abs(draws.reshape(-1, 5).mean(axis=0) - mean) < 0.1 * sd + 4 * sd / np.sqrt(
        res.ess))


def _regression_data(model):
    """Design and data of testing.conjugate_regression(dim=5), rebuilt from its seed."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(30, 5))
    y = X @ rng.normal(scale=1.0, size=5) + 0.5 * rng.normal(size=30)
    np.testing.assert_allclose(model.rvs_to_values[model["y"]].data, y)
    return X, y


def test_bimodal_mixture_within_its_error():
    model, exact = testing.gaussian_mixture_potential(dim=2)
    res = pm_evidence.nested(model, random_seed=3, progressbar=False)
    assert abs(res.log_evidence - exact) < 3 * res.se, (res.log_evidence, res.se, exact)
    assert res.diagnostics["n_clusters"].max() >= 2  # the contour split into the two modes


@pytest.mark.slow
def test_correlated_gaussian_d100_within_its_error():
    """100-d Gaussian likelihood with AR(1) correlation 0.9 (information about 309 nats), where
    pm.sample_smc is 12 nats high: default slice moves (5 d), 500 live points (5 d, the fewest
    without an upward bias; the default 2500 costs five times more per run)."""
    model, exact = testing.correlated_gaussian(dim=100)
    res = pm_evidence.nested(model, n_live=500, n_runs=2, target_se=None, random_seed=0,
                             progressbar=False)
    assert not res.warnings
    assert res.settings["num_inner_steps"] == 500
    assert abs(res.log_evidence - exact) < 3 * res.se, (res.log_evidence, res.se, exact)
    assert abs(res.information - 309) < 15  # KL(posterior || prior), computed in closed form
    assert abs(res.insertion_z) < 3.3


def test_runs_are_averaged_over_z_so_a_mode_some_runs_missed_counts():
    """Robot-arm MLP h=3: two of four runs found a mode worth 72 nats more evidence. Averaging
    log Z would land between the two groups (-95), wherever more runs put it; averaging Z
    gives the mode's value, up to log(4/2) for the runs that missed it, and an SE that says
    only some runs found it."""
    from types import SimpleNamespace

    from pymc_evidence.estimators.nested import _combine

    def runs(log_z, se):
        return [SimpleNamespace(log_z=v, log_z_se=s) for v, s in zip(log_z, se)]

    found = [-59.49, -58.79]
    estimate, se, within, between = _combine(runs([-131.71, -131.31, *found], [0.4] * 4))
    assert -59.9 < estimate < -59.6  # log((e^-59.57 + e^-58.87) / 4)
    assert se == between > 0.5 and within < 0.4
    # Runs that agree: the mean log Z (to a fifth of the SE here: -s^2/2 + (R-1)/2R var) and
    # the usual SEs.
    log_z, s = np.array([-10.3, -10.1, -10.6, -10.2]), np.full(4, 0.3)
    estimate, se, within, between = _combine(runs(log_z, s))
    assert abs(estimate - log_z.mean()) < 0.2 * se
    assert abs(within - 0.15) < 0.005
    assert abs(between - log_z.std(ddof=1) / 2) < 0.01


def test_same_seed_same_result():
    model, _ = testing.beta_binomial()
    options = dict(random_seed=7, progressbar=False, target_se=None, n_live=50)
    first, second = (pm_evidence.nested(model, **options) for _ in range(2))
    assert first.log_evidence == second.log_evidence and first.se == second.se
    np.testing.assert_array_equal(first.posterior["p"], second.posterior["p"])


def test_progress_bar_says_how_many_runs_the_se_asks_for(capsys):
    """Runs that disagree can ask for many more runs than the first two: the bar says so
    before they are spent."""
    model, _ = testing.beta_binomial()
    res = pm_evidence.nested(model, random_seed=0, n_live=50, target_se=0.05, cores=1)
    shown = capsys.readouterr().err
    assert res.n_runs > 2 and "Nested sampling (run 1 of 2)" in shown
    assert f"Nested sampling (run {res.n_runs} of {res.n_runs})" in shown


def test_given_cores_run_the_first_runs_in_parallel(capsys):
    """``cores`` given: the first runs already go to the workers, and give what one process
    gives (by default the first run alone decides whether workers pay)."""
    model, _ = testing.beta_binomial()
    options = dict(random_seed=3, n_live=50, target_se=None)
    parallel = pm_evidence.nested(model, cores=2, **options)
    assert "Nested sampling (runs 1–2, in parallel)" in capsys.readouterr().err
    serial = pm_evidence.nested(model, **options)
    assert "Nested sampling (run 1 of 2)" in capsys.readouterr().err
    assert parallel.run_log_evidence == serial.run_log_evidence
    assert parallel.log_evidence == serial.log_evidence and parallel.se == serial.se


def test_max_steps_warns():
    model, _ = testing.beta_binomial()
    with pytest.warns(EvidenceWarning, match="max_steps"):
        res = pm_evidence.nested(model, random_seed=0, progressbar=False, target_se=None,
                                 n_live=50, max_steps=3)
    assert res.warning


def test_bad_input_errors_before_any_work():
    model, _ = testing.beta_binomial()
    with pytest.raises(ValueError, match="n_runs must be an integer >= 2"):
        pm_evidence.nested(model, n_runs=1)
    with pytest.raises(ValueError, match="num_delete must be smaller than n_live=50"):
        pm_evidence.nested(model, n_live=50, num_delete=50)
    with pytest.raises(TypeError, match="target_se must be a number or None"):
        pm_evidence.nested(model, target_se="x")
    with pytest.raises(ValueError, match="termination must be in"):
        pm_evidence.nested(model, termination=0.0)
    with pytest.raises(TypeError, match="model must be a pymc.Model"):
        pm_evidence.nested("model")
    with pytest.raises(ValueError, match=r"moves_check must be one of \['auto', True, False\]"):
        pm_evidence.nested(model, moves_check="yes")
    with pytest.raises(ValueError, match="moves_check=True needs max_runs >= 2 \\* n_runs = 8"):
        pm_evidence.nested(model, moves_check=True, n_runs=4, max_runs=7)
    wide, _ = testing.conjugate_regression(dim=10)
    with pytest.raises(ValueError, match="n_live must be larger than the model's 10 unconstrained"):
        pm_evidence.nested(wide, n_live=9)


def test_compare_ranks_by_nested_evidence():
    models, exact = testing.annotators()
    table = pm_evidence.compare(models, method="nested", random_seed=2, progressbar=False)
    assert list(table.index) == sorted(exact, key=exact.get, reverse=True)
    assert set(table["method"]) == {"nested"}
    for name, row in table.iterrows():
        assert abs(row["log_evidence"] - exact[name]) < 3 * row["se"] + 1e-9


def test_too_few_inner_steps_warns():
    model, _ = testing.conjugate_regression(dim=5)
    with pytest.warns(EvidenceWarning, match="num_inner_steps=9 is below 5 times the model's 5"):
        pm_evidence.nested(model, random_seed=0, progressbar=False, target_se=None,
                           num_inner_steps=9)


def test_too_few_live_points_per_parameter_warn():
    model, _ = testing.conjugate_regression(dim=5)
    with pytest.warns(EvidenceWarning, match="n_live=20 is below 5 times the model's 5"):
        pm_evidence.nested(model, n_live=20, max_steps=2, target_se=None, random_seed=0,
                           progressbar=False)


def test_insertion_ranks_warn_when_the_moves_do_not_mix():
    """One slice move per replacement on a 20-d correlated Gaussian: the new points rank too
    high among the survivors (measured insertion z = +10.6 to +12.3 over 3 seeds)."""
    model, _ = testing.correlated_gaussian(dim=20)
    with pytest.warns(EvidenceWarning, match="rank above the survivors"):
        res = pm_evidence.nested(model, random_seed=0, progressbar=False, target_se=None,
                                 num_inner_steps=1)
    assert res.insertion_z > 3.3


@pytest.mark.slow  # an MLP run: a minute or more on a 2-core machine
def test_mlp_layers_align_points_and_the_moves_check_keeps_the_evidence():
    """Exchangeable units with an exact evidence: aligning the points under the units'
    permutations leaves log Z within 3 SE. On an MLP (here with a fifth of the default moves,
    to be quick, which warns) the moves check runs n_runs runs with twice the moves; levels
    that agree are pooled, the SE including their difference beyond its noise."""
    rng = np.random.default_rng(0)
    x = rng.uniform(-1, 1, size=(25, 2))
    y = 0.3 + x @ np.array([0.8, -0.5]) + 0.4 * x[:, 0] ** 2 + 0.5 * rng.normal(size=25)
    model, exact = testing.unit_regression(3, x, y)
    layer = pm_evidence.MLPLayer("W", output="v", bias="b", activation="relu")
    with pytest.warns(EvidenceWarning, match="num_inner_steps=104 is below 40 times the MLP"):
        res = pm_evidence.nested(model, mlp_layers=layer, num_inner_steps=104, target_se=None,
                                 random_seed=4, progressbar=False)
    assert abs(res.log_evidence - exact) < 3 * res.se, (res.log_evidence, res.se, exact)
    assert res.settings["mlp_layers"][0]["weights"] == "W"
    assert res.moves_levels == (104, 208) and res.run_inner_steps == (104, 104, 208, 208)
    assert res.n_runs == 4 and list(res.diagnostics.groupby("run")["num_inner_steps"].first()
                                    ) == [104, 104, 208, 208]
    move = res.moves_log_evidence[1] - res.moves_log_evidence[0]
    assert abs(move) <= 2 * np.hypot(*res.moves_se)  # settled at the first doubling
    assert res.se == pytest.approx(_se_with_move(res))
    assert not any("doubled" in message for message in res.warnings)
    with pytest.raises(ValueError, match="not an untransformed free variable"):
        pm_evidence.nested(model, mlp_layers=pm_evidence.MLPLayer("w_in"), progressbar=False)


def test_moves_check_keeps_doubling_while_the_estimate_moves():
    """A fifth of a move per parameter on a 20-d correlated Gaussian biases log Z up by 5
    nats (replacements stay near their survivors); as the moves double the estimate comes
    down, level by level, and the budget (n_runs × 2^k ≤ max_runs) ends before two levels
    agree: the last level is reported, its SE including the last move, with a warning."""
    model, exact = testing.correlated_gaussian(dim=20)
    with pytest.warns(EvidenceWarning, match="kept moving as the slice moves per replacement"):
        res = pm_evidence.nested(model, num_inner_steps=4, moves_check=True, target_se=None,
                                 random_seed=0, progressbar=False)
    assert res.moves_levels == (4, 8, 16, 32) and res.run_inner_steps == (32, 32)
    assert np.all(np.diff(res.moves_log_evidence) < 0)
    assert res.moves_log_evidence[0] - exact > 4  # the bias the check is there for
    assert res.se == pytest.approx(_se_with_move(res))
    assert abs(res.log_evidence - exact) < 3 * res.se, (res.log_evidence, res.se, exact)


@pytest.mark.filterwarnings("ignore:the estimate (kept moving|moved) as the slice moves")
def test_a_moves_check_that_went_on_covers_noise_and_bias():
    """A check that goes past its first doubling pools a level chosen for having moved: with
    no bias (2 runs per check level against 16) a fifth of these fell beyond 2 SE before the
    SE covered the set-aside first level, and with a 2-nat bias that halves as the moves
    double, half, before the last move was bounded by |δ| + c
    (benchmarks/results/effort_check_coverage.md)."""
    coverage = load_script("benchmarks/effort_check_coverage.py")
    design = coverage.DESIGNS[0]  # 16 runs, then 2 per check level: Liang's MLPs at 40 d
    rng = np.random.default_rng(0)
    fits = np.array([coverage.fit(rng, 0.0, design) for _ in range(3000)])
    went_on = fits[:, 3] > 0
    z = fits[went_on, 0] / fits[went_on, 1]
    assert went_on.sum() >= 60
    assert np.mean(np.abs(z) > 2) <= 0.05, (went_on.sum(), np.mean(np.abs(z) > 2))
    # Over every fit the error bars stay calibrated.
    assert np.mean(np.abs(fits[:, 0] / fits[:, 1]) > 2) <= 0.05
    biased = np.array([coverage.fit(rng, -2.0, design) for _ in range(300)])
    went_on = biased[:, 3] > 0
    assert went_on.mean() > 0.8
    assert np.mean(np.abs(biased[went_on, 0] / biased[went_on, 1]) > 2) <= 0.05


def _se_with_move(res) -> float:
    """The runs' SE and the part of the last doubling's move its noise does not explain,
    scaled by 1 + the lower level's share of the pooled Z (the lower level is the more
    biased); once a doubling had moved the estimate beyond the band, the move plus its
    noise."""
    move = res.moves_log_evidence[-1] - res.moves_log_evidence[-2]
    noise = np.hypot(*res.moves_se[-2:])
    log_z, se = np.array(res.run_log_evidence), np.array(res.run_se)
    z = np.exp(log_z - se**2 / 2 - np.max(log_z - se**2 / 2))
    share = z[np.array(res.run_inner_steps) == res.moves_levels[-2]].sum() / z.sum()
    shown = len(res.moves_levels) > 2 or abs(move) > 2 * noise
    moved = abs(move) + noise if shown else np.sqrt(max(0, move**2 - noise**2))
    return np.hypot(max(res.se_within, res.se_between), (1 + share) * moved)


def test_plot_nested_draws_every_run(regression):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    _, _, res = regression
    left, right = pm_evidence.plot_nested(res)
    assert len(left.lines) == len(right.lines) - 1 == res.n_runs  # right: also the −H line
    # Each run's bulge holds its dead points' share of the evidence and has passed by the end.
    for line in right.lines[:-1]:
        log_x, mass = line.get_data()
        assert 0.9 < -np.trapezoid(mass, log_x) < 1.1
        assert mass[-1] < 0.05 * mass.max()
    plt.close("all")
    with pytest.raises(ValueError, match="needs a result of nested"):
        pm_evidence.plot_nested(pm_evidence.BICResult(log_evidence=-1.0, se=0.0))


def test_an_mlps_layers_are_recognised_and_used_unless_declined():
    model = testing.robot_arm_mlp(1)
    dim = 12
    res = pm_evidence.nested(model, max_steps=2, target_se=None, random_seed=0,
                             progressbar=False)
    assert res.settings["mlp_layers"] == [vars(testing.ROBOT_ARM_LAYER)]
    assert res.settings["num_inner_steps"] == 40 * dim  # the MLP default
    assert res.moves_levels == ()  # no moves check on runs cut short at max_steps
    assert not any("times the MLP" in message for message in res.warnings)
    declined = pm_evidence.nested(model, max_steps=2, target_se=None, random_seed=0,
                                  progressbar=False, mlp_layers=None)
    assert declined.settings["mlp_layers"] is None
    assert declined.settings["num_inner_steps"] == 5 * dim
