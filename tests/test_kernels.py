"""The HMC kernel: the metric estimated from a population, and the number of moves."""

import numpy as np
import pytest

from pymc_evidence import kernels
from pymc_evidence.density import DensityValues
from pymc_evidence.kernels import Metric


@pytest.fixture(scope="module")
def gaussian_population():
    """Draws of a correlated 6-d Gaussian N(0, Σ) and the log density's gradients −Σ⁻¹θ."""
    rng = np.random.default_rng(11)
    a = rng.normal(size=(6, 6))
    cov = a @ a.T + 6 * np.eye(6)
    draws = rng.multivariate_normal(np.zeros(6), cov, size=200_000)
    weights = np.full(len(draws), 1.0 / len(draws))
    return cov, draws, -draws @ np.linalg.inv(cov), weights


def test_gradient_informed_metric_is_exact_on_a_gaussian(gaussian_population):
    cov, draws, grads, weights = gaussian_population
    dense = Metric.from_population(draws, weights, True, gradients=grads)
    np.testing.assert_allclose(dense.cov, cov, rtol=0.02, atol=0.02 * cov.max())
    np.testing.assert_allclose(dense.chol_inv.T @ dense.chol_inv, np.linalg.inv(dense.cov), atol=1e-10)
    diag = Metric.from_population(draws, weights, False, gradients=grads)
    # nutpie's diagonal rule: √(Var θ_i / Var ∂_i log π) = √(Σ_ii / (Σ⁻¹)_ii)
    np.testing.assert_allclose(diag.variances, np.sqrt(np.diag(cov) / np.diag(np.linalg.inv(cov))), rtol=0.01)


def test_gradient_informed_metric_sees_the_width_of_separated_modes():
    """Two narrow modes (sd 0.1) 20 apart: the population's variance is ~100, the modes' 0.01."""
    rng = np.random.default_rng(12)
    centres = rng.choice([-10.0, 10.0], size=(20_000, 1))
    draws = centres + 0.1 * rng.standard_normal((20_000, 1))
    grads = -(draws - centres) / 0.01
    weights = np.full(len(draws), 1.0 / len(draws))
    plain = Metric.from_population(draws, weights, False).variances[0]
    informed = Metric.from_population(draws, weights, False, gradients=grads).variances[0]
    assert plain == pytest.approx(100.01, rel=0.02)
    assert informed == pytest.approx(np.sqrt(100.01 * 0.01), rel=0.02)  # geometric mean: ~1


def test_non_finite_gradients_of_dead_particles_are_ignored(gaussian_population):
    cov, draws, grads, weights = gaussian_population
    draws, grads, weights = draws[:1000], grads[:1000].copy(), np.full(1000, 1 / 999)
    weights[0], grads[0] = 0.0, np.nan  # a particle of zero weight, outside the support
    with_dead = Metric.from_population(draws, weights, True, gradients=grads)
    without = Metric.from_population(draws[1:], weights[1:], True, gradients=grads[1:])
    np.testing.assert_allclose(with_dead.cov, without.cov, rtol=1e-10)
    grads[1] = np.inf  # a live particle with a broken gradient: fall back to the positions
    fallback = Metric.from_population(draws, weights, True, gradients=grads)
    np.testing.assert_allclose(fallback.cov, Metric.from_population(draws, weights, True).cov)


def _standard_normal(positions):
    """A density without data: prior N(0, I), log likelihood 0."""
    zeros = np.zeros(len(positions))
    return DensityValues(-0.5 * np.sum(positions**2, axis=1), zeros, -positions, np.zeros_like(positions))


def test_mutate_runs_the_transitions_it_is_given_and_suggests_the_next():
    rng = np.random.default_rng(1)
    start = kernels.init(_standard_normal, rng.standard_normal((400, 3)))
    metric = Metric(np.ones(3))

    def move(step_size=0.5, **options):
        return kernels.mutate(rng, start, _standard_normal, 1.0, metric, step_size, **options)[1]

    adaptive = move(decorrelation=0.2)  # stops where the population has decorrelated
    assert 1 <= adaptive.n_transitions == adaptive.suggested_transitions < 20
    assert adaptive.correlation < 0.2
    fixed = move(decorrelation=0.2, n_transitions=15)  # runs on, but reports where it got there
    assert fixed.n_transitions == 15 and fixed.traced_log_prior.shape == (15, 8)
    assert 1 <= fixed.suggested_transitions < 15
    # A threshold below what 400 independent chains show by chance (2√(2/(400π)) = 0.08) is
    # raised to it, so the population still counts as decorrelated; 0 switches the rule off.
    assert move(decorrelation=0.01).suggested_transitions < 20
    assert move(decorrelation=0.0, n_transitions=15).suggested_transitions == 20
    # Not decorrelated within the transitions given (tiny steps): 50 % more next time, at least
    # one more, at most max_transitions.
    assert move(0.01, decorrelation=0.2, n_transitions=2).suggested_transitions == 3
    assert move(0.01, decorrelation=0.2, n_transitions=2, max_transitions=2).suggested_transitions == 2
    assert move(0.01, decorrelation=0.2, n_transitions=1).suggested_transitions == 2


def _two_modes(positions):
    """A density without data: prior ½N(−10, I) + ½N(10, I), modes HMC cannot cross."""
    up = -0.5 * np.sum((positions - 10) ** 2, axis=1)
    down = -0.5 * np.sum((positions + 10) ** 2, axis=1)
    log_prior = np.logaddexp(up, down) - np.log(2)
    share_up = np.exp(up - np.logaddexp(up, down))[:, None]
    grad = share_up * (10 - positions) + (1 - share_up) * (-10 - positions)
    zeros = np.zeros(len(positions))
    return DensityValues(log_prior, zeros, grad, np.zeros_like(positions))


def test_chains_held_in_separate_modes_stop_the_moves_unless_the_rule_is_off():
    rng = np.random.default_rng(2)
    signs = np.where(np.arange(400) % 2 == 0, 1.0, -1.0)[:, None]
    start = kernels.init(_two_modes, 10 * signs + rng.standard_normal((400, 3)))
    metric = Metric(np.ones(3))

    def move(**options):
        return kernels.mutate(rng, start, _two_modes, 1.0, metric, 0.5, **options)[1]

    # The correlation with the start stays near 1 (each chain keeps its mode): the rule counts
    # the population as done once that stops falling, long before max_transitions.
    held = move(decorrelation=0.2, n_transitions=15)
    assert held.correlation > 0.9 and held.suggested_transitions < 15
    # decorrelation=0 switches the whole rule off: no stop, and the next stage gets the most.
    assert move(decorrelation=0.0, n_transitions=15).suggested_transitions == 20
    assert move(decorrelation=0.0).n_transitions == 20
    # stall_rule=False drops only the stall test: held chains move to max_transitions, and
    # the next stage gets 50 % more than this one made.
    assert move(decorrelation=0.2, stall_rule=False).n_transitions == 20
    assert move(decorrelation=0.2, stall_rule=False, n_transitions=4).suggested_transitions == 6


def _dense_metric(cov):
    """A dense metric with Σ = ``cov``: its diagonal, Σ itself and L⁻¹ for Σ = LLᵀ."""
    return Metric(np.diag(cov).copy(), cov, np.linalg.inv(np.linalg.cholesky(cov)))


@pytest.mark.parametrize(
    "metric",
    [
        Metric(np.ones(3)),
        Metric(np.array([0.25, 1.0, 2.5])),
        _dense_metric(np.array([[2.0, 0.9, 0.3], [0.9, 1.0, -0.2], [0.3, -0.2, 0.5]])),
    ],
    ids=["identity", "diagonal", "dense"],
)
def test_hmc_step_leaves_the_target_invariant(metric):
    """Chains started from exact N(0, I) draws are still N(0, I) after 200 transitions.

    The metric need not match the target: it enters the momenta and the kinetic energy, and
    only a consistent pair keeps the target invariant.
    """
    rng = np.random.default_rng(21)
    K, d = 2000, 3
    start = rng.standard_normal((K, d))
    state = kernels.init(_standard_normal, start)
    acceptance = []
    for _ in range(200):
        # ε = 0.9 with 3 leapfrog steps: large enough that an unadjusted (always accepted) or
        # wrongly adjusted move drifts visibly from N(0, I), stable for every metric here.
        state, info = kernels.hmc_step(rng, state, _standard_normal, 1.0, 0.9, metric, 3)
        acceptance.append(np.mean(info.acceptance_rate))
    x = state.position
    # The chains are independent and each is exactly N(0, I) if the kernel is invariant, so the
    # K final positions are K independent draws: a coordinate's mean has standard error
    # 1/√K = 0.022, a second moment E[x_i x_j] (the mean is known, 0) has variance 2 on the
    # diagonal and 1 off it, so standard error √(2/K) = 0.032 or √(1/K) = 0.022. Five standard
    # errors keep the chance of a false alarm among these 9 statistics under 1e-5.
    np.testing.assert_array_less(np.abs(x.mean(axis=0)), 5 / np.sqrt(K))
    second_moments = x.T @ x / K
    standard_errors = np.sqrt((1 + np.eye(d)) / K)
    np.testing.assert_array_less(np.abs(second_moments - np.eye(d)), 5 * standard_errors)
    # A kernel that never moves is invariant too: the chains must have moved and, after 200
    # transitions, forgotten their start. The correlation of independent draws has standard
    # error 1/√K = 0.022.
    assert np.mean(acceptance) > 0.6
    norms = np.sqrt(np.sum(start**2, axis=0) * np.sum(x**2, axis=0))
    correlation = np.sum(start * x, axis=0) / norms
    np.testing.assert_array_less(np.abs(correlation), 5 / np.sqrt(K))


def test_hmc_step_with_a_support_targets_the_restricted_density():
    """N(0, I) restricted to the half-space x₀ > x₁ (a permutation symmetry's domain), with a
    dense metric that does not commute with the swap: chains started from exact draws of the
    restricted density never leave it and are still distributed as it after 200 transitions."""
    rng = np.random.default_rng(23)
    K, d = 2000, 3
    start = rng.standard_normal((K, d))
    start[:, :2] = np.where((start[:, 0] > start[:, 1])[:, None], start[:, :2],
                            start[:, 1::-1])
    metric = _dense_metric(np.array([[2.0, 0.9, 0.3], [0.9, 1.0, -0.2], [0.3, -0.2, 0.5]]))
    state = kernels.init(_standard_normal, start)
    rejected = 0
    for _ in range(200):
        state, info = kernels.hmc_step(rng, state, _standard_normal, 1.0, 0.9, metric, 3,
                                       support=lambda x: x[:, 0] > x[:, 1])
        rejected += np.sum(~info.accepted & (info.acceptance_rate > 0.999))
        assert np.all(state.position[:, 0] > state.position[:, 1])
    assert rejected > 0  # proposals across the border were made, and refused
    # Under the restriction u = (x₀ − x₁)/√2 is half-normal (mean √(2/π), variance 1 − 2/π)
    # and independent of v = (x₀ + x₁)/√2 and x₂, both N(0, 1); standard errors ≤ 1/√K.
    x = state.position
    u, v = (x[:, 0] - x[:, 1]) / np.sqrt(2), (x[:, 0] + x[:, 1]) / np.sqrt(2)
    assert abs(u.mean() - np.sqrt(2 / np.pi)) < 5 * np.sqrt((1 - 2 / np.pi) / K)
    assert abs(np.mean(u**2) - 1.0) < 5 * np.sqrt(2 / K)
    for w in (v, x[:, 2]):
        assert abs(w.mean()) < 5 / np.sqrt(K) and abs(np.mean(w**2) - 1.0) < 5 * np.sqrt(2 / K)
    assert abs(np.mean((u - u.mean()) * v)) < 5 / np.sqrt(K)


def _narrow_normal(positions):
    """Prior N(0, I) and a likelihood of precision 10⁴: a posterior of width 0.01, far narrower
    than a unit metric."""
    return DensityValues(
        -0.5 * np.sum(positions**2, axis=1),
        -0.5e4 * np.sum(positions**2, axis=1),
        -positions,
        -1e4 * positions,
    )


def test_hmc_step_flags_and_rejects_divergent_trajectories():
    """Per-chain step sizes 0.001, 1 and 10⁶ on a target of width 0.01 (unit metric): the first
    integrates accurately, the second blows up to a huge finite ΔH, the third overflows."""
    rng = np.random.default_rng(22)
    start = kernels.init(_narrow_normal, 0.01 * rng.standard_normal((30, 3)))
    step_size, metric = np.repeat([1e-3, 1.0, 1e6], 10), Metric(np.ones(3))
    state, info = kernels.hmc_step(rng, start, _narrow_normal, 1.0, step_size, metric, 10)
    blown_up = step_size > 1e-3
    np.testing.assert_array_equal(info.divergent, blown_up)
    # Leapfrog at εω = 0.1 conserves H to about (εω)²/4 = 0.25 % of its few nats.
    assert np.all(np.abs(info.energy_change[:10]) < 0.1)
    assert np.all(info.energy_change[10:20] > kernels.DIVERGENCE_THRESHOLD)
    assert not np.any(np.isfinite(info.energy_change[20:]))
    # Divergent proposals are rejected, and the state is the old one, down to the gradients.
    assert not np.any(info.accepted[blown_up]) and np.all(info.acceptance_rate[blown_up] == 0)
    for new, old in zip(state, start):
        np.testing.assert_array_equal(new[blown_up], old[blown_up])

    state, info = kernels.hmc_step(rng, start, _narrow_normal, 1.0, 1e-3, metric, 10)
    assert not np.any(info.divergent)
    assert np.all(np.abs(info.energy_change) < 0.1)


def _flat_with_a_pit(positions):
    """Flat (zero gradients) except log L = −5000 at the origin: every move out of the origin
    gains 5000 nats of density, an energy drop ΔH = −5000 minus the kinetic change."""
    zeros = np.zeros(len(positions))
    log_likelihood = np.where(np.all(positions == 0, axis=1), -5000.0, 0.0)
    return DensityValues(zeros, log_likelihood, np.zeros_like(positions),
                         np.zeros_like(positions))


def test_a_large_energy_drop_is_accepted_not_divergent():
    """ΔH of thousands of nats *below* zero: such moves are accepted, and only an energy gain
    counts as divergent (Stan's rule), so the divergence count stays a count of rejections.
    n_leapfrog must be at least 1."""
    rng = np.random.default_rng(5)
    start = kernels.init(_flat_with_a_pit, np.zeros((4, 3)))
    state, info = kernels.hmc_step(rng, start, _flat_with_a_pit, 1.0, 0.1, Metric(np.ones(3)), 5)
    assert np.all(info.energy_change < -kernels.DIVERGENCE_THRESHOLD)
    assert np.all(info.accepted) and not np.any(info.divergent)
    assert np.all(state.log_likelihood == 0)
    with pytest.raises(ValueError, match="n_leapfrog must be at least 1"):
        kernels.hmc_step(rng, start, _flat_with_a_pit, 1.0, 0.1, Metric(np.ones(3)), 0)


def _standard_normal_with_hole(positions):
    """N(0, I) with log likelihood −∞ (gradient NaN) where x₀ < −2.75: outside a support."""
    values = _standard_normal(positions)
    hole = ~(positions[:, 0] >= -2.75)  # and at NaN positions, where a trajectory goes on from it
    values.log_likelihood[hole] = -np.inf
    values.grad_log_likelihood[hole] = np.nan
    return values


def test_a_non_finite_proposal_leaves_the_other_chains_alone():
    """Chain 0 starts at x₀ = 3 and takes 16 steps of π/16: half a period of the harmonic
    oscillator that N(0, I) makes, which carries it to x₀ ≈ −3, inside the hole, whatever its
    momentum. The other chains take steps of 1.3, so that their acceptance probabilities spread
    and some are rejected. With the same seed the momenta and uniforms are the same as without
    the hole, so every other chain must come out bit for bit as it would without it."""
    positions = np.random.default_rng(24).standard_normal((16, 3))
    positions[0] = [3.0, 0.0, 0.0]
    step_size = np.full(16, 1.3)
    step_size[0] = np.pi / 16
    visited = []

    def recorded(x):
        visited.append(x[:, 0].copy())
        return _standard_normal(x)

    def step(density):
        start = kernels.init(density, positions)
        rng = np.random.default_rng(124)
        return start, *kernels.hmc_step(rng, start, density, 1.0, step_size, Metric(np.ones(3)), 16)

    _, reference, reference_info = step(recorded)
    # The arrangement holds: only chain 0's trajectory enters the hole; without the hole its
    # proposal is accepted (so a rejection below is the hole's doing), and among the others
    # some are accepted and some rejected (so both outcomes are compared).
    visited = np.array(visited)
    assert visited[-1, 0] < -2.75 and np.all(visited[:, 1:] > -2.75)
    assert reference_info.accepted[0]
    assert 0 < np.sum(reference_info.accepted[1:]) < 15

    start, state, info = step(_standard_normal_with_hole)
    assert not info.accepted[0] and info.divergent[0] and info.acceptance_rate[0] == 0
    for new, old, ref in zip(state, start, reference):
        np.testing.assert_array_equal(new[0], old[0])
        np.testing.assert_array_equal(new[1:], ref[1:])
    for field, ref in zip(info, reference_info):
        np.testing.assert_array_equal(field[1:], ref[1:])
