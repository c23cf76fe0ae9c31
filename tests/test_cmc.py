"""Contour Monte Carlo: Liang's 10-state example (Tables 1-2) and nested conjugate regressions."""

import numpy as np
import pymc as pm
import pytest
from scipy.stats import multivariate_normal

import pymc_evidence as pm_evidence
from pymc_evidence.estimators._cmc_core import cmc_core, delta_schedule, stability_statistic
from pymc_evidence.estimators.cmc import cmc

# ----------------------------------------------------------------- Liang's 10-state example
#: Table 1: unnormalised mass function of the 10 states.
MASS = np.array([1, 100, 2, 1, 3, 1, 2, 2000, 10, 1], dtype=float)
#: E1 = {1, 2, 3}, E2 = {4, 5, 6}, E3 = {7, 8, 9, 10}.
REGION = np.array([0, 0, 0, 1, 1, 1, 2, 2, 2, 2])
#: g(E_i) = 103, 5, 2013. They sum to 2121: the paper's "Σ = 2021" under Table 2 is a typo
#: (its own CMC estimates 103.108 + 4.988 + 2012.904 sum to 2121.0).
G_TRUE = np.array([103.0, 5.0, 2013.0])


def ten_state_step(transition):
    """Metropolis-Hastings on the 10 states with proposal matrix T, targeting eq. 2.1."""
    log_t = np.log(transition)
    cumulative = np.cumsum(transition, axis=1)
    cumulative[:, -1] = 1.0
    log_mass = np.log(MASS)

    def step(rng, x, log_g):
        rows = np.arange(x.size)
        y = (cumulative[x] < rng.uniform(size=x.size)[:, None]).sum(axis=1)
        log_alpha = (
            log_g[rows, REGION[x]] - log_g[rows, REGION[y]]
            + log_mass[y] - log_mass[x] + log_t[y, x] - log_t[x, y]
        )
        x = np.where(np.log(rng.uniform(size=x.size)) < log_alpha, y, x)
        return x, REGION[x]

    return step


@pytest.fixture(scope="module")
def ten_state():
    rng = np.random.default_rng(2005)
    # "a stochastic matrix of which each row is generated independently from Dirichlet(1,...,1)"
    transition = rng.dirichlet(np.ones(10), size=10)
    R = 100  # independent runs, vectorised (Liang ran 50)
    # Liang: delta_1 = 0.1, K_1 = 1000, K_{s+1} = 1.5 K_s, delta_end = 1e-6; here delta_end =
    # 1e-4 (10 stages, 1.2e5 iterations) to keep the test at a few seconds.
    return cmc_core(
        rng, ten_state_step(transition), rng.integers(0, 10, size=R), 3, R,
        delta_1=0.1, delta_end=1e-4, stage_length=1000, growth=1.5,
    )


def test_ten_state_weights(ten_state):
    g = G_TRUE.sum() * np.exp(ten_state.log_g)  # constraint Σ ĝ = 2121, per run
    estimate = g.mean(axis=0)
    se = g.std(axis=0, ddof=1) / np.sqrt(g.shape[0])
    # Measured (seed 2005): (102.5, 4.99, 2013.5) with SE (0.65, 0.035, 0.68).
    assert np.all(np.abs(estimate - G_TRUE) <= 4 * se), (estimate, se)
    assert np.all(np.abs(estimate - G_TRUE) <= np.array([2.5, 0.1, 2.5]))
    assert np.all(se < np.array([1.0, 0.05, 1.0]))


def test_ten_state_flat_histogram(ten_state):
    last = ten_state.counts[-1]
    frequency = last / last.sum(axis=1, keepdims=True)
    # Table 2: each region about 1/3 although their masses differ by a factor 400.
    assert np.all(np.abs(frequency.mean(axis=0) - 1 / 3) < 0.005)
    assert np.all(np.abs(frequency - 1 / 3) < 0.05)
    assert ten_state.stability[-1] < 0.05


def test_ten_state_bookkeeping(ten_state):
    deltas = delta_schedule(0.1, 1e-4)
    np.testing.assert_allclose(ten_state.deltas, deltas)
    lengths = np.round(1000 * 1.5 ** np.arange(len(deltas)))  # K_{s+1} = 1.5 K_s
    assert ten_state.stage_iterations[0] == 1000
    assert np.all(ten_state.stage_iterations >= lengths)
    assert np.all(ten_state.stage_iterations < 1.1 * lengths + 1)  # whole batches of K_s / 10
    assert ten_state.path.shape == (ten_state.path_iteration.size, 100)
    assert set(np.unique(ten_state.path)) == {0, 1, 2}
    np.testing.assert_allclose(np.exp(ten_state.log_g_stages).sum(axis=2), 1.0)


def test_delta_schedule():
    deltas = delta_schedule(0.1, 1e-3)
    np.testing.assert_allclose(deltas[1:], np.sqrt(1 + deltas[:-1]) - 1)
    assert deltas[-1] >= 1e-3 > np.sqrt(1 + deltas[-1]) - 1
    assert len(deltas) == 7
    with pytest.raises(ValueError, match="delta_end must be in"):
        delta_schedule(0.1, 0.5)
    with pytest.raises(ValueError, match="delta_1 must be positive"):
        delta_schedule(0.0, 1e-3)


def test_stability_statistic():
    before = np.array([[10, 10, 0], [10, 10, 10]])
    now = np.array([[20, 20, 0], [20, 10, 10]])
    s = stability_statistic(before, now)
    assert s[0] == 0.0  # unvisited regions count as 0/0 = 1
    expected = np.mean(np.abs(np.array([0.5, 0.25, 0.25]) / (1 / 3) - 1))
    assert s[1] == pytest.approx(expected)
    assert stability_statistic(np.array([[10, 0]]), np.array([[10, 1]]))[0] == np.inf


def test_core_stability_extends_stages():
    rng = np.random.default_rng(0)
    step = ten_state_step(rng.dirichlet(np.ones(10), size=10))
    res = cmc_core(rng, step, np.zeros(4, dtype=int), 3, 4, delta_end=0.02, stage_length=100,
                   stability_tol=1e-9, max_stage_factor=2.0)
    lengths = np.round(100 * 1.5 ** np.arange(len(res.deltas)))
    assert np.all(res.stage_iterations >= 2 * lengths)  # never stable: extended to the limit
    assert np.all(res.stage_iterations < 2.1 * lengths + 1)


# ----------------------------------------------------------------- nested regressions
N_OBS, NOISE_SD, PRIOR_SD = 30, 0.5, 1.0


def nested_regressions():
    """y = X[:, :k] w + noise for k = 1, 2, 3 on the same data; exact log evidences."""
    X = np.random.default_rng(3).normal(size=(N_OBS, 3))
    y = X @ np.array([1.0, 0.25, 0.0]) + NOISE_SD * np.random.default_rng(0).normal(size=N_OBS)
    models, log_z = {}, {}
    for k in (1, 2, 3):
        with pm.Model() as model:
            w = pm.Normal("w", 0.0, PRIOR_SD, shape=k)
            pm.Normal("y", X[:, :k] @ w, NOISE_SD, observed=y)
        cov = NOISE_SD**2 * np.eye(N_OBS) + PRIOR_SD**2 * X[:, :k] @ X[:, :k].T
        models[f"k={k}"] = model
        log_z[f"k={k}"] = float(multivariate_normal(np.zeros(N_OBS), cov).logpdf(y))
    return models, log_z


@pytest.fixture(scope="module")
def regressions():
    models, log_z = nested_regressions()
    results = cmc(models, random_seed=1, progressbar=False)
    return models, log_z, results


def test_nested_regressions_probabilities(regressions):
    _, log_z, results = regressions
    names = list(log_z)
    exact = np.array([log_z[n] for n in names])
    truth = np.exp(exact - exact.max())
    truth /= truth.sum()  # (0.556, 0.389, 0.055)
    p = np.array([results[n].probability for n in names])
    p_se = np.array([results[n].probability_se for n in names])
    # Measured (seed 1): (0.5535, 0.3911, 0.0554) with SE about 0.004.
    assert np.all(np.abs(p - truth) < 0.03), (p, truth)
    assert np.all(np.abs(p - truth) <= 4 * p_se + 0.002), (p, truth, p_se)
    assert p.sum() == pytest.approx(1.0)


def test_nested_regressions_log_evidence(regressions):
    _, log_z, results = regressions
    for name, exact in log_z.items():
        res = results[name]
        assert type(res) is pm_evidence.CMCResult and res.model_name == name
        assert abs(res.log_evidence - exact) <= 3 * res.se, (name, res.log_evidence, exact)
        assert abs(res.importance_log_evidence - exact) < 0.1
        assert not res.warnings


def test_ratios_have_their_own_standard_errors(regressions):
    """Differences between a run's models are free of the anchor, and their SEs come from the
    replicas: the models' probabilities sum to 1 in every replica, so they are not independent."""
    _, log_z, results = regressions
    names = list(results)
    for a, b in [(names[0], names[1]), (names[0], names[2]), (names[1], names[2])]:
        ratio = results[a].log_evidence - results[b].log_evidence
        dse = results[a].difference_se(results[b])
        assert abs(ratio - (log_z[a] - log_z[b])) <= 3 * dse, (a, b, ratio, dse)
        p = np.array(results[a].replica_probability)
        q = np.array(results[b].replica_probability)
        spread = np.log(p / q)  # per replica: to first order, the SE of the log ratio is theirs
        assert dse == pytest.approx(spread.std(ddof=1) / np.sqrt(p.size), rel=0.05)
    assert results[names[0]].difference_se(results[names[0]]) == 0.0
    other = pm_evidence.CMCResult(log_evidence=0.0, se=0.3)
    assert results[names[0]].difference_se(other) == pytest.approx(np.hypot(results[names[0]].se, 0.3))


def test_nested_regressions_diagnostics(regressions):
    _, _, results = regressions
    names = list(results)
    first = results[names[0]]
    assert list(first.diagnostics.columns) == [
        "delta", "iterations", "stability", "log_g", "log_g_se", "frequency", "between_acceptance",
    ]
    assert first.diagnostics.index.name == "stage"
    for res in results.values():
        assert abs(res.frequency - 1 / 3) < 0.03
        assert res.between_acceptance > 0.3
        assert 0.5 < res.within_acceptance <= 1.0
    path = first.sample_stats["model_index"]
    assert path.shape[0] == first.settings["n_chains"]
    second = results[names[1]]
    assert first.settings == second.settings and first.settings is not second.settings
    assert set(np.unique(path)) == {0, 1, 2}
    assert first.settings["models"] == names
    assert first.posterior["w"].shape[-1] == 1


def test_same_seed_same_answer():
    models, _ = nested_regressions()
    options = dict(delta_end=0.02, stage_length=50, n_pilot=16, anchor_draws=100,
                   progressbar=False)
    a = cmc(list(models.values())[:2], random_seed=5, **options)
    b = cmc(list(models.values())[:2], random_seed=5, **options)
    assert [r.log_evidence for r in a.values()] == [r.log_evidence for r in b.values()]
    np.testing.assert_array_equal(a["model_0"].sample_stats["model_index"],
                                  b["model_0"].sample_stats["model_index"])


def test_bad_input():
    models, _ = nested_regressions()
    two = [models["k=1"], models["k=2"]]
    with pytest.raises(ValueError, match="at least two models"):
        cmc([models["k=1"]], progressbar=False)
    with pytest.raises(TypeError, match="not a pymc.Model"):
        cmc([models["k=1"], "k=2"], progressbar=False)
    with pytest.raises(ValueError, match="n_chains must be an integer >= 2"):
        cmc(two, n_chains=1, progressbar=False)
    with pytest.raises(ValueError, match="delta_end must be in"):
        cmc(two, delta_end=0.5, progressbar=False)
    with pytest.raises(ValueError, match="model_proposal must be 'uniform'"):
        cmc(two, model_proposal="random", progressbar=False)
    with pytest.raises(ValueError, match="non-negative rows summing to 1"):
        cmc(two, model_proposal=np.ones((2, 2)), progressbar=False)
    with pytest.raises(ValueError, match="stage_length must be an integer >= 10"):
        cmc(two, stage_length=5, progressbar=False)
    with pm.Model() as flat:
        mu = pm.Flat("mu")
        pm.Normal("y", mu, 1, observed=[0.0])
    with pytest.raises(ValueError, match="model 'model_1': .*improper prior"):
        cmc([models["k=1"], flat], progressbar=False)


def test_compare_cmc_table(regressions):
    models, log_z, _ = regressions
    table = pm_evidence.compare(models, method="cmc", random_seed=2, progressbar=False,
                                delta_end=0.01, anchor_draws=500)
    assert list(table.index) == ["k=1", "k=2", "k=3"]  # exact order: -21.05, -21.41, -23.36
    assert (table["method"] == "cmc").all()
    assert table["weight"].sum() == pytest.approx(1.0)
    results = table.attrs["results"]
    for name in ["k=2", "k=3"]:
        assert table.loc[name, "dse"] == results[name].difference_se(results["k=1"])
    probability = {n: r.probability for n, r in results.items()}
    for name in table.index:  # uniform model prior: weight = CMC's model probability
        assert table.loc[name, "weight"] == pytest.approx(probability[name], rel=1e-9)
    with pytest.raises(TypeError, match="not_an_option"):
        pm_evidence.compare(models, method="cmc", not_an_option=1, progressbar=False)


def test_plot_cmc_path(regressions):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    _, _, results = regressions
    ax = pm_evidence.plot_cmc_path(results)
    assert [t.get_text() for t in ax.get_yticklabels()] == ["k=1", "k=2", "k=3"]
    x, y = ax.lines[0].get_data()
    stats = results["k=1"].sample_stats
    last = stats["stage"][0] == stats["stage"][0].max()
    np.testing.assert_array_equal(y, stats["model_index"][0][last] + 1)
    ax_all = pm_evidence.plot_cmc_path(results["k=2"], chain=1, stage=None)
    assert ax_all.lines[0].get_data()[0].size == stats["iteration"].shape[1]
    plt.close("all")
    with pytest.raises(ValueError, match="needs a result of cmc"):
        pm_evidence.plot_cmc_path(pm_evidence.LaplaceResult(0.0, 0.0))
