"""Thermodynamic chaining: stepping-stone and thermodynamic integration over tempered posteriors.

Barber & Bishop (1997) chain the prior (λ = 0, evidence 1) to the posterior (λ = 1) through
tempered distributions π_λ ∝ p(θ) L(θ)^λ (their eq. 9) and multiply the evidence ratios of
neighbouring rungs (eq. 5), each estimated by importance sampling (eq. 4). Here the draws at each
rung come from a population of particles moved by HMC (:mod:`pymc_evidence.kernels`), the ladder
is chosen adaptively, and the population is split into independent groups whose spread gives an
honest standard error.

This module is the estimator a user calls: validation, the first round, the extra groups that
``target_se`` asks for (on the CPUs), warnings and the result. The tempering itself is in
:mod:`._tempering`, the evidence and its SE in :mod:`._stepping_stone`.
"""

from __future__ import annotations

import copy
import time

import numpy as np
import pandas as pd
from scipy.special import logsumexp
from scipy.stats import chi2

from pymc_evidence._checkpoint import StateFile, run_key
from pymc_evidence._constants import DENSE_METRIC_MAX_DIM
from pymc_evidence._parallel import fork_is_safe, one_blas_thread, run_tasks, shut_down_after
from pymc_evidence._progress import TemperingBar
from pymc_evidence._random import as_generator
from pymc_evidence._validation import choice, integer, number, resolve_model
from pymc_evidence.density import get_density
from pymc_evidence.estimators._stepping_stone import (
    round_increments, round_integration, stepping_stone,
)
from pymc_evidence.estimators._tempering import Round, final_draws, power_ladder, run_round
from pymc_evidence.estimators._workers import density_pool, n_workers, worker_density
from pymc_evidence.results import ThermodynamicResult, warn
from pymc_evidence.symmetry import as_layers, detect_mlp_layers, missing_layers_message

__all__ = ["thermodynamic", "power_ladder"]


#: What goes wrong on an MLP without mlp_layers (the warning that suggests them).
_NO_LAYERS = (
    "its posterior holds 2^h·h! symmetric copies of every mode, and without "
    "mlp_layers each stage's HMC metric is estimated over all of them, so the moves barely "
    "mix and the estimate can be far off with an SE that says nothing (robot-arm MLP with "
    "one hidden unit, every default: −540.5 ± 4030 where −514.5 is right)."
)


def _validate_arguments(n_particles, n_groups, target_se, max_groups, ladder, target_cess,
                        resample_threshold, max_transitions, decorrelation, mass_matrix, cores):
    """Raise on a bad argument before any work; returns the ladder as an array (or None)."""
    integer("n_particles", n_particles, 8)
    integer("n_groups", n_groups, 2, why=" (the spread between independent groups is part of "
            "the standard error)")
    number("target_se", target_se, low=0, low_open=True, optional=True)
    integer("max_groups", max_groups, n_groups, why=" (n_groups)")
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
    target_cess: float = 0.8,
    resample_threshold: float = 0.5,
    target_accept: float = 0.8,
    trajectory_length: float = 1.0,
    max_leapfrog: int = 64,
    decorrelation: float = 0.05,
    max_transitions: int = 20,
    mass_matrix: str = "auto",
    mlp_layers=None,
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
        round, more independent groups are run on the same ladder until the SE reaches it (at
        most ``max_groups``). ``None`` runs one round only.
    n_particles : int, default 256
        Particles per group.
    n_groups : int, default 4
        Independent groups in the first round (each is its own SMC population).
    max_groups : int, default 32
        Upper bound on groups over all rounds.
    ladder : array_like, optional
        Temperatures 0 = λ₀ < … < λ_S = 1 (e.g. :func:`power_ladder`). Default: adaptive.
    target_cess : float, default 0.8
        For the adaptive ladder: the next λ keeps the conditional ESS of the incremental weights
        at this fraction, which puts rungs densely near λ = 0 without hand-tuning.
    resample_threshold : float, default 0.5
        A group is resampled (systematic) when its ESS falls below this fraction.
    target_accept, trajectory_length, max_leapfrog, decorrelation, max_transitions
        HMC moves at each rung (see :func:`pymc_evidence.kernels.mutate`).
    mass_matrix : {"auto", "dense", "diag"}, default "auto"
        Inverse mass matrix estimated from the weighted population at each rung: the dense
        covariance (handles correlated posteriors) or its diagonal. "auto" is dense up to
        ``DENSE_METRIC_MAX_DIM`` (400) parameters.
    mlp_layers : MLPLayer or list of MLPLayer, optional
        The model's MLP hidden layers (see :class:`~pymc_evidence.MLPLayer`). Before each rung's
        moves every particle is mapped to its copy, under the layers' sign-flip and permutation
        symmetries, nearest the heaviest particle: the density is unchanged, but the mass
        matrix then fits one copy of the modes rather than all of them (on the robot-arm MLP
        with h = 4 the step size doubles and the groups' estimates, 90 nats apart without it,
        come within 11 nats). Recommended for every MLP.
    checkpoint : str or path, optional
        File where every finished stage is saved (atomically, with the random generator's
        state). If it exists, the run resumes after its last finished stage and returns exactly
        what an uninterrupted run would; a finished run is returned without sampling. A
        checkpoint written with other settings or another model raises an error. The result's
        ``timing["sampling"]`` counts the sampling of every session that worked on the run
        (``timing["earlier_sessions"]``: the part before this call).
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
        disagree beyond their errors, on divergent trajectories, or when ``target_se`` was not
        reached.

    Notes
    -----
    1. Draw ``n_groups × n_particles`` particles from the prior (λ = 0).
    2. Choose the next λ (adaptive: bisection on the conditional ESS of exp(Δλ · log L)).
    3. Each group's stepping-stone increment is log Σ_i W_i exp(Δλ log L_i) (eq. 4), with W its
       normalised weights; reweight; resample groups whose ESS fell below the threshold.
    4. Move all particles by HMC at the new λ, with the mass matrix estimated from the weighted
       population (dense or diagonal, see ``mass_matrix``), until they have decorrelated.
    5. Repeat from 2 until λ = 1. Each group gives an unbiased evidence estimate; they are averaged
       on the evidence scale, and the SE is the larger of the between-group spread and the
       within-group error propagated from the stages (posteriors with separated modes make the
       first much larger than the second, and that is reported). Groups whose log estimates
       spread by σ nats imply an SE of about log(1 + √(expm1(σ²)/G)) (the lognormal law of
       SMC estimates), which the SE never undercuts: an average that one group dominates is not
       reported as precise.

    References
    ----------
    Barber, D. and Bishop, C. M. (1997). Bayesian model comparison by Monte Carlo chaining.
    NIPS 9.
    Bérard, J., Del Moral, P. and Doucet, A. (2014). A lognormal central limit theorem for
    particle approximations of normalizing constants. Electronic Journal of Probability 19.
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
    model = resolve_model(model)
    settings = dict(
        target_se=target_se, n_particles=int(n_particles), n_groups=int(n_groups),
        max_groups=int(max_groups), adaptive_ladder=ladder is None, target_cess=target_cess,
        resample_threshold=resample_threshold, target_accept=target_accept,
        trajectory_length=trajectory_length, max_leapfrog=max_leapfrog, decorrelation=decorrelation,
        max_transitions=max_transitions, mass_matrix=mass_matrix, backend=backend,
        ladder=None if ladder is None else ladder.tolist(),
        mlp_layers=None,
    )
    rng = as_generator(random_seed)
    start = time.perf_counter()
    density = get_density(model, backend=backend)
    compiled = time.perf_counter()
    round_settings = _round_settings(settings, density, mlp_layers)
    settings["mlp_layers"] = [vars(layer) for layer in round_settings["layers"]] or None
    messages: list[str] = []
    if mlp_layers is None and (found := detect_mlp_layers(model)):
        warn(messages, missing_layers_message(found, _NO_LAYERS), stacklevel=3)

    store = StateFile(checkpoint, run_key(settings, density, random_seed))
    rounds = _resume(store, rng)
    bar = TemperingBar(progressbar)
    with one_blas_thread():
        _first_round(rng, store, rounds, density, n_groups, n_particles, ladder, round_settings,
                     bar)
        first_seconds = time.perf_counter() - compiled
        ladder = np.array([0.0] + [s.lam for s in rounds[0].stages])
        groups = _extra_groups(
            rng, store, rounds, model, density, backend, ladder, round_settings, settings, cores,
            first_seconds, bar,
        )
    bar.close()
    sampled = time.perf_counter()

    # A resumed run's cost includes the sampling its checkpoint records from earlier sessions.
    timing = {"compile": compiled - start, "sampling": store.earlier + sampled - compiled,
              "earlier_sessions": store.earlier}
    return _result(rng, model, density, rounds, ladder, groups, settings, timing, start,
                   store.earlier, messages)



def _round_settings(settings, density, mlp_layers) -> dict:
    """What every round needs beyond the ladder: the adaptive-ladder and resampling targets,
    the HMC kernel's settings, the MLP layers to align, and the metric's kind."""
    mass_matrix = settings["mass_matrix"]
    return dict(
        target_cess=settings["target_cess"],
        resample_threshold=settings["resample_threshold"],
        kernel={name: settings[name] for name in (
            "target_accept", "trajectory_length", "max_leapfrog", "decorrelation",
            "max_transitions")},
        layers=as_layers(mlp_layers, density),
        dense_mass=mass_matrix == "dense" or (
            mass_matrix == "auto" and density.dim <= DENSE_METRIC_MAX_DIM),
    )


def _resume(store: StateFile, rng) -> list:
    """The rounds a checkpoint holds (the random generator set to where they left it), or []."""
    saved = store.load()
    if saved is None:
        return []
    rng.bit_generator.state = saved["rng"]
    return saved["rounds"]


def _save(store: StateFile, rng, rounds) -> None:
    store.save({"rng": rng.bit_generator.state, "rounds": rounds})


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


def _extra_groups(rng, store, rounds, model, density, backend, ladder, round_settings, settings,
                  cores, first_seconds, bar) -> int:
    """Run more groups on the first round's ladder until the SE reaches ``target_se`` (at most
    ``max_groups``); ``rounds[1:]`` holds them afterwards. Returns the number of groups."""
    n_groups, target_se = settings["n_groups"], settings["target_se"]
    estimate = stepping_stone(*round_increments(rounds[:1]))
    if target_se is None or estimate.se <= target_se or n_groups >= settings["max_groups"]:
        return n_groups
    wanted = int(np.ceil(n_groups * (estimate.se / target_se) ** 2 * 1.1))
    extra = min(wanted, settings["max_groups"]) - n_groups
    chunk_args = dict(n_particles=settings["n_particles"], ladder=ladder,
                      tuning=[s.move for s in rounds[0].stages], round_settings=round_settings)
    rounds[1:] = _run_chunks(
        rng, store, rounds, model, density, backend, _chunk_sizes(extra, n_groups),
        chunk_args, cores, first_seconds * extra / n_groups, bar,
    )
    return n_groups + extra


def _result(rng, model, density, rounds, ladder, groups, settings, timing, start, earlier,
            messages: list):
    """The stepping-stone estimate with its cross-checks, warnings (after ``messages``, those
    found before sampling) and draws, as a result."""
    n_particles = settings["n_particles"]
    log_ratio, log_ratio_var = round_increments(rounds)
    ss = stepping_stone(log_ratio, log_ratio_var)
    ti = round_integration(rounds, ladder, n_particles)
    _warn_on_soft_problems(messages, ss, ti, log_ratio_var, rounds, settings["target_se"], n_particles)
    posterior, sample_stats = final_draws(rng, density, rounds, n_particles)
    timing["total"] = time.perf_counter() - start + earlier
    return ThermodynamicResult(
        log_evidence=ss.log_evidence,
        se=ss.se,
        model_name=model.name,
        diagnostics=_diagnostics(rounds, log_ratio, log_ratio_var),
        posterior=posterior,
        sample_stats=sample_stats,
        trace=_trace(rounds[0]),
        ti_log_evidence=ti.log_evidence,
        ti_se=ti.se,
        se_within=ss.se_within,
        se_between=ss.se_between,
        group_log_sd=float(np.std(ss.per_group[np.isfinite(ss.per_group)], ddof=1))
        if groups > 1 else np.nan,
        n_stages=len(ladder) - 1,
        n_groups=groups,
        settings=settings,
        timing=timing,
        warnings=messages,
    )


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


def _run_chunks(rng, store, rounds, model, density, backend, sizes, args, cores, expected, bar):
    """The extra groups, as independent chunks of their own seeds; returns them in order.

    The seeds are drawn from ``rng`` as the first round left it, and that state is what the
    checkpoint keeps with the finished chunks: a resumed run draws the same seeds, skips the
    chunks it has and reruns only the others (a chunk is saved when it is finished).
    """
    resume_rng = copy.deepcopy(rng)
    seeds = rng.integers(2**63, size=len(sizes))
    saved = (list(rounds[1:]) + [None] * len(sizes))[: len(sizes)]
    chunks = [
        chunk if chunk is not None and chunk.stages and chunk.stages[-1].lam == 1.0
        and chunk.final_log_weights.shape[0] == size else None
        for chunk, size in zip(saved, sizes)
    ]

    def finished(index, chunk):
        chunks[index] = chunk
        _save(store, resume_rng, [rounds[0], *chunks])

    todo = [i for i, chunk in enumerate(chunks) if chunk is None]
    fork = fork_is_safe()
    workers = n_workers(cores, expected, len(todo), fork)
    if workers <= 1:
        for i in todo:
            bar.new_round(i + 2)
            chunk = run_round(np.random.default_rng(seeds[i]), density, sizes[i],
                              progress=bar.update, **args)
            finished(i, chunk)
        return chunks

    def collected(index, chunk):
        finished(index, chunk)
        bar.new_round(index + 2)
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
        rows.append(
            {
                "lambda": stage.lam,
                "log_ratio": pooled[k],
                "log_ratio_se": pooled_se[k],
                "ess": float(np.dot(weight, [s.ess for s in per_round])),
                "rhat": float(np.nanmax([s.rhat for s in per_round])),
                "acceptance": float(np.dot(weight, [s.move.acceptance for s in per_round])),
                "step_size": float(np.dot(weight, [s.move.step_size for s in per_round])),
                "n_leapfrog": int(max(s.move.n_leapfrog for s in per_round)),
                "n_transitions": int(max(s.move.n_transitions for s in per_round)),
                "divergences": int(sum(s.move.divergences for s in per_round)),
                "resampled": float(np.dot(weight, [s.resampled for s in per_round])),
                "mean_log_likelihood": float(np.mean(mean_ll)),
                "var_log_likelihood": float(np.mean(var_ll) + np.var(mean_ll)),
            }
        )
    frame = pd.DataFrame(rows)
    frame.index.name = "stage"
    return frame


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
    within_var = log_ratio_var.sum(axis=1)
    spread = np.sum((ss.per_group - np.mean(ss.per_group)) ** 2 / np.maximum(within_var, 1e-300))
    # The within-group error ignores the correlation that resampling creates, so it runs low by
    # a modest factor even on unimodal posteriors; separated modes make the spread far larger.
    if G > 1 and chi2.sf(spread, G - 1) < 1e-3 and ss.se_between > 2 * ss.se_within:
        warn(
            messages,
            f"independent groups disagree beyond their within-group errors (group estimates "
            f"span {np.ptp(ss.per_group):.2f} nats): the posterior likely has modes the "
            "tempered populations do not cross between. The SE includes the spread; run more "
            "groups (larger target_se budget, max_groups) or longer moves (max_transitions).",
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
    if target_se is not None and ss.se > target_se:
        warn(
            messages,
            f"target_se={target_se} not reached (SE {ss.se:.3f}) within max_groups; raise "
            "max_groups or n_particles.",
        )
