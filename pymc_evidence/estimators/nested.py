r"""Nested sampling for any PyMC model: the estimator :func:`nested` (Skilling 2006), by nested
slice sampling on the compiled density (Yallup et al. 2026).

The sampler itself, with no PyMC, is :mod:`._nested_core`; this module runs independent runs of
it on a model's compiled density until the error bar reaches ``target_se``, checks them against
runs with more slice moves (the moves check), and combines them into a
:class:`~pymc_evidence.NestedResult`.
"""

from __future__ import annotations

import contextlib
import math
import time
from typing import NamedTuple

import numpy as np
import pandas as pd
from scipy.special import logsumexp
from scipy.stats import chi2

from pymc_evidence._checkpoint import StateFile, run_key
from pymc_evidence._parallel import fork_is_safe, one_blas_thread, run_tasks, shut_down_after
from pymc_evidence._progress import progress_bar
from pymc_evidence._random import as_generator
from pymc_evidence._validation import (checkpoint_file, choice, integer, number,
                                        resolve_model)
from pymc_evidence.density import check_prior_draws, get_density
from pymc_evidence.estimators._nested_core import (
    NestedRun, equal_weight_draws, kish_ess, nested_core,
)
from pymc_evidence.estimators._stepping_stone import (lognormal_se, pooled_levels_bias,
                                                          set_aside_level_bias, share_of)
from pymc_evidence.estimators._workers import density_pool, n_workers, worker_density
from pymc_evidence.results import NestedResult, warn
from pymc_evidence.scale_moves import describe, find_scale_pairs
from pymc_evidence.symmetry import MLPLayer, align_units, resolve_layers, sampling_layers

__all__ = ["nested"]

#: Seconds between saves of an unfinished run to the checkpoint (finished runs: at once).
_SAVE_SECONDS = 30.0
#: Default slice moves per replacement, per parameter: 5 is calibrated on Gaussians and mixtures
#: up to 20-d (benchmarks/results/nested_core_defaults.md); MLP posteriors, curved, need 20 up
#: to 17 parameters and 40 at 27 (benchmarks/results/nested_mlp_inner_steps.md).
_INNER_STEPS, _MLP_INNER_STEPS = 5, 40
#: Fewer live points per parameter bias log Z upwards (benchmarks/results/nested_high_dim.md).
_LIVE_PER_DIM = 5
#: |z| of the insertion-rank test that warns: two-sided p < 1e-3 for a correct sampler.
_INSERTION_Z_LIMIT = 3.3
#: Diagnostics columns, one row per step of every run.
_STEP_COLUMNS = ("log_threshold", "log_x", "log_z_steps", "log_z_live", "max_log_likelihood",
                 "evaluations", "shrink_steps", "acceptance", "scale_acceptance", "mean_jump",
                 "n_clusters")
def nested(
    model=None,
    *,
    target_se: float | None = 0.1,
    n_live: int | None = None,
    num_delete: int | None = None,
    num_inner_steps: int | None = None,
    termination: float = 1e-3,
    n_runs: int = 2,
    max_runs: int = 16,
    max_clusters: int = 8,
    max_steps: int | None = None,
    mlp_layers="auto",
    moves_check="auto",
    checkpoint=None,
    backend: str = "c",
    cores: int | None = None,
    random_seed=None,
    progressbar: bool = True,
) -> NestedResult:
    r"""Log evidence by nested sampling: independent runs of nested slice sampling.

    Nested sampling writes the evidence as an integral over the prior volume X inside a
    likelihood contour, :math:`Z = \int_0^1 L(X)\,dX` (Skilling 2006), and estimates it from
    ``n_live`` points drawn exactly from the prior in the model's unconstrained space: every
    step the ``num_delete`` points of lowest likelihood die, their volumes shrink by
    :math:`E[\log t] = -1/n_i`, and they are replaced by survivors moved by
    ``num_inner_steps`` hit-and-run slice moves on the prior (with its Jacobians) restricted to
    :math:`L > L^*` (Yallup et al. 2026), all replacements in one batched call of the compiled
    density; directions come from the covariance of the live points, per cluster where the
    contour splits into separated modes. In a non-centred model every slice move is followed
    by a Metropolis move of each scale with the block it scales, which keeps the likelihood
    (:mod:`pymc_evidence.scale_moves`). Unlike a tempering path there is no phase
    transition to cross: the compression is by likelihood level, not temperature.

    Each run's error is the spread of log Z over simulated log-volume sequences (Higson et al.
    2018). Runs are repeated with independent random streams. The estimate averages the
    runs' evidences, not their logs, so that runs which found a mode that others missed count
    as they should:

    .. math::

        \log\hat Z = \log \tfrac1R \textstyle\sum_r e^{\log\hat Z_r - s_r^2/2},\quad
        \mathrm{SE} = \max\Bigl(\sqrt{\textstyle\sum_r w_r^2 s_r^2},\;
        \sqrt{\tfrac{R}{R-1}\textstyle\sum_r (w_r - 1/R)^2}\Bigr),

    :math:`w_r` being each run's share of the sum (about 1/R when the runs agree): the larger
    of the runs' own errors combined and their spread (modes whose shares the runs do not
    agree on, or that some runs missed). The spread term is never below the lognormal law
    of the runs' log evidences (the SE of a mean of R lognormal values whose logs spread by
    σ, :math:`\log(1 + \sqrt{\operatorname{expm1}(\sigma^2)/R})`): when one run carries the
    average, the shares' spread alone would call it precise, however far apart the runs are.
    More runs are started until the SE is at most ``target_se``. On MLPs a moves check then
    runs ``n_runs`` runs with twice the slice moves, and doubles again while the estimate
    moves (``moves_check``).

    Parameters
    ----------
    model : pymc.Model, optional
        Taken from the ``with`` context when omitted.
    target_se : float or None, default 0.1
        Run until the SE (nats) is at most this, within ``max_runs`` runs; None: ``n_runs``.
    n_live : int, optional
        Live points per run. Default ``max(100, 25 d)`` for d unconstrained parameters:
        the error of one run is about :math:`\sqrt{H / n_{\rm live}}` (H: information, the
        KL divergence from prior to posterior, in nats).
    num_delete : int, optional
        Points replaced per step, in one batch. Default ``n_live // 2``: the same error per
        density evaluation as one at a time, many times faster per second
        (``benchmarks/results/nested_core_defaults.md``).
    num_inner_steps : int, optional
        Slice moves per replacement. Default ``5 d`` (at least 4): on a 20-d correlated
        Gaussian, fewer moves bias log Z upwards beyond its SE (``2 d``: +0.7 to +1.7 SE,
        ``d``: +3.8 to +5.2 SE; ``benchmarks/results/nested_core_defaults.md``). With
        ``mlp_layers``, ``40 d``: MLP posteriors are curved, and with too few moves the live
        points lag behind the contracting region, which biases log Z low beyond its SE
        (robot-arm MLP: with ``5 d`` at 17 parameters, with ``20 d`` at 27;
        ``benchmarks/results/nested_mlp_inner_steps.md``).
    termination : float, default 1e-3
        Stop a run when the live points hold less than this fraction of its evidence.
    n_runs : int, default 2
        Independent runs at first (at least 2: their spread is part of the SE).
    max_runs : int, default 16
        Most runs that ``target_se`` may ask for.
    max_clusters : int, default 8
        Most clusters of the live points (1: one global covariance).
    max_steps : int, optional
        Stop each run after this many steps (a warning says the run did not terminate).
    mlp_layers : "auto", MLPLayer, list of MLPLayer or None, default "auto"
        The model's MLP hidden layers (see :class:`~pymc_evidence.MLPLayer`). Each run maps
        points, under the layers' sign-flip and permutation symmetries, to their copy nearest
        its live point of highest likelihood (chosen again at every cluster fit) before the
        live points' covariances and clusters are estimated, and keeps the slice moves among
        such aligned points (with several layers, the one with the most copies is aligned):
        the likelihood is unchanged, but the slice directions then fit one copy of the
        posterior's modes, with each unit's own scales and the correlations between units,
        instead of spanning all of them. ``"auto"``: the layers
        recognised in the model's graph (an activation of ``x @ W + b`` whose outputs go on
        through ``@ V``, or whose output weights the model integrates out) whose units
        permuting and sign-flipping leaves the model's density unchanged at prior draws, as
        in :func:`thermodynamic`; the ones used are in ``settings["mlp_layers"]``. None: no
        alignment.
    moves_check : {"auto", True, False}, default "auto"
        After the runs above, run ``n_runs`` runs with twice ``num_inner_steps`` and compare
        the estimates: with too few slice moves the live points stop representing the
        constrained prior and every run is off the same way (low on MLPs, whose live points
        lag behind the contracting region; high on correlated Gaussians), which neither the
        runs' spread nor the insertion-rank test shows. While the estimate moves by more than
        2 combined SE the moves are doubled again, within the budget
        ``n_runs × 2^k ≤ max_runs`` (three doublings at the defaults). Two levels that
        agree are pooled; if the budget ends first, the last level is reported, with a
        warning. Either way the SE includes the part of the last doubling's move δ that the
        levels' noise c does not explain, :math:`\sqrt{\mathrm{SE}^2 + (1 + w)^2 \max(0,
        \delta^2 - c^2)}`, w the lower level's share of the pooled Z (0 for the last level
        alone): when doubling the moves at least halves a bias, the bias left is at most the
        move at the last level and twice it at the lower one (so the SE can exceed
        ``target_se``). ``"auto"``:
        on MLPs (``mlp_layers`` given or recognised), where the bias has been seen; never
        when a run stopped at ``max_steps`` or the budget allows no doubling (``max_runs <
        2 n_runs``, an error with True). The levels are in ``moves_levels``,
        ``moves_log_evidence`` and ``moves_se``.
    checkpoint : str or path, optional
        File where every finished run is saved at once, and an unfinished one every 30 s
        (atomically, with its random state; its directory is made if missing). If it
        exists, nested() resumes from it and returns exactly what an uninterrupted call
        would; a checkpoint written with other settings (defaults included) or another model
        raises an error that names what differs. ``timing["sampling"]`` counts every
        session's sampling (``timing["earlier_sessions"]``: the part before this call; a
        finished checkpoint records what its run reported).
    backend : {"c", "numba"}, default "c"
        PyTensor backend for the compiled density.
    cores : int, optional
        Processes for the runs. Each run has its own random stream, and the decision to
        start more runs is taken on finished runs in order, so the result is the same for
        every value of ``cores``. Given, the first runs already run in parallel (a run on a
        worker is checkpointed when it ends, not inside it: interrupted, it starts again).
        Default: the first run alone in this process, then every usable CPU when the runs
        still to do are expected to take more than 20 s (judged from the first run), workers
        can be forked (Linux, no other Python thread running) and this is not itself a worker
        process, else one. An explicit ``cores > 1`` where forking is not safe starts workers
        from a fork server, which re-imports the main script: guard it with
        ``if __name__ == "__main__":``.
    random_seed : int, sequence, numpy.random.Generator or None
        Same seed, same result.
    progressbar : bool, default True

    Returns
    -------
    NestedResult
        ``log_evidence`` and ``se`` as above; ``run_log_evidence`` and ``run_se`` per run;
        ``information`` (H); ``diagnostics`` one row per step of every run (``run``, the
        threshold ``log_threshold`` = log L*, the expected ``log_x``, ``log_z_steps`` (the
        evidence of the dead points so far), ``log_z_live`` (the evidence still ahead),
        ``evaluations``, ``shrink_steps``, ``acceptance`` of the slice moves,
        ``scale_acceptance`` of the scale moves (NaN without them), ``mean_jump``,
        ``n_clusters``, ``num_inner_steps``); ``posterior`` equally weighted draws from the
        dead points' importance weights, one chain per run; ``sample_stats`` their
        ``log_likelihood`` and ``log_prior``; ``insertion_z`` the insertion-rank test;
        ``run_inner_steps`` each run's slice moves and ``moves_levels`` the moves check's.
        With the check, the runs are those of the levels pooled.

    Warns
    -----
    EvidenceWarning
        When the runs disagree beyond their errors, when new points rank above or below the
        survivors in likelihood more than a correct sampler allows (``insertion_z`` beyond
        ±3.3, two-sided p < 0.001; Fowlie, Handley and Su 2020), when a run stopped at
        ``max_steps`` before terminating, when ``target_se`` was not reached within
        ``max_runs``, or when the estimate moved as the moves check doubled the slice moves.

    Examples
    --------
    >>> import pymc as pm, pymc_evidence as pm_evidence
    >>> with pm.Model() as model:
    ...     mu = pm.Normal("mu", 0, 1)
    ...     _ = pm.Normal("y", mu, 1, observed=[0.3, -0.1, 0.5])
    >>> res = pm_evidence.nested(model, random_seed=1, progressbar=False)
    >>> abs(res.log_evidence - (-3.5637)) < 3 * res.se   # exact: -3.5637...
    True

    See Also
    --------
    pymc_evidence.thermodynamic : the other sampling estimator, by tempering.

    References
    ----------
    Skilling, J. (2006). Nested sampling for general Bayesian computation. Bayesian Analysis
    1(4), 833–859.
    Neal, R. M. (2003). Slice sampling. The Annals of Statistics 31(3), 705–767.
    Higson, E., Handley, W., Hobson, M. and Lasenby, A. (2018). Sampling errors in nested
    sampling parameter estimation. Bayesian Analysis 13(3), 873–896.
    Fowlie, A., Handley, W. and Su, L. (2020). Nested sampling cross-checks using order
    statistics. MNRAS 497(4), 5256–5263.
    Yallup, D., Kroupa, N. and Handley, W. (2026). Nested slice sampling. arXiv:2601.23252.
    The algorithm of BlackJAX's ``blackjax.ns``.
    """
    start = time.perf_counter()
    choice("moves_check", moves_check, ("auto", True, False))
    number("target_se", target_se, low=0, low_open=True, optional=True)
    n_runs = integer("n_runs", n_runs, 2, why=" (the spread between runs is part of the SE)")
    max_runs = integer("max_runs", max_runs, n_runs, why=" (n_runs)")
    if moves_check is True and max_runs < 2 * n_runs:
        raise ValueError(f"moves_check=True needs max_runs >= 2 * n_runs = {2 * n_runs} (its "
                         f"levels of n_runs runs cost 2, 4, … runs' worth each), got {max_runs}")
    number("termination", termination, low=0, high=1, low_open=True)
    integer("max_steps", max_steps, 1, optional=True)
    integer("max_clusters", max_clusters, 1)
    integer("cores", cores, 1, optional=True)
    n_live = integer("n_live", n_live, 8, optional=True)
    num_delete = integer("num_delete", num_delete, 1, optional=True)
    num_inner_steps = integer("num_inner_steps", num_inner_steps, 1, optional=True)
    checkpoint = checkpoint_file(checkpoint)
    model = resolve_model(model)
    density = get_density(model, backend=backend)
    layers = resolve_layers(mlp_layers, model, density)
    settings = _settings(density.dim, n_live, num_delete, num_inner_steps, termination,
                         target_se, n_runs, max_runs, max_clusters, max_steps, backend,
                         random_seed, bool(layers))
    settings["mlp_layers"] = [vars(layer) for layer in layers] or None
    settings["moves_check"] = moves_check
    settings["scale_moves"] = describe(find_scale_pairs(density))
    messages: list[str] = []
    store = StateFile(checkpoint, run_key(settings, density, random_seed))
    saved = store.load()
    rng = as_generator(random_seed)
    if saved is None:
        seeds = rng.integers(2**63, size=max_runs)  # run i's stream, whatever runs before it
        saved = {"seeds": seeds, "rng": rng.bit_generator.state, "runs": [], "seconds": [],
                 "checks": [], "current": None}
    rng.bit_generator.state = saved["rng"]
    if not saved["runs"] and saved["current"] is None:
        _check_first_live_points(density, saved["seeds"][0], settings["n_live"])
    compiled = time.perf_counter()
    with one_blas_thread():
        check = _sample(model, density, saved, store, settings, cores, progressbar)
    sampled = time.perf_counter()
    timing = {"compile": compiled - start, "sampling": store.earlier + sampled - compiled,
              "earlier_sessions": store.earlier}
    store.finish(timing["sampling"])
    return _result(rng, model, density, check, saved, settings, timing, start, messages)



def _check_first_live_points(density, seed, n_live) -> None:
    """Fail before sampling when the density is broken at the first run's starting points:
    up to 256 of exactly the prior draws that run starts from (its stream is untouched)."""
    live = density.prior_draws(np.random.default_rng(seed), min(n_live, 256))
    check_prior_draws(density, live, *density.log_densities(live), zero_likelihood=False)


def _runs_wanted(runs: list[NestedRun], settings: dict) -> int:
    """How many runs the estimate needs, deciding after each batch as the runs came in: a
    batch is ``n_runs`` runs, then enough to bring the SE to ``target_se`` (10 % spare, at
    least one more), at most ``max_runs``. A function of the finished runs alone, so that a
    resumed run and any number of cores decide the same."""
    wanted, target = settings["n_runs"], settings["target_se"]
    while target is not None and len(runs) >= wanted < settings["max_runs"]:
        se = _combine(runs[:wanted])[1]
        if se <= target:
            break
        wanted = min(settings["max_runs"],
                     max(wanted + 1, math.ceil(wanted * (se / target) ** 2 * 1.1)))
    return wanted


class MovesCheck(NamedTuple):
    """What the moves check leaves: the runs to pool (all of equal moves, or two levels that
    agree), each level's (moves per replacement, log Z, SE) and whether two levels agreed
    before the budget ended."""

    runs: list
    run_moves: list  # each run's slice moves per replacement
    levels: list
    settled: bool = True


def _sample(model, density, saved, store, settings, cores, progressbar) -> MovesCheck:
    """The runs, from the checkpoint's on, then the moves check's levels: with ``cores`` None
    the first run in this process (its time decides whether workers pay), later batches on
    worker processes when they do; with ``cores`` given every batch on that many."""
    runs, seconds = saved["runs"], saved["seconds"]
    with contextlib.ExitStack() as stack:
        pool = None

        def batch(level, todo, wanted):
            """Runs ``todo`` of ``level`` (moves doubled ``level`` times), saving each."""
            nonlocal pool
            done = runs if level == 0 else saved["checks"][level - 1]
            run_settings = dict(settings,
                                num_inner_steps=settings["num_inner_steps"] * 2**level)
            keys = [index if level == 0 else (level, index) for index in todo]
            run_seeds = [_run_seed(saved["seeds"], level, index) for index in todo]
            label = "" if level == 0 else f"moves check, {run_settings['num_inner_steps']} moves: "

            def finished(run, run_seconds):
                done.append(run)
                if level == 0:
                    seconds.append(run_seconds)
                saved["current"] = None
                store.save(saved)

            def save_current(key, state, rng_state):
                saved["current"] = (key, state, rng_state)
                store.save(saved)

            fork = fork_is_safe()
            # By default the first run (no seconds yet) runs alone: its time decides.
            expected = float(np.median(seconds)) * 2**level * len(todo) if seconds else 0.0
            workers = n_workers(cores, expected, len(todo), fork)
            if workers <= 1:
                for key, seed, index in zip(keys, run_seeds, todo):
                    begun = time.perf_counter()
                    run = _one_run(density, seed, run_settings, key, progressbar,
                                   saved["current"], save_current if store.path else None,
                                   desc=f"Nested sampling ({label}run {index + 1} of {wanted})")
                    finished(run, time.perf_counter() - begun)
                return
            if pool is None:
                pool = stack.enter_context(shut_down_after(
                    density_pool(model, settings["backend"], workers, fork)))
            desc = f"Nested sampling ({label}runs {todo[0] + 1}–{todo[-1] + 1}, in parallel)"
            _parallel_batch(pool, list(zip(keys, run_seeds)), run_settings, desc, progressbar,
                            finished)

        while (wanted := _runs_wanted(runs, settings)) > len(runs):
            todo = range(len(runs), wanted)
            batch(0, todo[:1] if cores is None and not seconds else todo, wanted)
        if not _check_wanted(settings, runs):
            return MovesCheck(list(runs), [settings["num_inner_steps"]] * len(runs), [])
        return _moves_check(runs, saved, settings, batch)


def _run_seed(seeds, level: int, index: int):
    """Run ``index``'s seed: drawn up front for the runs, derived from the first run's for
    the moves check's levels (independent streams, the same whatever ran before)."""
    return int(seeds[index]) if level == 0 else [int(seeds[0]), level, index]


def _check_wanted(settings, runs) -> bool:
    """Whether to run the moves check: as asked, or ("auto") on MLPs, whose curved posteriors
    are where too few moves have been seen to bias the evidence low; never on runs cut short
    at max_steps, whose estimates are not the evidence."""
    if any(run.stop_reason == "max_steps" for run in runs) or _check_budget(settings) < 1:
        return False
    if settings["moves_check"] != "auto":
        return bool(settings["moves_check"])
    return bool(settings["mlp_layers"])


def _check_budget(settings) -> int:
    """Doublings of the moves check: each level's ``n_runs`` runs cost 2^k runs' worth, at
    most ``max_runs``."""
    return int(np.floor(np.log2(settings["max_runs"] / settings["n_runs"])))


#: An estimate that moves by more than this many combined SE when the slice moves double has
#: not settled. Both ways: too few moves bias MLPs low (live points lagging behind the
#: contour) and correlated Gaussians high (replacements staying near their survivors).
_MOVE_BAND = 2.0


def _moves_check(runs, saved, settings, batch) -> MovesCheck:
    """Double the slice moves per replacement (``n_runs`` runs each time) until two levels'
    estimates agree or the budget ``n_runs × 2^k ≤ max_runs`` ends.

    ``saved["checks"]`` holds the levels' runs, each saved when finished.
    """
    n_runs, moves = settings["n_runs"], settings["num_inner_steps"]
    budget = _check_budget(settings)
    previous_runs, previous_moves = list(runs), [moves] * len(runs)
    previous = _combine(previous_runs)
    levels = [(moves, previous[0], previous[1])]
    for level in range(1, budget + 1):
        if len(saved["checks"]) < level:
            saved["checks"].append([])
        done = saved["checks"][level - 1]
        if len(done) < n_runs:
            batch(level, range(len(done), n_runs), n_runs)
        current = _combine(done)
        levels.append((moves * 2**level, current[0], current[1]))
        move = current[0] - previous[0]
        combined = float(np.hypot(current[1], previous[1]))
        level_moves = [moves * 2**level] * len(done)
        if abs(move) <= _MOVE_BAND * combined:
            return MovesCheck(previous_runs + list(done), previous_moves + level_moves, levels)
        previous_runs, previous_moves, previous = list(done), level_moves, current
    return MovesCheck(previous_runs, previous_moves, levels, settled=False)


def _parallel_batch(pool, tasks, settings, desc, progressbar, finished) -> None:
    """Runs ``tasks`` ((key, seed) each) on the pool's workers, handed to ``finished`` in their
    order (the SE's decisions and the checkpoint see them as a serial run would)."""
    bar = progress_bar(progressbar, total=len(tasks), unit=" runs", desc=desc)
    done: dict[int, tuple] = {}
    following = 0

    def collected(position, outcome):
        nonlocal following
        done[position] = outcome
        if bar is not None:
            bar.update(1)
        while following in done:
            finished(*done.pop(following))
            following += 1

    try:
        run_tasks(pool, {position: (_worker_run, (seed, settings, key))
                         for position, (key, seed) in enumerate(tasks)}, collected)
    finally:
        if bar is not None:
            bar.close()


def _worker_run(seed, settings, key) -> tuple[NestedRun, float]:
    """Worker side of a parallel run: the run and its seconds."""
    begun = time.perf_counter()
    with one_blas_thread():
        run = _one_run(worker_density(), seed, settings, key, False, None, None)
    return run, time.perf_counter() - begun


def _settings(dim, n_live, num_delete, num_inner_steps, termination, target_se, n_runs,
              max_runs, max_clusters, max_steps, backend, random_seed, mlp) -> dict:
    """Every option, defaults filled in from the dimension, checked against each other."""
    n_live = max(100, 25 * dim) if n_live is None else n_live
    if n_live <= dim:
        raise ValueError(f"n_live must be larger than the model's {dim} unconstrained parameters "
                         f"(the live points' covariance gives the slice directions), got {n_live}")
    num_delete = max(1, n_live // 2) if num_delete is None else num_delete
    if num_delete >= n_live:
        raise ValueError(f"num_delete must be smaller than n_live={n_live}, got {num_delete}")
    if num_inner_steps is None:
        num_inner_steps = max(4, (_MLP_INNER_STEPS if mlp else _INNER_STEPS) * dim)
    return {
        "n_live": n_live, "num_delete": num_delete, "num_inner_steps": num_inner_steps,
        "termination": float(termination), "target_se": target_se, "n_runs": n_runs,
        "max_runs": max_runs, "max_clusters": max_clusters, "max_steps": max_steps,
        "backend": backend,
        "random_seed": random_seed if isinstance(random_seed, (int, type(None))) else "given",
        "dim": dim,
    }


def _one_run(density, seed, settings, key, progressbar, current, save,
             desc="Nested sampling") -> NestedRun:
    """One nested-sampling run from exact prior draws, on its own random stream; continued
    from ``current`` = (key, state, rng state) when the checkpoint holds this run unfinished.
    ``desc`` names the run in the bar (with the runs the SE asks for so far, so that a user
    sees the cost of runs that disagree before it is spent).
    ``save(key, state, rng_state)``, when given, keeps the unfinished run every
    ``_SAVE_SECONDS``."""
    rng = np.random.default_rng(seed)
    if current is not None and current[0] == key:
        _, live, rng_state = current
        rng.bit_generator.state = rng_state
    else:
        live = density.prior_draws(rng, settings["n_live"])
        if not np.isfinite(live).all():  # a draw on the support's boundary: say which
            check_prior_draws(density, live, *density.log_densities(live), zero_likelihood=False)
    canonicalise = _canonical_copy(density, settings["mlp_layers"])
    bar = progress_bar(progressbar, desc=desc, unit=" steps")
    last_save = time.perf_counter()

    def after_step(state, info):
        nonlocal last_save
        if bar is not None:
            bar.update(1)
            bar.set_postfix_str(f"log X={info.log_x:.1f}, log Z≈{info.log_z:.2f}")
        if save is not None and time.perf_counter() - last_save > _SAVE_SECONDS:
            save(key, state, rng.bit_generator.state)
            last_save = time.perf_counter()

    try:
        return nested_core(
            rng, density.log_densities, live,
            num_delete=settings["num_delete"], num_inner_steps=settings["num_inner_steps"],
            termination=settings["termination"], max_steps=settings["max_steps"],
            max_clusters=settings["max_clusters"], canonicalise=canonicalise,
            scale_pairs=find_scale_pairs(density) if settings["scale_moves"] else (),
            callback=after_step if bar is not None or save is not None else None,
        )
    finally:
        if bar is not None:
            bar.close()


def _canonical_copy(density, mlp_layers):
    """``canonicalise(X, reference)`` for nested_core: each point's symmetry copy nearest the
    reference, a projection (aligning an aligned point changes nothing); None without MLP
    layers."""
    if not mlp_layers:
        return None
    layers = sampling_layers(density, [MLPLayer(**layer) for layer in mlp_layers])

    def canonicalise(X, reference):
        return align_units(density, layers, reference, X)

    return canonicalise


def _combine(runs: list[NestedRun]) -> tuple[float, float, float, float]:
    r"""log Z, SE, and its two parts (within runs, between runs), from the runs.

    The runs' evidences are averaged, not their log evidences: a run whose live points all
    missed a mode that holds most of the evidence is low by the mode's whole share, and only
    an average over Z lets the runs that found it count (as merging the runs would). Each
    run's Z is taken as :math:`\exp(\log\hat Z_r - s_r^2/2)`, unbiased when
    :math:`\log\hat Z_r` is normal with SE :math:`s_r`; with weights :math:`w_r` proportional
    to these, the within-run SE is :math:`\sqrt{\sum_r w_r^2 s_r^2}` and the between-run SE
    (delta method) :math:`\sqrt{R/(R-1)\sum_r (w_r - 1/R)^2}`. When the runs agree these are
    :math:`\sqrt{\sum s_r^2}/R` and :math:`\operatorname{sd}(\log\hat Z_r)/\sqrt R`, and
    the estimate is their mean log Z plus :math:`\frac{R-1}{2R}\operatorname{var}(\log\hat
    Z_r) - s^2/2`, about :math:`-s^2/2R` when the runs' SEs describe their spread. The
    between-run SE is at least :func:`lognormal_se` of the runs' log evidences: a run that
    carries the average by itself (runs 404.8, 408.4, 418.4 and 421.2 on the robot-arm MLP
    with h = 6) would otherwise give a delta-method SE near 1 nat, however far apart the runs.
    """
    log_z = np.array([r.log_z for r in runs])
    se_runs = np.array([r.log_z_se for r in runs])
    R = len(runs)
    unbiased = _unbiased_log_z(runs)
    weights = np.exp(unbiased - logsumexp(unbiased))
    within = float(np.sqrt(np.sum(weights**2 * se_runs**2)))
    between = max(float(np.sqrt(R / (R - 1) * np.sum((weights - 1 / R) ** 2))),
                  lognormal_se(log_z)) if R > 1 else np.nan
    estimate = float(logsumexp(unbiased) - np.log(R))
    return estimate, float(np.nanmax([within, between])), within, between


def _unbiased_log_z(runs) -> np.ndarray:
    """Each run's log Z minus half its variance: the log of an unbiased Z when log Ẑ_r is
    normal with SE s_r, the terms :func:`_combine` averages."""
    return np.array([r.log_z - r.log_z_se**2 / 2 for r in runs])


def _result(rng, model, density, check: MovesCheck, saved, settings, timing, start,
            messages: list) -> NestedResult:
    runs = check.runs
    log_z, se, within, between = _combine(runs)
    _warn_on_soft_problems(messages, runs, se, settings)
    se = _warn_on_moves(messages, check, log_z, se)
    posterior, sample_stats, ess = _posterior(rng, density, runs)
    every_run = saved["runs"] + [run for level in saved["checks"] for run in level]
    timing["total"] = time.perf_counter() - start
    return NestedResult(
        log_evidence=log_z,
        se=se,
        model_name=model.name or "",
        diagnostics=_diagnostics(runs, check.run_moves),
        posterior=posterior,
        sample_stats=sample_stats,
        se_within=within,
        se_between=between,
        run_log_evidence=tuple(float(r.log_z) for r in runs),
        run_se=tuple(float(r.log_z_se) for r in runs),
        run_inner_steps=tuple(check.run_moves),
        information=float(np.mean([r.information for r in runs])),
        n_runs=len(runs),
        n_live=settings["n_live"],
        n_evaluations=int(sum(r.n_evaluations for r in every_run)),
        ess=ess,
        insertion_z=_insertion_z(runs),
        moves_levels=tuple(moves for moves, _, _ in check.levels),
        moves_log_evidence=tuple(float(log_z) for _, log_z, _ in check.levels),
        moves_se=tuple(float(level_se) for _, _, level_se in check.levels),
        settings=settings,
        timing=timing,
        warnings=messages,
    )


def _posterior(rng, density, runs):
    """Equally weighted draws, one chain per run (as many per run as the smallest run's
    effective sample size), in the constrained space; and the pooled weights' Kish ESS."""
    n_draws = max(1, int(min(r.ess for r in runs)))
    X = np.stack([equal_weight_draws(rng, r, n_draws) for r in runs])  # (run, draw, d)
    flat = X.reshape(-1, X.shape[-1])
    constrained = density.to_constrained(flat)
    posterior = {k: v.reshape((len(runs), n_draws) + v.shape[1:]) for k, v in constrained.items()}
    log_prior, log_likelihood = density.log_densities(flat)
    sample_stats = {
        "log_likelihood": log_likelihood.reshape(len(runs), n_draws),
        "log_prior": log_prior.reshape(len(runs), n_draws),
    }
    pooled = np.concatenate([r.log_weights - logsumexp(r.log_weights) for r in runs])
    return posterior, sample_stats, kish_ess(pooled)


def _insertion_z(runs) -> float:
    """The runs' insertion-rank statistics combined: independent N(0, 1) under a correct
    sampler, so their sum over √R is too."""
    return float(np.sum([r.insertion_z for r in runs]) / np.sqrt(len(runs)))


def _diagnostics(runs, run_moves) -> pd.DataFrame:
    """One row per step of every run."""
    frames = [pd.DataFrame({"run": i, "num_inner_steps": moves,
                            **{c: np.asarray(getattr(r, c)) for c in _STEP_COLUMNS}})
              for i, (r, moves) in enumerate(zip(runs, run_moves))]
    frame = pd.concat(frames, ignore_index=True)
    frame.index.name = "step"
    return frame


def _warn_on_moves(messages, check: MovesCheck, log_z: float, se: float) -> float:
    r"""Warn when doubling the slice moves moved the estimate ``log_z``; returns the SE to
    report.

    The last doubling moved the estimate by δ, with noise c (the two levels' SEs combined).
    The SE adds the bound on the pooled levels' bias
    (:func:`~._stepping_stone.pooled_levels_bias`), with w the lower level's runs' share of
    the averaged Z (0 when the last level alone is the estimate):
    :math:`\sqrt{\mathrm{SE}^2 + (1 + w)^2 \max(0, \delta^2 - c^2)}`, the runs' SE when the
    move is noise, about (1 + w)|δ| when it is not; (1 + w)(|δ| + c) once a doubling has
    moved the estimate beyond the band (an earlier one, or the last when the budget ended).
    When the check set the first level aside and the last level's move from it is within the
    band, it also adds the distance from the estimate to the first level beyond their noise
    (:func:`~._stepping_stone.set_aside_level_bias`).
    """
    levels = check.levels
    if not levels:
        return se
    (lower_moves, lower, lower_se), (_, upper, upper_se) = levels[-2:]
    move = upper - lower
    share = share_of(_unbiased_log_z(check.runs),
                     [moves == lower_moves for moves in check.run_moves])
    bias = pooled_levels_bias(move, float(np.hypot(lower_se, upper_se)), share,
                              bias_shown=len(levels) > 2 or not check.settled)
    (_, first, first_se) = levels[0]
    unconfirmed = (check.settled and len(levels) > 2
                   and abs(upper - first) <= _MOVE_BAND * np.hypot(first_se, upper_se))
    set_aside = set_aside_level_bias(log_z, se, first, first_se) if unconfirmed else 0.0
    shown = ", ".join(f"{log_z:.2f} ± {level_se:.2f} with {moves}" for moves, log_z, level_se
                      in levels)
    if not check.settled:
        warn(messages, f"the estimate kept moving as the slice moves per replacement doubled "
             f"({shown}) and the budget (n_runs × 2^k ≤ max_runs) ended before two levels "
             "agreed: the live points do not represent the constrained prior and the evidence "
             "is off by more than the runs' spread shows. The estimate is the last level's, its "
             f"SE including the last move ({move:+.2f} nats). Pass "
             f"num_inner_steps={levels[-1][0] * 2} or more.", stacklevel=5)
    elif unconfirmed:
        warn(messages, f"the estimate moved as the slice moves per replacement doubled "
             f"({shown}), but the last level is within the band of the first: the first move "
             "may have been noise. The estimate pools the last two levels, which agree, its SE "
             f"including their difference and the distance to the first level ({set_aside:.2f} "
             f"nats beyond the noise); pass more runs (n_runs) to make the check sharper.",
             stacklevel=5)
    elif len(levels) > 2:
        warn(messages, f"the estimate moved as the slice moves per replacement doubled "
             f"({shown}): with {levels[0][0]} moves it was off by more than its SE said. The "
             "estimate pools the last two levels, which agree, its SE including their "
             f"difference; pass num_inner_steps={levels[-2][0]} next time.", stacklevel=5)
    return float(np.sqrt(se**2 + bias**2 + set_aside**2))


def _warn_on_soft_problems(messages, runs, se, settings) -> None:
    log_z = np.array([r.log_z for r in runs])
    se_runs = np.array([r.log_z_se for r in runs])
    mean = np.sum(log_z / se_runs**2) / np.sum(se_runs**-2)
    spread = float(np.sum((log_z - mean) ** 2 / se_runs**2))
    if len(runs) > 1 and chi2.sf(spread, len(runs) - 1) < 1e-3:
        warn(messages, f"independent runs disagree beyond their errors (log Z from "
             f"{log_z.min():.2f} to {log_z.max():.2f}, each ± {np.median(se_runs):.2f}): the "
             "runs do not agree on the posterior's modes or their moves do not reach the whole "
             "constrained region. The SE includes the spread but not a bias the runs share; "
             "raise num_inner_steps first, then n_live.", stacklevel=5)
    insertion = _insertion_z(runs)
    if abs(insertion) > _INSERTION_Z_LIMIT:
        side = "above" if insertion > 0 else "below"
        warn(messages, f"new live points rank {side} the survivors in likelihood more than a "
             f"correct sampler's would (insertion-rank z = {insertion:+.1f}; Fowlie, Handley and "
             "Su 2020): the slice moves do not reach the constrained prior, and the evidence "
             "can be off by more than its SE. Raise num_inner_steps.", stacklevel=5)
    # A plateau (every live point at the same likelihood) ends a run completely: the live
    # points' share is added; only max_steps cuts a run short.
    unfinished = sum(r.stop_reason == "max_steps" for r in runs)
    if unfinished:
        warn(messages, f"{unfinished} of {len(runs)} runs stopped at max_steps="
             f"{settings['max_steps']} before the live points' share of the evidence fell below "
             f"termination={settings['termination']}: the estimate is only as good as the "
             "estimate of the evidence inside the last contour; raise max_steps.", stacklevel=5)
    if settings["n_live"] < _LIVE_PER_DIM * settings["dim"]:
        warn(messages, f"n_live={settings['n_live']} is below {_LIVE_PER_DIM} times the model's "
             f"{settings['dim']} parameters: the live points' covariance, which sets the slice "
             "directions, then describes the constrained region too poorly and the evidence "
             "comes out high by more than its error bar, which the insertion-rank test does "
             "not see (60-d correlated Gaussian: all 4 runs 1.3 to 2.1 nats high with 2.5 d "
             "live points and 5 d moves; none one-sided with 5 d live points or more, or with "
             "20 d moves). Keep the default, 25 d, or at least 5 d.", stacklevel=5)
    if settings["num_inner_steps"] < 5 * settings["dim"]:
        warn(messages, f"num_inner_steps={settings['num_inner_steps']} is below 5 times the "
             f"model's {settings['dim']} parameters: replacements stay close to the survivors "
             "they start from, the live points stop representing the constrained prior, and the "
             "evidence can be off by more than its error bar shows (20-d correlated Gaussian: "
             "+0.7 to +1.7 SE with 2 d moves, +3.8 to +5.2 SE with d; 100-d: 9 SE low with "
             "d/2, 35 SE high with d). Keep the default, 5 d, or more.", stacklevel=5)
    elif (settings["mlp_layers"]
          and settings["num_inner_steps"] < _MLP_INNER_STEPS * settings["dim"]):
        warn(messages, f"num_inner_steps={settings['num_inner_steps']} is below "
             f"{_MLP_INNER_STEPS} times the MLP's {settings['dim']} parameters: on MLP "
             "posteriors the live points then lag behind the contracting region and the "
             "evidence comes out low by more than its error bar (robot-arm MLP, 17 parameters: "
             "1.1 nats, 2.4 SE, low with 5 d moves; 27 parameters: six runs with 20 d moves "
             "142.4 to 151.8, two with 40 d 152.4 and 155.4). Keep the default for MLPs, "
             "40 d, or more.",
             stacklevel=5)
    target = settings["target_se"]
    if target is not None and se > target:
        warn(messages, f"target_se={target} not reached (SE {se:.3f}) within max_runs="
             f"{settings['max_runs']}; raise max_runs or n_live.", stacklevel=5)
