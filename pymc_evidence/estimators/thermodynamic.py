"""Thermodynamic chaining: stepping-stone and thermodynamic integration over tempered posteriors.

Barber & Bishop (1997) chain the prior (λ = 0, evidence 1) to the posterior (λ = 1) through
tempered distributions π_λ ∝ p(θ) L(θ)^λ (their eq. 9) and multiply the evidence ratios of
neighbouring rungs (eq. 5), each estimated by importance sampling (eq. 4). Here the draws at each
rung come from a population of particles moved by HMC (:mod:`pymc_evidence.kernels`), the ladder
is chosen adaptively, and the population is split into independent groups whose spread gives an
honest standard error.

This module is the estimator a user calls: validation, the first round, the extra groups that
``target_se`` asks for (on the CPUs), warnings and the result. The tempering itself is in
:mod:`._tempering`, the evidence and its SE in :mod:`._stepping_stone`, the search for modes
the particles never reached in :mod:`._mode_search` and the tempering from one in
:mod:`._reference`.
"""

from __future__ import annotations

import copy
import dataclasses
import time
from typing import NamedTuple

import numpy as np
import pandas as pd
from scipy.special import logsumexp
from scipy.stats import chi2

from pymc_evidence._checkpoint import StateFile, run_key
from pymc_evidence._constants import DENSE_METRIC_MAX_DIM
from pymc_evidence._parallel import fork_is_safe, one_blas_thread, run_tasks, shut_down_after
from pymc_evidence._progress import TemperingBar
from pymc_evidence._random import as_generator
from pymc_evidence._validation import (checkpoint_file, choice, integer, number,
                                        resolve_model)
from pymc_evidence.density import get_density
from pymc_evidence.estimators._mode_search import ModeSearch, search_modes
from pymc_evidence.estimators._reference import temper_from_mode
from pymc_evidence.estimators._stepping_stone import (
    Estimate, pooled_levels_bias, reported_se, round_increments, round_integration,
    set_aside_level_bias, share_of, stepping_stone,
)
from pymc_evidence.estimators._tempering import Round, final_draws, power_ladder, run_round
from pymc_evidence.estimators._workers import density_pool, n_workers, worker_density
from pymc_evidence.results import ThermodynamicResult, warn
from pymc_evidence.scale_moves import describe, find_scale_pairs
from pymc_evidence.symmetry import resolve_layers, sampling_layers

__all__ = ["thermodynamic", "power_ladder"]


#: The adaptive ladder's conditional ESS per rung, in general and on MLPs (``target_cess="auto"``).
DEFAULT_TARGET_CESS, MLP_TARGET_CESS = 0.8, 0.95


def _validate_arguments(n_particles, n_groups, target_se, max_groups, ladder, target_cess,
                        resample_threshold, max_transitions, decorrelation, mass_matrix, cores):
    """Raise on a bad argument before any work; returns the ladder as an array (or None)."""
    integer("n_particles", n_particles, 8)
    integer("n_groups", n_groups, 2, why=" (the spread between independent groups is part of "
            "the standard error)")
    number("target_se", target_se, low=0, low_open=True, optional=True)
    integer("max_groups", max_groups, n_groups, why=" (n_groups)")
    if isinstance(target_cess, str) and target_cess != "auto":
        raise TypeError(f"target_cess must be a number in (0, 1) or 'auto', got {target_cess!r}")
    if target_cess != "auto":
        number("target_cess", target_cess, low=0, high=1, low_open=True, high_open=True)
    number("resample_threshold", resample_threshold, low=0, high=1)
    integer("max_transitions", max_transitions, 1)
    number("decorrelation", decorrelation, low=0, high=1, high_open=True)
    choice("mass_matrix", mass_matrix, ("auto", "dense", "diag"))
    integer("cores", cores, 1, optional=True)
    if ladder is None:
        return None
    ladder = np.asarray(ladder, dtype=float)
    if (
        ladder.ndim != 1
        or ladder.size < 2
        or ladder[0] != 0.0
        or ladder[-1] != 1.0
        or np.any(np.diff(ladder) <= 0)
    ):
        raise ValueError(
            "ladder must be a strictly increasing sequence of temperatures from 0 to 1 "
            f"inclusive, e.g. power_ladder(20); got {ladder!r}"
        )
    return ladder


def thermodynamic(
    model=None,
    *,
    target_se: float | None = 0.1,
    n_particles: int = 256,
    n_groups: int = 4,
    max_groups: int = 32,
    ladder=None,
    target_cess: float | str = "auto",
    resample_threshold: float = 0.5,
    target_accept: float = 0.8,
    trajectory_length: float = 1.0,
    max_leapfrog: int = 64,
    decorrelation: float = 0.05,
    max_transitions: int = 20,
    mass_matrix: str = "auto",
    mlp_layers="auto",
    effort_check="auto",
    mode_search="auto",
    checkpoint=None,
    backend: str = "c",
    cores: int | None = None,
    random_seed=None,
    progressbar: bool = True,
) -> ThermodynamicResult:
    r"""Log evidence by thermodynamic chaining (stepping-stone) and thermodynamic integration.

    .. math::

        \log p(D \mid M) = \sum_{k=1}^{S} \log
            \mathbb{E}_{\pi_{\lambda_{k-1}}}\!\left[L(\theta)^{\lambda_k - \lambda_{k-1}}\right],
        \qquad \pi_\lambda(\theta) \propto p(\theta)\, L(\theta)^{\lambda}

    (Barber & Bishop 1997, eq. 4, 5 and 9), and the thermodynamic-integration identity
    :math:`\log p(D \mid M) = \int_0^1 \mathbb{E}_{\pi_\lambda}[\log L(\theta)]\, d\lambda`.

    Parameters
    ----------
    model : pymc.Model, optional
        Taken from the ``with`` context when omitted. Log likelihood = observed variables plus
        ``pm.Potential`` terms; prior = free variables (exactly sampleable, proper).
    target_se : float or None, default 0.1
        Standard error to reach (nats): the one knob trading time for accuracy. After the first
        round, more independent groups are run on the same ladder until the reported SE (with
        its Student widening, step 5 below) reaches it (at most ``max_groups``). ``None`` runs
        one round only.
    n_particles : int, default 256
        Particles per group. When the groups' log evidences vary by more than a nat²
        (judged on the first round, and again after the extra groups), groups with enough
        more particles to bring the variance to a half, which falls as 1 / particles, replace
        them (a power-of-two multiple, within half of ``max_groups × n_particles`` particles,
        which leaves the effort check one doubling, or all of it with ``effort_check=False``),
        with a warning: groups that spread wider give an average that rests on the few
        highest, and that average and its SE come out low together (on the robot-arm MLP
        with four hidden units, one fit of five 3.1 SE low with groups of 256).
    n_groups : int, default 4
        Independent groups in the first round (each is its own SMC population).
    max_groups : int, default 32
        Upper bound on groups of ``n_particles`` over all rounds: the budget is
        ``max_groups × n_particles`` particles, shared by fewer groups when they are larger.
    ladder : array_like, optional
        Temperatures 0 = λ₀ < … < λ_S = 1 (e.g. :func:`power_ladder`). Default: adaptive.
    target_cess : float or "auto", default "auto"
        For the adaptive ladder: the next λ keeps the conditional ESS of the incremental weights
        at this fraction, which puts rungs densely near λ = 0 without hand-tuning. ``"auto"``:
        0.8, or 0.95 (about twice the rungs) when MLP layers are aligned (``mlp_layers`` given
        or recognised): on an MLP a faster ladder can leave particles in worse modes and the
        estimate low (by 5 nats on the robot-arm MLP with four hidden units).
    resample_threshold : float, default 0.5
        A group is resampled (systematic) when its ESS falls below this fraction.
    target_accept, trajectory_length, max_leapfrog, decorrelation, max_transitions
        HMC moves at each rung (see :func:`pymc_evidence.kernels.mutate`). When MLP layers
        are aligned (``mlp_layers``), a rung's moves stop only once the population has
        decorrelated or after ``max_transitions``, without the stall test
        (``settings["stall_rule"]``): aligned MLP particles decorrelate slowly, and the stall
        test cut their moves short (on the robot-arm MLP with four hidden units, 3–5
        transitions per rung past the phase transition instead of 20, and estimates 4.5 nats
        lower, in 0.4 of the time). When the rungs at λ > 0.5 all ran ``max_transitions`` and
        left the population correlated with its start (median above 0.75), a warning says
        that the moves may be too short for the estimate to be trusted (judged on the last
        level of the effort check, below, when it doubled the moves: on the robot-arm MLP
        with four hidden units HMC alone left a median of 0.89 after 40 transitions per stage,
        and its estimate still rose by 1.1 nats from 40 to 80; the scale moves, which
        decorrelate its precisions, brought the correlation after 20 transitions at λ = 1
        to 0.69).
    mass_matrix : {"auto", "dense", "diag"}, default "auto"
        Inverse mass matrix estimated from the weighted population at each rung: the dense
        covariance (handles correlated posteriors) or its diagonal. "auto" is dense up to
        ``DENSE_METRIC_MAX_DIM`` (400) parameters.
    mlp_layers : "auto", MLPLayer, list of MLPLayer or None, default "auto"
        The model's MLP hidden layers (see :class:`~pymc_evidence.MLPLayer`). Before each rung's
        moves every particle is mapped to its copy, under the layers' sign-flip and permutation
        symmetries, nearest the heaviest particle (with several layers, the one with the
        most copies is aligned), and the mass matrix estimated from the aligned particles is
        averaged over the symmetries, so that the moves commute with them: the density is
        unchanged, but the mass matrix then fits one copy of the modes rather than all of
        them (on the robot-arm MLP with h = 4 the step size doubles and the groups'
        estimates, 90 nats apart without it, come within 11 nats; with h = 1 and no other
        setting changed, −540.5 ± 4030 without it where −514.5 is right). ``"auto"``: the
        layers recognised in the model's graph (an activation of ``x @ W + b`` whose outputs
        go on through ``@ V``, or whose output weights the model integrates out) whose units
        permuting and sign-flipping leaves the model's density unchanged at prior draws; the
        ones used are in ``settings["mlp_layers"]``. Pass them explicitly for a layer the
        graph does not show, None for no alignment.
    effort_check : {"auto", True, False}, default "auto"
        After the groups above, run ``n_groups`` groups with twice the effort on the same
        ladder and compare: on an aligned MLP (``mlp_layers``) twice the HMC transitions at
        every stage, elsewhere twice the particles. Moves too short to carry a group's
        particles between the modes of an MLP's posterior, or too few particles to hold a
        multimodal posterior's modes, bias the estimate low by more than its SE says, and
        doubling them moves it up (on the robot-arm MLP with four hidden units, twice the
        transitions raised the groups' median by 1.3 nats where twice the particles did not
        raise it).
        While the estimate moves (up by more than 2, or down by more than 3, combined SE), or
        the lower level's SE is more than twice what doubling explains (as much for twice the
        moves, √2 times for twice the particles: its groups did not mix, and a move measured
        against their noise cannot show that the estimate settled), the effort is doubled
        again, k times while ``n_groups × particles × 2^k ≤ max_groups × n_particles`` (8
        times the first round's effort at the defaults). On the robot-arm MLP with four
        hidden units the levels went 157.31 ± 0.70, 158.01 ± 0.14 and 159.48 ± 0.12 with 20,
        40 and 80 transitions per stage: the first move is within the band, but not the
        noise. Once two levels agree their groups are pooled, the SE including the part of the
        last move δ that the levels' noise c does not explain,
        :math:`\sqrt{\mathrm{SE}^2 + (1 + w)^2 \max(0, \delta^2 - c^2)}` (w: the lower level's
        share of the pooled Z; if doubling the effort at least halves a bias, this bounds the
        bias left, so the SE can exceed ``target_se``); if the budget ends first, the last level
        is reported with a warning, its SE at least the last move (plus its noise, when the
        move was within the band and the lower level's noise alone kept the check going), or,
        when the last rise was more than half the one before (so that no halving bounds the
        rise to come), at least the whole rise over the levels. ``"auto"`` checks when the
        posterior shows signs of separated modes: an MLP (``mlp_layers`` given or recognised
        in the model's graph) or groups that disagree beyond their within-group errors. When
        ``max_groups`` leaves no room for a doubling, a warning says that the check did not
        run. The levels are in ``effort_particles``, ``effort_transitions``,
        ``effort_log_evidence`` and ``effort_se``.
    mode_search : {"auto", True, False} or int, default "auto"
        After the first round, maximise log p(θ, D) from prior draws (an integer: how many;
        True: 32) and from the 8 particles of highest log p(θ, D), then temper again from a
        reference built at the best mode found (generalised stepping stone, Fan et al. 2011):
        half the prior, half a Gaussian fitted to a population relaxed by HMC at the mode, for
        ``25`` sweeps, then twice as many until two doublings in a row give estimates that
        agree (up to 400 sweeps; if they never do, the SE is at least the last move; if they
        agree but still rose, at least that rise), or, when the particles reached the mode,
        until the first level agrees with the first round's estimate (the same rule: two
        paths that fail differently agree). At the mode, HMC trajectories are at least
        4 long (``trajectory_length``), so that the points travel along the mode's extent.
        That tempering runs on an MLP (``mlp_layers`` given or recognised) always, and
        elsewhere when a mode from the prior draws lies more than a nat above every mode the
        particles lead to (one the tempering never reached) and could move the estimate by
        more than its SE (given the particles' Occam factor, by log(1 + exp(gap))). Its
        estimate replaces the tempering from the prior's when the particles never reached the
        mode (unless it is lower by more than 3 combined SE: then the SE is widened to the
        gap rule's move instead), and when it lies more than 2 combined SE above the first
        round's estimate although they did: on the robot-arm MLP with three hidden units the
        particles reached the best mode, yet their first round gave −59.29 ± 0.15 against an
        evidence of −52.62 ± 0.10, and the tempering from the mode −52.37 ± 0.29. The
        tempering from the prior then stops after its first round; otherwise it goes on
        (``target_se``, ``effort_check``) as without the search, from the same random stream,
        to the same estimate. Replaced, the estimate, draws and stages are the tempering from
        the mode's (more groups from its last reference until ``target_se``), the first
        round's estimate is in ``log_evidence_from_prior``, and a warning says what happened.
        Either way the levels are in ``reference_sweeps``, ``reference_log_evidence`` and
        ``reference_se``, their seconds in ``timing["reference"]``. It can cost more than the
        tempering from the prior: 0.9, 0.5 and 6 times a whole default fit on Liang's MLPs
        with one to three hidden units (one level each, its long trajectories the cost), 0.3
        times on the robot arm with two, about 2 hours beside the first round's hour on the
        robot arm with three; ``mode_search=False`` skips it.
        ``"auto"`` searches on MLPs, whose posteriors have many modes; elsewhere a
        funnel-shaped posterior may have no mode to find. Models with circular variables
        (``pm.VonMises``) have no search: their density repeats every period, the reference's
        Gaussian does not. The outcome is in
        ``best_log_joint_from_prior`` and ``best_log_joint_from_particles``, its time in
        ``timing["mode_search"]``.
    checkpoint : str or path, optional
        File where every finished stage is saved (its directory is made if missing;
        atomically, with the random generator's state; extra groups run in worker processes,
        see ``cores``, are saved as each chunk of them finishes), and every sweep and stage
        of the tempering from a mode the search found. If it exists, the run resumes after
        its last saved stage and returns exactly what an uninterrupted run would (the search
        itself runs again, in seconds to a few minutes); a finished run is returned without
        sampling. A checkpoint written with other settings (defaults included) or another
        model raises an error that names what differs. The result's ``timing["sampling"]``
        counts the sampling of every session that worked on the run
        (``timing["earlier_sessions"]``: the part before this call, with the tempering from
        a mode that the checkpoint holds; a finished checkpoint records what its run
        reported).
    backend : {"c", "numba"}, default "c"
        PyTensor backend for the compiled density.
    cores : int, optional
        Processes for the extra groups that ``target_se`` asks for. They run in chunks of
        ``n_groups`` groups, each chunk with its own random stream, so the result is the same
        for every value of ``cores``. Default: every usable CPU when the extra groups are
        expected to take more than 20 s (judged from the first round) and
        workers can be forked (Linux, no other Python thread running: no
        ``if __name__ == "__main__"`` guard needed) and this is not itself a worker process
        (e.g. of ``compare(executor=...)``), else one. An explicit ``cores > 1`` where forking is
        not safe starts workers from a fork server, which re-imports the main script: guard it.
    random_seed : int, sequence, numpy.random.Generator or None
        Same seed, same result.
    progressbar : bool, default True

    Returns
    -------
    ThermodynamicResult
        ``log_evidence`` and ``se`` from stepping-stone; ``ti_log_evidence`` and ``ti_se`` the
        thermodynamic-integration estimate; ``diagnostics`` one row per
        stage (λ, log ratio, its SE, ESS, R-hat across groups, acceptance, step size, mean and
        variance of log L, ...); ``posterior`` the particles at λ = 1 with groups as chains.

    Warns
    -----
    EvidenceWarning
        When independent groups disagree beyond their within-group errors (a sign of modes the
        populations do not cross between), when stepping-stone and thermodynamic integration
        disagree beyond their errors, on divergent trajectories, when ``target_se`` was not
        reached, when the moves left the population correlated with its start, when the
        effort check saw the estimate move as the particles doubled, when the mode search
        found a mode the particles never reached (and the estimate was taken from tempering
        that starts there, or its SE widened), or when the tempering from the best mode lay
        above the tempering from the prior and replaced it.

    Notes
    -----
    1. Draw ``n_groups × n_particles`` particles from the prior (λ = 0).
    2. Choose the next λ (adaptive: bisection on the conditional ESS of exp(Δλ · log L)).
    3. Each group's stepping-stone increment is log Σ_i W_i exp(Δλ log L_i) (eq. 4), with W its
       normalised weights; reweight; resample groups whose ESS fell below the threshold.
    4. Move all particles by HMC at the new λ, with the mass matrix estimated from the weighted
       population (dense or diagonal, see ``mass_matrix``), until they have decorrelated.
       Where the model scales a block of standardised values by a hyperparameter (non-centred,
       w = z · exp(−c·u)), each HMC transition is followed by a Metropolis move of u and z
       together that keeps w (:mod:`pymc_evidence.scale_moves`); ``settings["scale_moves"]``
       lists the pairs found.
    5. Repeat from 2 until λ = 1. Each group gives an unbiased evidence estimate; they are averaged
       on the evidence scale, and the SE is the larger of the between-group spread and the
       within-group error propagated from the stages (posteriors with separated modes make the
       first much larger than the second, and that is reported). The spread, estimated from
       G − 1 degrees of freedom, is widened by t_{G−1}(0.975) / 1.96 (1.62 at four groups), so
       that ±1.96 SE is a 95 % interval however few groups there are. Groups whose log estimates
       spread by σ nats imply an SE of about log(1 + √(expm1(σ²)/G)) (the lognormal law of
       SMC estimates), which the SE never undercuts: an average that one group dominates is not
       reported as precise. That law is a limit that holds while σ² is of order one, so
       groups that spread wider are replaced by larger ones first (see ``n_particles``).
    6. On an MLP, after the first round, search for modes and temper from a reference at the
       best one (``mode_search``); unless that replaces the estimate, add groups until
       ``target_se`` and run the effort check.

    References
    ----------
    Barber, D. and Bishop, C. M. (1997). Bayesian model comparison by Monte Carlo chaining.
    NIPS 9.
    Bérard, J., Del Moral, P. and Doucet, A. (2014). A lognormal central limit theorem for
    particle approximations of normalizing constants. Electronic Journal of Probability 19.
    Fan, Y., Wu, R., Chen, M.-H., Kuo, L. and Lewis, P. O. (2011). Choosing among partition
    models in Bayesian phylogenetics. Molecular Biology and Evolution 28, 523–532.
    Friel, N., Hurn, M. and Wyse, J. (2014). Improving power posterior estimation of statistical
    evidence. Statistics and Computing 24, 709–723.
    Zhou, Y., Johansen, A. M. and Aston, J. A. D. (2016). Toward automatic model comparison: an
    adaptive sequential Monte Carlo approach. JCGS 25, 701–726.

    Examples
    --------
    >>> import numpy as np, pymc as pm, pymc_evidence as pm_evidence
    >>> with pm.Model() as model:
    ...     mu = pm.Normal("mu", 0, 1)
    ...     _ = pm.Normal("y", mu, 1, observed=[0.3, -0.1, 0.4])
    ...     result = pm_evidence.thermodynamic(random_seed=1, progressbar=False)
    >>> round(result.log_evidence, 2)  # exact: log N(y | 0, I + 11ᵀ) = -3.535
    -3.52
    """
    ladder = _validate_arguments(
        n_particles, n_groups, target_se, max_groups, ladder, target_cess, resample_threshold,
        max_transitions, decorrelation, mass_matrix, cores,
    )
    choice("effort_check", effort_check, ("auto", True, False))
    _validate_mode_search(mode_search)
    checkpoint = checkpoint_file(checkpoint)
    model = resolve_model(model)
    settings = dict(
        target_se=target_se, n_particles=int(n_particles), n_groups=int(n_groups),
        max_groups=int(max_groups), adaptive_ladder=ladder is None, target_cess=target_cess,
        resample_threshold=resample_threshold, target_accept=target_accept,
        trajectory_length=trajectory_length, max_leapfrog=max_leapfrog, decorrelation=decorrelation,
        max_transitions=max_transitions, mass_matrix=mass_matrix, backend=backend,
        ladder=None if ladder is None else ladder.tolist(),
        mlp_layers=None, effort_check=effort_check, mode_search=mode_search,
    )
    rng = as_generator(random_seed)
    start = time.perf_counter()
    density = get_density(model, backend=backend)
    layers = resolve_layers(mlp_layers, model, density)
    prior_starts = _mode_search_starts(mode_search, layers, density)
    if prior_starts:
        # compiled before sampling, so that a model without one fails before any work
        with np.errstate(all="ignore"):
            density.hessian(np.zeros(density.dim))
    compiled = time.perf_counter()
    if settings["target_cess"] == "auto":
        settings["target_cess"] = MLP_TARGET_CESS if layers else DEFAULT_TARGET_CESS
    settings["stall_rule"] = not layers
    scale_pairs = find_scale_pairs(density)
    settings["scale_moves"] = describe(scale_pairs)
    round_settings = _round_settings(settings, density, layers, scale_pairs)
    settings["mlp_layers"] = [vars(layer) for layer in layers] or None
    messages: list[str] = []

    # The mode search reads only the first round's particles and draws from its own stream,
    # leaving the tempering from the prior as it is without the search: a checkpoint serves
    # every setting of it.
    sampling = {k: v for k, v in settings.items() if k != "mode_search"}
    store = StateFile(checkpoint, run_key(sampling, density, random_seed))
    rounds, checks = _resume(store, rng)
    bar = TemperingBar(progressbar)
    with one_blas_thread():
        _first_round(rng, store, rounds, density, n_groups, n_particles, ladder, round_settings,
                     bar)
    first_seconds = time.perf_counter() - compiled
    ladder = np.array([0.0] + [s.lam for s in rounds[0].stages])
    after_first = copy.deepcopy(rng.bit_generator.state)
    # A resumed run's cost includes the sampling its checkpoint records from earlier sessions.
    timing = {"compile": compiled - start, "sampling": store.earlier + first_seconds,
              "earlier_sessions": store.earlier}
    search, from_mode = ModeSearch(np.nan, np.nan, 0), None
    if prior_starts:
        bar.close()
        search, from_mode = _search_and_temper(
            _search_rng(rng), model, density, rounds[0], layers, settings, round_settings,
            prior_starts, progressbar, store, timing, start, messages)
        if isinstance(from_mode, ThermodynamicResult):
            store.finish(timing["sampling"] + timing["reference"])
            return from_mode
        bar = TemperingBar(progressbar)
    with one_blas_thread():
        level = _sized_groups(
            rng, store, rounds, after_first, model, density, backend, ladder, round_settings,
            settings, cores, first_seconds, bar, messages,
        )
        effort = EffortCheck(level, [], "particles", None)
        if _check_wanted(effort_check, layers, level):
            effort = _effort_check(rng, store, rounds, checks, after_first, level, density,
                                   ladder, round_settings, settings, bar)
            if not effort.levels:
                _warn_on_unchecked(messages, level, settings)
    bar.close()
    sampled = time.perf_counter()

    searching = timing.get("mode_search", 0.0) + timing.get("reference", 0.0)
    timing["sampling"] = store.earlier + sampled - compiled - searching
    # The mode search runs again on a resume; the tempering from its mode does not.
    store.finish(timing["sampling"] + timing.get("reference", 0.0))
    result = _result(rng, model, density, rounds, effort, ladder, settings, timing, start,
                     store.earlier, messages, search, prior_starts)
    if from_mode is None:
        return result
    return dataclasses.replace(result, **_levels_fields(from_mode))


#: The mode search's starts when asked for with True or "auto": prior draws (on the robot-arm
#: MLP with three hidden units, 7 of 32 reached the mode the particles missed) and the
#: particles of highest log p(θ, D).
MODE_SEARCH_PRIOR_STARTS, MODE_SEARCH_PARTICLE_STARTS = 32, 8


def _validate_mode_search(mode_search) -> None:
    if isinstance(mode_search, bool) or (isinstance(mode_search, str) and mode_search == "auto"):
        return
    if isinstance(mode_search, str):
        raise ValueError(f"mode_search must be 'auto', True, False or a number of prior draws to "
                         f"start from, got {mode_search!r}")
    integer("mode_search", mode_search, 1, why=" (prior draws to start optimisations from)")


def _mode_search_starts(mode_search, layers, density) -> int:
    """Prior draws the mode search starts from (0: no search)."""
    if isinstance(mode_search, str):
        return MODE_SEARCH_PRIOR_STARTS if layers and not density.periodic.size else 0
    if isinstance(mode_search, bool):
        starts = MODE_SEARCH_PRIOR_STARTS if mode_search else 0
    else:
        starts = int(mode_search)
    if starts and density.periodic.size:
        # Its reference is a Gaussian over the unconstrained space, where a circular
        # variable's density repeats without end.
        raise ValueError(
            "mode_search is not available for models with circular variables (e.g. "
            "pm.VonMises): tempering from a Gaussian at the mode would integrate over every "
            "period. Pass mode_search=False."
        )
    return starts


def _round_settings(settings, density, layers, scale_pairs=()) -> dict:
    """What every round needs beyond the ladder: the adaptive-ladder and resampling targets,
    the HMC kernel's settings (with the scale pairs its scale moves follow), the MLP layers to
    align, the metric's kind, and whether aligned moves use the mass matrix averaged over the
    symmetries (else they stay in one copy's domain: see ``run_round``), and the point whose
    domain that is (None: the heaviest particle's at each stage)."""
    mass_matrix = settings["mass_matrix"]
    return dict(
        target_cess=settings["target_cess"],
        resample_threshold=settings["resample_threshold"],
        kernel={**{name: settings[name] for name in (
            "target_accept", "trajectory_length", "max_leapfrog", "decorrelation",
            "stall_rule", "max_transitions")}, "scale_pairs": scale_pairs},
        layers=sampling_layers(density, layers),
        dense_mass=mass_matrix == "dense" or (
            mass_matrix == "auto" and density.dim <= DENSE_METRIC_MAX_DIM),
        symmetric_moves=True,
        anchor=None,
    )


def _resume(store: StateFile, rng) -> tuple[list, list]:
    """The rounds and effort-check levels a checkpoint holds (the random generator set to
    where they left it), or two empty lists."""
    saved = store.load()
    if saved is None:
        return [], []
    rng.bit_generator.state = saved["rng"]
    return saved["rounds"], saved.get("checks", [])


def _save(store: StateFile, rng, rounds, checks=(), rng_state=None, unfinished=None) -> None:
    """``unfinished``: the slot of a round saved part-way (in ``rounds``, or ("check", k) in
    ``checks``) and its own generator's state, from which a resumed run goes on."""
    state = rng.bit_generator.state if rng_state is None else rng_state
    # The tempering from a found mode, saved beside this, is kept.
    from_mode = {key: value for key, value in (store.state or {}).items() if key == "from_mode"}
    store.save({"rng": state, "rounds": rounds, "checks": list(checks),
                "unfinished": unfinished, **from_mode})


def _go_on(store: StateFile, slot, saved, seed, shape, transitions):
    """The generator and the round so far to go on from: the checkpoint's round in ``slot``,
    saved part-way, when it ran groups of this ``shape`` (groups, particles) and began with
    these ``transitions`` at its stages, with its generator as it was saved; else a new
    generator from ``seed`` and None."""
    unfinished = (store.state or {}).get("unfinished")
    if (saved is None or unfinished is None or unfinished["slot"] != slot
            or not _part_of(saved, shape, transitions)):
        return np.random.default_rng(seed), None
    rng = np.random.default_rng(seed)
    rng.bit_generator.state = unfinished["rng"]
    return rng, saved


def _part_of(saved: Round, shape: tuple, transitions: list) -> bool:
    done = [stage.move.n_transitions for stage in saved.stages]
    return (saved.final_log_weights.shape == shape and len(done) < len(transitions)
            and done == transitions[:len(done)])


def _first_round(rng, store, rounds, density, n_groups, n_particles, ladder, round_settings,
                 bar):
    """Run (or finish, from a checkpoint) the first round, which fixes the ladder and the
    per-stage tuning every later group reuses; ``rounds[0]`` holds it afterwards."""
    if rounds and rounds[0].stages and rounds[0].stages[-1].lam == 1.0:
        return
    bar.new_round(1)

    def save(current):
        rounds[:] = [current]
        _save(store, rng, rounds)

    first = rounds[0] if rounds else None
    rounds[:] = [run_round(rng, density, n_groups, n_particles, ladder, None, round_settings,
                           bar.update, partial=first, on_stage=save)]


#: The largest variance of a group's log evidence the estimate pools (σ² in nats²). Log
#: estimates are about normal with a variance ∝ 1 / particles (Bérard et al. 2014): above
#: one, the mean of the groups' evidences rests on the few highest (Kish's effective number
#: of groups is about G·exp(−σ²)), and it and its SE come out low together.
_MAX_GROUP_LOG_VAR = 1.0
#: The variance that replacing groups aims at: half the largest, so that the larger groups,
#: whose spread is again estimated from a few of them, are seldom replaced in turn.
_AIMED_GROUP_LOG_VAR = 0.5


def _sized_groups(rng, store, rounds, after_first, model, density, backend, ladder,
                  round_settings, settings, cores, first_seconds, bar, messages) -> list:
    """Groups on the first round's ladder and tuning, large enough that their log evidences
    vary by at most ``_MAX_GROUP_LOG_VAR`` and as many as ``target_se`` asks for, within
    ``max_groups × n_particles`` particles (half of it unless ``effort_check`` is False, so
    that the check can double their effort once); returns the rounds of the last size, which
    the estimate pools.

    The groups' spread is judged on the first round and again after the extra groups: when
    it is too wide, ``n_groups`` groups with enough more particles replace the level (a
    power-of-two multiple, variance ∝ 1 / particles), and they are judged in turn.
    ``rounds`` holds every round afterwards, the first then the extra chunks in the order
    they ran; a checkpoint's chunks are reused in that order.
    """
    saved, rounds[1:] = list(rounds[1:]), []
    n_particles, n_groups = settings["n_particles"], settings["n_groups"]
    budget = settings["max_groups"] * n_particles
    largest = _largest_group(settings)
    level, particles, extended, spreads = rounds[:1], n_particles, False, []
    # The first round is cheap to replace and judged by its spread alone.
    confidence = None
    while True:
        estimate = stepping_stone(*round_increments(level))
        bigger = _group_particles(estimate.per_group, particles, largest, confidence)
        confidence = _REPLACE_CONFIDENCE
        if bigger > particles:
            spreads.append((particles, estimate.per_group))
            particles, extended, sizes = bigger, False, [n_groups]
        elif not extended:
            extended = True
            sizes = _chunk_sizes(_extra_groups_wanted(estimate, budget // particles, settings),
                                 n_groups)
            if not sizes:
                break
        else:
            break
        chunk_args = dict(n_particles=particles, ladder=ladder,
                          tuning=[s.move for s in rounds[0].stages],
                          round_settings=round_settings)
        expected = first_seconds * sum(sizes) * particles / (n_groups * n_particles)
        chunks = _run_chunks(rng, store, rounds, saved[:len(sizes)], after_first, model,
                             density, backend, sizes, chunk_args, cores, expected, bar)
        saved = saved[len(sizes):]
        rounds.extend(chunks)
        level = (level if extended else []) + chunks
    if spreads:
        _warn_on_group_size(messages, spreads, particles)
    return level


def _largest_group(settings) -> int:
    """The most particles a group may be resized to: ``n_groups`` of them fit in the budget,
    twice over unless ``effort_check`` is False. Groups that took the whole budget would
    leave the check no doubling: on the robot-arm MLP with four hidden units they grew to
    2048 particles, and the check, which doubles the moves there, did not run."""
    reserved = 0 if settings["effort_check"] is False else 1
    doublings = int(np.floor(np.log2(settings["max_groups"] / settings["n_groups"])))
    return settings["n_particles"] * 2 ** max(0, doublings - reserved)


def _group_particles(per_group: np.ndarray, particles: int, largest: int,
                     confidence: float | None) -> int:
    """Particles per group for groups like these (of ``particles`` each): unchanged while
    their log evidences vary by at most ``_MAX_GROUP_LOG_VAR``, else ``particles`` doubled as
    often as it takes to bring the variance to ``_AIMED_GROUP_LOG_VAR``, at most ``largest``.
    With a ``confidence``, only when the variance exceeds the largest at this level of
    confidence (chi-square on the groups' sample variance): replacing groups that already
    ran discards them, which only a clear excess should."""
    finite = per_group[np.isfinite(per_group)]
    if finite.size < 2:
        return particles
    variance = float(np.var(finite, ddof=1))
    lower = variance
    if confidence is not None:
        lower = variance * (finite.size - 1) / chi2.ppf(confidence, finite.size - 1)
    if lower <= _MAX_GROUP_LOG_VAR:
        return particles
    doublings = int(np.ceil(np.log2(variance / _AIMED_GROUP_LOG_VAR)))
    return max(particles, min(particles * 2**doublings, largest))


#: The confidence with which groups after the first round must be too wide to be replaced.
_REPLACE_CONFIDENCE = 0.9


def _extra_groups_wanted(estimate: Estimate, most: int, settings) -> int:
    """Groups to add to the estimate's for its reported SE to reach ``target_se`` (at
    :func:`~._stepping_stone.reported_se` for the groups in all, with 10 % of variance to
    spare), at most ``most`` in all."""
    target_se, groups = settings["target_se"], estimate.per_group.size
    if target_se is None or reported_se(estimate) <= target_se or groups >= most:
        return 0
    # An infinite SE (fewer than two groups with a finite estimate) wants every group.
    for total in range(groups + 1, most):
        if reported_se(estimate, total) * np.sqrt(1.1) <= target_se:
            return total - groups
    return most - groups


def _group_log_sd(per_group: np.ndarray) -> float:
    """SD of the groups' finite log evidences; NaN with fewer than two."""
    finite = per_group[np.isfinite(per_group)]
    return float(np.std(finite, ddof=1)) if finite.size > 1 else np.nan


def _warn_on_group_size(messages, spreads, particles: int) -> None:
    steps = ", ".join(f"{_group_log_sd(per_group):.2f} nats with {size}"
                      for size, per_group in spreads)
    warn(
        messages,
        f"the groups' log evidences spread by {steps} particles per group: groups that "
        "small give an average that rests on the few highest, low and with too small an SE. "
        f"The estimate uses groups of {particles} particles; start from "
        f"n_particles={particles} next time.",
    )


class EffortLevel(NamedTuple):
    """One level of the effort check: particles per group, HMC transitions per particle
    (summed over the stages) and the level's estimate."""

    particles: int
    transitions: int
    estimate: Estimate


class EffortCheck(NamedTuple):
    """What the effort check leaves: the rounds to pool (one level, or two levels that
    agree), each level (:class:`EffortLevel`), what it doubled ("particles" or
    "transitions"), and the last move when the budget ended before two levels agreed (else
    None)."""

    rounds: list
    levels: list
    doubled: str
    unsettled: float | None


def _effort_level(rounds, estimate: Estimate) -> EffortLevel:
    first = rounds[0]
    return EffortLevel(first.final_log_weights.shape[1],
                       sum(stage.move.n_transitions for stage in first.stages), estimate)


def _check_wanted(effort_check, layers, rounds) -> bool:
    """Whether to run the effort check: as asked, or ("auto") on signs of separated modes."""
    if effort_check != "auto":
        return bool(effort_check)
    increments = round_increments(rounds)
    return bool(layers) or _groups_disagree(stepping_stone(*increments), increments[1])


def _groups_disagree(ss, log_ratio_var) -> bool:
    """The groups' log evidences spread beyond their within-group errors (chi-square at the
    0.001 level, and a between-group SE over twice the within-group one).

    The within-group error ignores the correlation that resampling creates, so it runs low by a
    modest factor even on unimodal posteriors; separated modes make the spread far larger.
    """
    G = ss.per_group.size
    within_var = log_ratio_var.sum(axis=1)
    with np.errstate(invalid="ignore"):  # a dead group (log Ẑ = −inf) leaves no verdict (NaN)
        spread = np.sum((ss.per_group - np.mean(ss.per_group)) ** 2
                        / np.maximum(within_var, 1e-300))
    return bool(G > 1 and chi2.sf(spread, G - 1) < 1e-3 and ss.se_between > 2 * ss.se_within)


#: An estimate that moves by more than this many combined SE when the effort doubles has
#: not settled: upwards (too few particles miss modes' mass, too short moves leave them in
#: worse modes: the bias this check is for) or, less plausibly and so with a wider band,
#: downwards.
_MOVE_UP, _MOVE_DOWN = 2.0, 3.0

#: Nor has it settled when the lower level's SE is more than this many times what doubling
#: the effort explains (``shrink``: 1 for twice the moves, whose SE the population sets once
#: they mix; √2 for twice the particles). Such a lower level's groups did not mix, and a move
#: measured against its noise cannot show whether the higher level is still low: on the
#: robot-arm MLP with four hidden units 20 → 40 HMC transitions per stage moved the estimate
#: 0.7 nats with a combined SE of 0.71 (157.31 ± 0.70, then 158.01 ± 0.14), and 80 put it
#: at 159.48 ± 0.12. On Liang's MLPs and the robot arm with h = 1, where the estimates are
#: calibrated, the ratio was 0.66–1.65 over 30 fits
#: (benchmarks/results/mlp_calibration.csv).
_NOISIER_LOWER_LEVEL = 2.0


def _in_band(move: float, noise: float) -> bool:
    """A move within the band above, for the two levels' SEs combined (``noise``)."""
    return bool(-_MOVE_DOWN * noise <= move <= _MOVE_UP * noise)


def _settled(previous, current, shrink: float = 1.0) -> bool:
    """Two estimates (with ``log_evidence`` and ``se``) agree within the band above, and the
    lower one (``previous``) is not too noisy to tell (``shrink``: its SE's expected ratio to
    the higher's)."""
    in_band = _in_band(current.log_evidence - previous.log_evidence,
                       float(np.hypot(current.se, previous.se)))
    return bool(in_band and previous.se <= _NOISIER_LOWER_LEVEL * shrink * current.se)


def _effort_check(rng, store, rounds, checks, after_first, level, density, ladder,
                  round_settings, settings, bar) -> EffortCheck:
    """Double the effort of ``level``'s groups (``n_groups`` groups each time, on the first
    round's ladder) until two levels' estimates agree or the budget ends: as many doublings
    as ``n_groups × particles × 2^k ≤ max_groups × n_particles`` allows.

    On an aligned MLP the HMC transitions at every stage double (the first round's step sizes
    and suggested transitions × 2, 4, ...): there the moves, not the population, limit how
    well a group holds the modes (on the robot-arm MLP with four hidden units, twice the
    moves raised the groups' median by 1.3 nats where twice the particles did not). Elsewhere
    the particles per group double. ``checks`` holds the levels a checkpoint kept; each level
    is saved when finished, with the generator state ``after_first`` from which a resumed run
    redraws the same seeds.
    """
    n_groups = settings["n_groups"]
    particles = level[0].final_log_weights.shape[1]
    budget = int(np.floor(np.log2(settings["max_groups"] * settings["n_particles"]
                                  / (n_groups * particles))))
    doubled = "transitions" if settings["mlp_layers"] else "particles"
    if budget < 1:
        return EffortCheck(level, [], doubled, None)
    tuning = [s.move for s in rounds[0].stages]
    previous_rounds = list(level)
    previous = stepping_stone(*round_increments(previous_rounds))
    levels = [_effort_level(previous_rounds, previous)]
    move = None
    for k in range(1, budget + 1):
        seed = rng.integers(2**63)
        size, level_tuning = particles * 2**k, tuning
        if doubled == "transitions":
            size = particles
            level_tuning = [t._replace(suggested_transitions=t.suggested_transitions * 2**k)
                            for t in tuning]
        planned = [t.suggested_transitions for t in level_tuning]
        if k > len(checks) or not _is_level(checks[k - 1], size, planned):
            bar.new_round(f"effort check, {size} particles" if doubled == "particles"
                          else f"effort check, {2**k}× the transitions")
            slot = ("check", k - 1)
            level_rng, partial = _go_on(store, slot, checks[k - 1] if k <= len(checks) else None,
                                        seed, (n_groups, size), planned)

            def save_stage(current, slot=slot, level_rng=level_rng):
                checks[slot[1]:] = [current]
                _save(store, rng, rounds, checks, rng_state=after_first,
                      unfinished={"slot": slot, "rng": level_rng.bit_generator.state})

            checks[k - 1:] = [run_round(level_rng, density, n_groups, size, ladder,
                                        level_tuning, round_settings, bar.update,
                                        partial=partial, on_stage=save_stage)]
            _save(store, rng, rounds, checks, rng_state=after_first)
        current_level = [checks[k - 1]]
        current = stepping_stone(*round_increments(current_level))
        levels.append(_effort_level(current_level, current))
        move = current.log_evidence - previous.log_evidence
        if _settled(previous, current, shrink=1.0 if doubled == "transitions" else np.sqrt(2)):
            return EffortCheck(previous_rounds + current_level, levels, doubled, None)
        previous_rounds, previous = current_level, current
    return EffortCheck(previous_rounds, levels, doubled, move)


def _warn_on_unchecked(messages, level, settings) -> None:
    """The effort check was wanted but ``max_groups`` left it no doubling."""
    particles = level[0].final_log_weights.shape[1]
    enough = int(np.ceil(2 * settings["n_groups"] * particles / settings["n_particles"]))
    warn(
        messages,
        f"the effort check did not run: max_groups × n_particles ({settings['max_groups']} × "
        f"{settings['n_particles']}) leaves no room to double the effort of "
        f"{settings['n_groups']} groups of {particles} particles. Unchecked, an estimate on "
        "a posterior with separated modes (such as an MLP's) can be low by more than its SE; "
        f"pass max_groups >= {enough} to check it.",
    )


def _is_level(saved: Round, particles: int, transitions: list) -> bool:
    """Whether a checkpoint's round ran ``particles`` per group and these transitions at
    each stage."""
    return (saved.final_log_weights.shape[1] == particles
            and [stage.move.n_transitions for stage in saved.stages] == transitions)


def _result(rng, model, density, rounds, effort, ladder, settings, timing, start, earlier,
            messages: list, search: ModeSearch, prior_starts: int = 0):
    """The stepping-stone estimate with its cross-checks, warnings (after ``messages``, those
    found before sampling) and draws, as a result; its SE at least what a mode the
    ``search`` (from ``prior_starts`` prior draws) found unreached would add."""
    pooled = effort.rounds
    log_ratio, log_ratio_var = round_increments(pooled)
    ss = stepping_stone(log_ratio, log_ratio_var)
    smallest = min(r.final_log_weights.shape[1] for r in pooled)
    ti = round_integration(pooled, ladder, smallest)
    _warn_on_soft_problems(messages, ss, ti, log_ratio_var, pooled, settings["target_se"],
                           pooled[0].final_log_weights.shape[1])
    _warn_on_short_moves(messages, pooled[-1], settings["max_transitions"])
    se = _warn_on_effort(messages, effort, ss.log_evidence, reported_se(ss),
                         _lower_share(effort, ss.per_group), settings["max_transitions"])
    # Draws come from the groups with the most particles (the last level pooled).
    particles = pooled[-1].final_log_weights.shape[1]
    last = [r for r in pooled if r.final_log_weights.shape[1] == particles]
    posterior, sample_stats = final_draws(rng, density, last, particles)
    se = _warn_on_unreached_mode(messages, search, ss.log_evidence, se, prior_starts)
    timing["total"] = time.perf_counter() - start + earlier
    groups = ss.per_group.size
    return ThermodynamicResult(
        log_evidence=ss.log_evidence,
        se=se,
        model_name=model.name,
        diagnostics=_diagnostics(rounds, log_ratio, log_ratio_var),
        posterior=posterior,
        sample_stats=sample_stats,
        trace=_trace(rounds[0]),
        ti_log_evidence=ti.log_evidence,
        ti_se=reported_se(ti),
        se_within=ss.se_within,
        se_between=ss.se_between,
        group_log_sd=_group_log_sd(ss.per_group),
        n_stages=len(ladder) - 1,
        n_groups=groups,
        effort_particles=tuple(level.particles for level in effort.levels),
        effort_transitions=tuple(level.transitions for level in effort.levels),
        effort_log_evidence=tuple(float(level.estimate.log_evidence) for level in effort.levels),
        effort_se=tuple(float(level.estimate.se) for level in effort.levels),
        best_log_joint_from_prior=float(search.best_from_prior),
        best_log_joint_from_particles=float(search.best_from_particles),
        settings=settings,
        timing=timing,
        warnings=messages,
    )


def _final_particles(rounds) -> tuple[np.ndarray, np.ndarray]:
    """Every group's particles at λ = 1 (unconstrained) and their log p(θ, D)."""
    states = [r.final_state for r in rounds]
    return (np.concatenate([s.position for s in states]),
            np.concatenate([s.log_prior + s.log_likelihood for s in states]))


def _unreached_matters(search: ModeSearch, log_evidence: float, se: float) -> bool:
    """The search found a mode the particles never reached that would move the estimate by
    more than its SE (given the particles' Occam factor, :func:`_warn_on_unreached_mode`)."""
    return bool(search.unreached and np.isfinite(log_evidence)
                and np.logaddexp(0.0, search.gap) > se)


#: Combined SEs by which the tempering from the mode must lie below the tempering from the
#: prior to be set aside when the prior's never reached the mode, and above it to replace it
#: when it did (then both are estimates of one evidence, and the higher one is the other's
#: low bias showing).
_FROM_MODE_BELOW, _FROM_MODE_ABOVE = 3.0, 2.0


def _search_rng(rng) -> np.random.Generator:
    """The mode search's own stream, seeded from ``rng`` without advancing it: the tempering
    from the prior goes on exactly as it would without the search."""
    return np.random.default_rng([int(copy.deepcopy(rng).integers(2**63)), 1])


def _search_and_temper(rng, model, density, first: Round, layers, settings, round_settings,
                       prior_starts, progressbar, store, timing, start, messages):
    """The mode search from ``prior_starts`` prior draws and the ``first`` round's best
    particles, and the tempering from a reference at its best mode where it is wanted.

    Wanted on an MLP, always: on the robot arm with three hidden units the particles reached
    the best mode the search found, yet their estimate (−59.29 ± 0.15) was 6.7 nats below the
    evidence (−52.62 ± 0.10), because they did not hold that mode in proportion; the
    tempering from the mode gave −52.37 ± 0.29 (levels −52.66, −52.50 and −52.37 after 25,
    50 and 100 sweeps). Elsewhere, when the search found a mode the particles never reached
    that would move the estimate by more than its SE.

    Returns the search and either the result from the mode, which replaces the tempering from
    the prior (:func:`_adopt_from_mode`), or the tempering's levels, a cross-check the result
    keeps, or None when it did not run or failed.
    """
    begun = time.perf_counter()
    search = search_modes(density, *_final_particles([first]), rng, prior_starts,
                          MODE_SEARCH_PARTICLE_STARTS)
    timing["mode_search"] = time.perf_counter() - begun
    first_estimate = stepping_stone(*round_increments([first]))
    log_evidence, se = first_estimate.log_evidence, first_estimate.se
    unreached = _unreached_matters(search, log_evidence, se)
    if not (unreached or (layers and search.mode is not None and np.isfinite(log_evidence))):
        return search, None
    from_mode = _from_mode_state(store, search, prior_starts, rng)
    reached = _temper_from_mode(rng, density, from_mode, settings, round_settings, progressbar,
                                store, timing, messages,
                                agrees_with=None if unreached else first_estimate)
    if reached is None:
        return search, None
    last = reached.levels[-1][1]
    combined = np.hypot(_levels_se(reached), se)
    if unreached and last.log_evidence < log_evidence - _FROM_MODE_BELOW * combined:
        warn(messages, f"tempering from a reference at the unreached mode gave "
             f"{last.log_evidence:.2f} ± {last.se:.2f}, below the tempering from the prior "
             f"({log_evidence:.2f} ± {se:.2f}): the reference did not hold the mode's mass, "
             "and the estimate is the tempering from the prior's.")
        return search, reached
    if not unreached and last.log_evidence <= log_evidence + _FROM_MODE_ABOVE * combined:
        return search, reached
    if unreached:
        warn(messages, f"maximising log p(θ, D) from {prior_starts} prior draws reached "
             f"{search.best_from_prior:.2f}, {search.gap:.1f} nats above every mode the "
             f"particles lead to (at best {search.best_from_particles:.2f}): the tempering "
             f"from the prior never reached that mode, and its estimate ({log_evidence:.2f} ± "
             f"{se:.2f}) is low. The estimate is from tempering that starts at a reference "
             f"built at the mode (levels: {_reference_text(reached.levels)}); cross-check "
             "with nested().")
    else:
        best = max(search.best_from_prior, search.best_from_particles)
        warn(messages, f"the tempering from the prior reached the best mode that maximising "
             f"log p(θ, D) found (at {best:.2f}), but its estimate ({log_evidence:.2f} ± "
             f"{se:.2f}) lies more than {_FROM_MODE_ABOVE:g} combined SE below the tempering "
             "that starts at a reference built at that mode (levels: "
             f"{_reference_text(reached.levels)}): its populations did not hold the mode in "
             "proportion, and the estimate is the latter's; cross-check with nested().")
    return search, _adopt_from_mode(rng, model, search, unreached, reached, from_mode,
                                    log_evidence, se, settings, timing, start, store, messages,
                                    progressbar)


def _levels_se(reached) -> float:
    """The tempering from the mode's SE as its levels bound it: the last level's, at least
    the rise over the doublings that agreed, or the last move when they never did."""
    moved = abs(reached.unsettled) if reached.unsettled is not None else 0.0
    return max(reached.levels[-1][1].se, reached.last_rise, moved)


def _levels_fields(reached) -> dict:
    """The result's fields that hold the tempering from the mode's levels."""
    return dict(reference_sweeps=tuple(sweeps for sweeps, _ in reached.levels),
                reference_log_evidence=tuple(float(e.log_evidence) for _, e in reached.levels),
                reference_se=tuple(float(e.se) for _, e in reached.levels))


def _temper_from_mode(rng, density, from_mode: dict, settings, round_settings, progressbar,
                      store, timing, messages, agrees_with=None):
    """The levels of tempering from references at ``from_mode["mode"]``, or None when no
    reference could be built (the sampling done so far is not lost); a first level that
    agrees with ``agrees_with``, the tempering from the prior's estimate, is the only one.

    Its progress is saved in ``store`` beside the tempering from the prior, and a resumed
    run (whose search, run again, finds the same mode) goes on from it.
    """
    begun = time.perf_counter()
    bar = TemperingBar(progressbar)
    try:
        with one_blas_thread():
            return temper_from_mode(rng, density, from_mode["mode"], settings["n_groups"],
                                    settings["n_particles"], round_settings, bar, _settled,
                                    progress=from_mode["progress"],
                                    save=lambda progress: _save_from_mode(
                                        store, from_mode, rng, progress=progress),
                                    agrees_with=agrees_with)
    except (ValueError, np.linalg.LinAlgError) as err:
        # e.g. a population at the mode too degenerate for a Gaussian
        warn(messages, f"tempering from the mode the search found failed ({err}); the "
             "estimate is the tempering from the prior's.")
        return None
    finally:
        bar.close()
        timing["reference"] = time.perf_counter() - begun


def _from_mode_state(store, search: ModeSearch, prior_starts: int, rng) -> dict:
    """The tempering from the mode as ``store`` holds it (``rng`` set to where it left it),
    or a new one at the search's best mode."""
    saved = _saved_from_mode(store, search, prior_starts)
    if saved is None:
        return {"mode": search.mode, "prior_starts": prior_starts, "progress": None,
                "more": []}
    rng.bit_generator.state = saved["rng"]
    return saved


def _save_from_mode(store, from_mode: dict, rng, **parts) -> None:
    from_mode.update(parts, rng=rng.bit_generator.state)
    store.save({**(store.state or {}), "from_mode": dict(from_mode)})


def _adopt_from_mode(rng, model, search: ModeSearch, unreached: bool, reached, from_mode,
                     log_evidence, se, settings, timing, start, store, messages, progressbar):
    """The result of the tempering from the mode, with more groups from its last reference
    until ``target_se`` (``from_mode``: its saved state); ``log_evidence`` and ``se``: the
    tempering from the prior's, ``unreached`` whether that never reached the mode."""
    begun = time.perf_counter()
    ladder = np.array([0.0] + [stage.lam for stage in reached.last_round.stages])
    more = _more_groups_from_mode(
        rng, reached, ladder, settings, progressbar, list(from_mode["more"]),
        from_mode.get("partial"),
        lambda chunks, partial=None: _save_from_mode(store, from_mode, rng, more=list(chunks),
                                                      partial=partial))
    rounds = [reached.last_round, *more]
    timing["reference"] += time.perf_counter() - begun
    unchecked = EffortCheck(rounds, [], "particles", None)
    result = _result(rng, model, reached.reference, rounds, unchecked, ladder, settings, timing,
                     start, store.earlier, messages, ModeSearch(np.nan, np.nan, 0))
    reported_se = max(result.se, reached.last_rise)
    if reached.unsettled is None and reached.last_rise > result.se:
        warn(messages, f"the estimates from the mode agreed, but rose by "
             f"{reached.last_rise:.2f} over the doublings that agreed "
             f"({_reference_text(reached.levels)}): the estimate may be low by about as much "
             "again, and its SE is at least that rise.")
    if reached.unsettled is not None:
        reported_se = max(reported_se, abs(reached.unsettled))
        if unreached:
            # Still rising: the SE reaches at least to where the gap rule would put the
            # evidence (the mode's height with the particles' Occam factor).
            by_gap = log_evidence + float(np.logaddexp(0.0, search.gap)) - result.log_evidence
            reported_se = max(reported_se, by_gap)
        warn(messages, f"the estimate from the mode kept moving as the population at the mode "
             f"relaxed longer ({_reference_text(reached.levels)}): it is likely still low. "
             f"Its SE ({reported_se:.1f}) is at least the last move"
             + (f" and reaches the {log_evidence + np.logaddexp(0.0, search.gap):.2f} that the "
                "mode's height would give with the Occam factor of the particles' mode."
                if unreached else "."))
    return dataclasses.replace(
        result,
        se=float(np.hypot(reported_se, reached.reference.log_domain_se)),
        best_log_joint_from_prior=float(search.best_from_prior),
        best_log_joint_from_particles=float(search.best_from_particles),
        log_evidence_from_prior=float(log_evidence),
        se_from_prior=float(se),
        warnings=list(messages),
        **_levels_fields(reached),
    )


def _saved_from_mode(store, search: ModeSearch, prior_starts: int) -> dict | None:
    """The tempering from the mode that ``store`` holds, if it started at this search's mode
    (to rounding: the optimiser's last digits may depend on the linear-algebra library)."""
    saved = (store.state or {}).get("from_mode")
    if (saved is None or saved["prior_starts"] != prior_starts
            or not np.allclose(saved["mode"], search.mode, rtol=1e-6, atol=1e-9)):
        return None
    return saved


def _more_groups_from_mode(rng, reached, ladder, settings, progressbar, chunks, partial,
                           on_save) -> list:
    """Groups tempered from the last reference on its ladder, ``n_groups`` at a time, until
    the pooled SE reaches ``target_se`` (at most ``max_groups`` in all), as the tempering from
    the prior runs them; one process, since the reference lives only in this one. ``chunks``:
    those a checkpoint kept, and ``partial`` the next one as far as it got;
    ``on_save(chunks, partial)`` is called after every stage of a chunk and
    ``on_save(chunks)`` as each one finishes."""
    n_groups, target_se = settings["n_groups"], settings["target_se"]
    last = reached.levels[-1][1]
    se = max(last.se, reported_se(last))
    # An estimate still moving has an SE of at least its move: more groups would not help.
    if (target_se is None or se <= target_se or reached.unsettled is not None
            or reached.last_rise >= target_se):
        return []
    extra = _extra_groups_wanted(last, settings["max_groups"], settings)
    tuning = [stage.move for stage in reached.last_round.stages]
    bar = TemperingBar(progressbar)
    with one_blas_thread():
        for k, size in enumerate(_chunk_sizes(extra, n_groups)[len(chunks):],
                                 start=2 + len(chunks)):
            bar.new_round(f"from the mode, round {k}")
            if partial is not None and partial.final_log_weights.shape[0] != size:
                partial = None
            chunks.append(run_round(rng, reached.reference, size, settings["n_particles"],
                                    ladder, tuning, reached.round_settings, bar.update,
                                    partial=partial,
                                    on_stage=lambda current: on_save(chunks, current)))
            partial = None
            on_save(chunks)
    bar.close()
    return chunks


def _reference_text(levels) -> str:
    return ", ".join(f"{e.log_evidence:.2f} ± {e.se:.2f} after {s} sweeps" for s, e in levels)


def _warn_on_unreached_mode(messages, search: ModeSearch, log_evidence: float, se: float,
                            prior_starts: int) -> float:
    """Warn when the search found a mode the particles never reached that would move the
    estimate by more than its SE; returns the SE to report (at least that move).

    The mode's mass is taken to be the estimate's times exp(gap), the gap in log p(θ, D)
    between it and the particles' best mode: the same Occam factor (log Z − log p(θ*, D)) for
    both. Laplace's approximation would measure it, but at an MLP's best modes it may not
    exist (optimisers can end on ridges whose Hessian is not positive definite).
    """
    if not (search.unreached and np.isfinite(log_evidence)):
        return se
    move = float(np.logaddexp(0.0, search.gap))
    if move <= se:
        return se
    warn(
        messages,
        f"maximising log p(θ, D) from {prior_starts} prior draws reached "
        f"{search.best_from_prior:.2f}, {search.gap:.1f} nats above every mode the first "
        f"round's particles lead to (at best {search.best_from_particles:.2f}): the tempered "
        "populations never reached that mode. "
        f"With the same Occam factor as theirs it would raise the estimate by {move:.1f} nats; "
        "the SE is at least that, and the estimate is likely low. Cross-check with nested(), "
        "whose runs start afresh from the prior, or rerun with more particles per group "
        "(n_particles).",
    )
    return max(se, move)


def _chunk_sizes(extra: int, size: int) -> list[int]:
    """Groups per chunk of the extra groups: ``size`` each, the last one the rest."""
    return [min(size, extra - start) for start in range(0, extra, size)]


def _run_chunk(seed, n_groups, args) -> Round:
    """Worker side of a parallel chunk."""
    with one_blas_thread():
        return run_round(np.random.default_rng(seed), worker_density(), n_groups,
                          progress=_ignore, **args)


def _ignore(*args) -> None:
    return None


def _run_chunks(rng, store, rounds, saved, after_first, model, density, backend, sizes, args,
                cores, expected, bar):
    """Extra groups, as independent chunks of their own seeds; returns them in order.

    The seeds are drawn from ``rng``; the checkpoint keeps the chunks after ``rounds`` with
    the generator state ``after_first`` (as the first round left it), from which a resumed
    run draws the same seeds. It reuses the finished chunks of ``saved`` (a checkpoint's,
    in the same order) and reruns only the others (a chunk is saved when it is finished).
    """
    seeds = rng.integers(2**63, size=len(sizes))
    saved = (list(saved) + [None] * len(sizes))[: len(sizes)]
    shape = [(size, args["n_particles"]) for size in sizes]
    chunks = [
        chunk if chunk is not None and chunk.stages and chunk.stages[-1].lam == 1.0
        and chunk.final_log_weights.shape == expected_shape else None
        for chunk, expected_shape in zip(saved, shape)
    ]

    def finished(index, chunk):
        chunks[index] = chunk
        _save(store, rng, [*rounds, *chunks], rng_state=after_first)

    todo = [i for i, chunk in enumerate(chunks) if chunk is None]
    first_number = len(rounds) + 1
    fork = fork_is_safe()
    workers = n_workers(cores, expected, len(todo), fork)
    if workers <= 1:
        # One process: a chunk is also saved after every stage, and a resumed run goes on
        # from its last one (worker processes save a chunk when it is finished).
        planned = [move.suggested_transitions for move in args["tuning"]]
        for i in todo:
            bar.new_round(first_number + i)
            chunk_rng, partial = _go_on(store, len(rounds) + i, saved[i], seeds[i], shape[i],
                                        planned)

            def save_stage(current, i=i, chunk_rng=chunk_rng):
                chunks[i] = current
                _save(store, rng, [*rounds, *chunks], rng_state=after_first,
                      unfinished={"slot": len(rounds) + i,
                                  "rng": chunk_rng.bit_generator.state})

            chunk = run_round(chunk_rng, density, sizes[i], progress=bar.update,
                              partial=partial, on_stage=save_stage, **args)
            finished(i, chunk)
        return chunks

    def collected(index, chunk):
        finished(index, chunk)
        bar.new_round(first_number + index)
        bar.update(1.0, chunk.stages)

    with shut_down_after(density_pool(model, backend, workers, fork)) as pool:
        run_tasks(pool, {i: (_run_chunk, (seeds[i], sizes[i], args)) for i in todo}, collected)
    return chunks


def _trace(first_round: Round) -> pd.DataFrame:
    """Per-transition log prior and log likelihood of the tracked chains, in long format."""
    frames = []
    for k, stage in enumerate(first_round.stages):
        n_transitions, n_traced = stage.move.traced_log_likelihood.shape
        frames.append(
            pd.DataFrame(
                {
                    "stage": k,
                    "lambda": stage.lam,
                    "transition": np.repeat(np.arange(n_transitions), n_traced),
                    "chain": np.tile(np.arange(n_traced), n_transitions),
                    "log_prior": stage.move.traced_log_prior.ravel(),
                    "log_likelihood": stage.move.traced_log_likelihood.ravel(),
                }
            )
        )
    return pd.concat(frames, ignore_index=True)


def _diagnostics(rounds: list, log_ratio, log_ratio_var) -> pd.DataFrame:
    """One row per stage, pooled over every group of every round."""
    G = log_ratio.shape[0]
    pooled = logsumexp(log_ratio, axis=0) - np.log(G)
    relative = np.exp(log_ratio - pooled)
    pooled_se = np.sqrt(np.sum(relative**2 * log_ratio_var, axis=0)) / G
    rows = []
    for k, stage in enumerate(rounds[0].stages):
        per_round = [r.stages[k] for r in rounds]
        weight = np.array([s.log_ratio.size for s in per_round], dtype=float)
        weight /= weight.sum()
        mean_ll = np.concatenate([s.mean_ll for s in per_round])
        var_ll = np.concatenate([s.var_ll for s in per_round])
        rhat = np.array([s.rhat for s in per_round])
        rhat = rhat[np.isfinite(rhat)]  # NaN where a round has too few live groups
        rows.append(
            {
                "lambda": stage.lam,
                "log_ratio": pooled[k],
                "log_ratio_se": pooled_se[k],
                "ess": float(np.dot(weight, [s.ess for s in per_round])),
                "rhat": float(rhat.max()) if rhat.size else np.nan,
                "acceptance": float(np.dot(weight, [s.move.acceptance for s in per_round])),
                "step_size": float(np.dot(weight, [s.move.step_size for s in per_round])),
                "n_leapfrog": int(max(s.move.n_leapfrog for s in per_round)),
                "n_transitions": int(max(s.move.n_transitions for s in per_round)),
                "divergences": int(sum(s.move.divergences for s in per_round)),
                "scale_acceptance": float(np.dot(weight, [s.move.scale_acceptance
                                                          for s in per_round])),
                "resampled": float(np.dot(weight, [s.resampled for s in per_round])),
                "mean_log_likelihood": float(np.mean(mean_ll)),
                "var_log_likelihood": float(np.mean(var_ll) + np.var(mean_ll)),
            }
        )
    frame = pd.DataFrame(rows)
    frame.index.name = "stage"
    return frame


def _levels_text(effort: EffortCheck) -> str:
    """Each level's estimate and effort, e.g. "-10.00 ± 0.10 with 64, -9.00 ± 0.10 with 128
    particles per group"."""
    if effort.doubled == "transitions":
        steps = [(level.estimate, level.transitions) for level in effort.levels]
        unit = "HMC transitions per particle"
    else:
        steps = [(level.estimate, level.particles) for level in effort.levels]
        unit = "particles per group"
    return ", ".join(f"{e.log_evidence:.2f} ± {e.se:.2f} with {n}" for e, n in steps) + f" {unit}"


def _lower_share(effort: EffortCheck, per_group: np.ndarray) -> float:
    """The lower level's share of the pooled Z when the check pooled two levels (the last
    level's groups come last), else 0."""
    if len(effort.levels) < 2 or effort.unsettled is not None:
        return 0.0
    last = effort.rounds[-1].final_log_weights.shape[0]
    return share_of(per_group, np.arange(per_group.size) < per_group.size - last)


def _warn_on_effort(messages, effort: EffortCheck, log_evidence: float, se: float,
                    lower_share: float = 0.0, max_transitions: int = 20) -> float:
    r"""Warn when doubling the particles or the moves moved the estimate ``log_evidence``;
    returns the SE to report.

    Unsettled: at least the last move δ, which bounds the bias left if each doubling at least
    halves it, or δ plus its noise c when the move was within the band and the lower level's
    noise alone kept the check going (δ then bounds the true move only to within c); when the
    last rise was more than half the one before, nothing bounds it, and the SE is at least the
    whole rise over the levels (a floor, not a bound, which the warning says). Settled: the
    last doubling moved the estimate by δ, with noise c (the two levels' SEs combined), and
    the SE adds the bound on the pooled levels' bias,
    :math:`\sqrt{\mathrm{SE}^2 + (1 + w)^2 \max(0, \delta^2 - c^2)}` with w =
    ``lower_share`` (:func:`~._stepping_stone.pooled_levels_bias`), (1 + w)(|δ| + c) in place of
    the root once an earlier doubling had moved the estimate. When the check set the first
    level aside and the last level's move from it is within the band, the SE also covers the
    distance from the estimate to the first level beyond their noise
    (:func:`~._stepping_stone.set_aside_level_bias`).
    """
    levels = effort.levels
    moves = effort.doubled == "transitions"
    what = "the HMC transitions at every stage" if moves else "the particles per group"
    if effort.unsettled is not None:
        cause = ("the moves are too short for each group to reach the posterior's modes in "
                 "proportion" if moves else
                 "the groups are too small to hold the posterior's modes in proportion")
        advice = ("Raise max_transitions (and max_groups)." if moves else
                  "Raise n_particles (and max_groups); on an MLP pass mlp_layers.")
        floor, reach = abs(effort.unsettled), "it may still be low"
        lower, upper = (level.estimate for level in levels[-2:])
        noise = float(np.hypot(lower.se, upper.se))
        if _in_band(effort.unsettled, noise):
            # Refused for the lower level's noise alone: the move measured bounds the true
            # one only to within that noise.
            floor = abs(effort.unsettled) + noise
            reach = (f"the level before the last was too noisy (SE {lower.se:.2f} against "
                     f"{upper.se:.2f}) for the move to show that the estimate settled, so the "
                     f"SE is at least the move plus its noise ({floor:.2f} nats); it may "
                     "still be low")
        rises = np.diff([level.estimate.log_evidence for level in levels])
        if rises.size > 1 and rises[-1] > 0 and rises[-1] > rises[-2] / 2:
            floor = max(floor, float(levels[-1].estimate.log_evidence
                                     - levels[0].estimate.log_evidence))
            reach = (f"the rise did not halve ({rises[-2]:+.2f}, then {rises[-1]:+.2f} nats), "
                     "so nothing bounds the rise still to come, and the SE is at least the "
                     f"whole rise over the levels ({floor:.2f} nats): the estimate may be "
                     "lower than the evidence by more than its SE")
        warn(
            messages,
            f"the estimate kept moving as {what} doubled ({_levels_text(effort)}) and the "
            "budget (k doublings while n_groups × particles × 2^k ≤ max_groups × "
            f"n_particles) ended before two levels agreed: {cause}. The "
            "estimate is the last level's and its SE is at least the last move "
            f"({effort.unsettled:+.2f} nats); {reach}. {advice}",
        )
        return max(se, floor)
    set_aside = 0.0
    if len(levels) > 2:
        first, last = levels[0].estimate, levels[-1].estimate
        if _in_band(last.log_evidence - first.log_evidence, float(np.hypot(first.se, last.se))):
            set_aside = set_aside_level_bias(log_evidence, se, first.log_evidence, first.se)
            advice = ("the last level is within the band of the first, so the first move may "
                      "have been noise: the SE also covers the distance to the first level "
                      f"({set_aside:.2f} nats beyond the noise); more groups (n_groups) make "
                      "the check sharper.")
        else:
            start = (f"max_transitions={max_transitions * 2 ** (len(levels) - 2)}" if moves
                     else f"n_particles={levels[-2].particles}")
            advice = f"start from {start} next time."
        warn(
            messages,
            f"the estimate moved as {what} doubled ({_levels_text(effort)}), or the first "
            "level was too noisy to show whether it had settled: at the first level it may "
            "have been off by more than its SE said. The estimate pools the last two "
            f"levels, which agree; {advice}",
        )
    if len(levels) >= 2:
        lower, upper = (level.estimate for level in levels[-2:])
        bias = pooled_levels_bias(upper.log_evidence - lower.log_evidence,
                                  float(np.hypot(lower.se, upper.se)), lower_share,
                                  bias_shown=len(levels) > 2)
        return float(np.sqrt(se**2 + bias**2 + set_aside**2))
    return se


#: The population's correlation with its start after ``max_transitions`` (median over the
#: stages at λ > 0.5) above which its moves are too short to trust the estimate. At the
#: defaults it is 0.33–0.40 on Liang's MLPs and 0.64 and 0.62 on the robot-arm MLP with h = 1
#: and 2, all calibrated; with HMC alone, 0.92 at h = 4, where 40 transitions per stage put
#: the groups' median 1.3 nats above 20, and 0.89 after 40, where 80 put it 1.3 nats higher
#: again (benchmarks/results/mlp_transitions.md). The scale moves bring it to 0.69 there, so
#: it seldom fires, although the estimate still rises with the moves: the effort check's
#: levels are what show that rise.
_SHORT_MOVES_CORRELATION = 0.75


def _warn_on_short_moves(messages, last_round: Round, max_transitions: int) -> None:
    """Warn when the late stages' moves of the last round pooled (the effort check's doubled
    moves, if it ran them) made at least ``max_transitions`` transitions and left the
    population still correlated with its start: its chains move slowly, or sit in separate
    modes, and each group holds its particles' start too long for its estimate to reach the
    typical one."""
    late = [stage.move for stage in last_round.stages if stage.lam > 0.5]
    if not late or any(move.n_transitions < max_transitions for move in late):
        return
    correlation = float(np.median([move.correlation for move in late]))
    if correlation > _SHORT_MOVES_CORRELATION:
        transitions = int(np.median([move.n_transitions for move in late]))
        warn(
            messages,
            f"after {transitions} HMC transitions per stage (max_transitions="
            f"{max_transitions}) the population was still correlated with its start (median "
            f"{correlation:.2f} over the stages at λ > 0.5): its chains move slowly or sit in "
            "separate modes, and the estimate may be low by more than its SE. Raise "
            "max_transitions until the estimate stops rising.",
        )


def _warn_on_soft_problems(messages, ss, ti, log_ratio_var, rounds, target_se, n_particles) -> None:
    """Turn soft problems into warnings on the result."""
    G = ss.per_group.size
    if not np.all(np.isfinite(ss.per_group)):
        warn(
            messages,
            f"{int(np.sum(~np.isfinite(ss.per_group)))} of {G} groups have a non-finite evidence "
            "estimate (every particle of a group had zero likelihood at some stage): the estimate "
            "rests on the other groups; check the likelihood's support.",
        )
    collapsed = [
        (k, stage.lam, stage.ess) for k, stage in enumerate(rounds[0].stages)
        if stage.ess < 0.1 * n_particles
    ]
    if collapsed:
        k, lam, ess = min(collapsed, key=lambda row: row[2])
        warn(
            messages,
            f"the incremental weights' ESS collapsed at {len(collapsed)} stage(s), down to "
            f"{ess:.1f} of {n_particles} particles at stage {k} (λ = {lam:.4g}): that stage's "
            "ratio is unreliable; add rungs there (a finer ladder, or the adaptive one).",
        )
    if _groups_disagree(ss, log_ratio_var):
        warn(
            messages,
            f"independent groups disagree beyond their within-group errors (group estimates "
            f"span {np.ptp(ss.per_group):.2f} nats): the posterior likely has modes (or a "
            "narrow region, such as a centred hierarchy's funnel) that the tempered populations "
            "do not cross between. The SE includes the spread; larger "
            "groups (n_particles) hold the modes in better proportion, and longer moves "
            "(max_transitions) cross between them more often.",
        )
    if np.isfinite(ti.log_evidence) and abs(ss.log_evidence - ti.log_evidence) > 3 * np.hypot(
        ss.se, ti.se
    ):
        warn(
            messages,
            f"stepping-stone ({ss.log_evidence:.3f} ± {ss.se:.3f}) and thermodynamic integration "
            f"({ti.log_evidence:.3f} ± {ti.se:.3f}) disagree beyond their errors: the ladder may "
            "be too coarse (raise target_cess) or the moves too short.",
        )
    divergences = sum(s.move.divergences for r in rounds for s in r.stages)
    transitions = sum(
        s.move.n_transitions * r.final_state.position.shape[0] for r in rounds for s in r.stages
    )
    # A divergent trajectory is rejected, which keeps every rung's target invariant: it costs
    # mixing, not correctness, so only a large share is worth a warning.
    if divergences > 0.1 * transitions:
        warn(
            messages,
            f"{divergences} of {transitions} HMC trajectories diverged: the tempered posteriors "
            "have regions of high curvature the moves cannot enter; consider reparameterising "
            "(e.g. non-centred hierarchies).",
        )
    se = reported_se(ss)
    if target_se is not None and se > target_se:
        warn(
            messages,
            f"target_se={target_se} not reached (SE {se:.3f}) within max_groups; raise "
            "max_groups or n_particles.",
        )
