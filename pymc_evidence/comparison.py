"""``compare``: estimate the evidence of several models and rank them, the table users call."""

from __future__ import annotations

import contextlib
import inspect
import pickle
import traceback
import uuid
import warnings
from concurrent.futures import Executor

import cloudpickle
import numpy as np
import pandas as pd
from scipy.special import logsumexp

from pymc_evidence._checkpoint import ResultDirectory
from pymc_evidence._parallel import local_pool, run_tasks, shut_down_after, usable_cpus
from pymc_evidence._progress import progress_bar
from pymc_evidence._random import spawn_seeds
from pymc_evidence._validation import named_models
from pymc_evidence.density import different_data, validate_model
from pymc_evidence.estimators.bic import bic
from pymc_evidence.estimators.bridge import bridge
from pymc_evidence.estimators.cmc import cmc
from pymc_evidence.estimators.laplace import laplace
from pymc_evidence.estimators.nested import nested
from pymc_evidence.estimators.thermodynamic import thermodynamic
from pymc_evidence.results import EvidenceWarning, load_result

__all__ = ["compare", "METHODS"]

#: Estimators ``compare`` can run, by name.
METHODS = {"thermodynamic": thermodynamic, "nested": nested, "laplace": laplace, "bic": bic,
           "bridge": bridge, "cmc": cmc}

#: Arguments ``compare`` sets itself for every estimator.
_PASSED_BY_COMPARE = ("model", "models", "random_seed", "progressbar")

COLUMNS = [
    "rank", "log_evidence", "se", "d_log_evidence", "dse", "log_bayes_factor", "weight",
    "method", "warning",
]


def _prior_log_probs(prior_model_probs, names) -> np.ndarray:
    if prior_model_probs is None:
        return np.full(len(names), -np.log(len(names)))
    if isinstance(prior_model_probs, dict):
        missing = set(names) - set(prior_model_probs)
        extra = set(prior_model_probs) - set(names)
        if missing or extra:
            raise ValueError(
                f"prior_model_probs must name exactly the models {names}; "
                f"missing {sorted(missing)}, unknown {sorted(extra)}"
            )
        probs = np.array([prior_model_probs[name] for name in names], dtype=float)
    else:
        probs = np.asarray(prior_model_probs, dtype=float)
        if probs.shape != (len(names),):
            raise ValueError(
                f"prior_model_probs needs one probability per model ({len(names)}), got {probs.shape}"
            )
    if np.any(probs <= 0) or not np.isclose(probs.sum(), 1.0):
        raise ValueError(f"prior_model_probs must be positive and sum to 1, got {probs.tolist()}")
    return np.log(probs)


#: ``executor=`` values that name an executor ``compare`` creates (and shuts down) itself.
_EXECUTOR_NAMES = ("processes",)


def _run_pickled(payload: bytes, task: str):
    """Worker side of an executor run: models travel as cloudpickle bytes.

    The estimator compiles the model's density on the worker (PyTensor's on-disk compilation
    cache makes a repeated compile on the same machine cheap); the random stream is in the
    payload, fixed before submission. ``task`` (the model's name and a one-off id) labels the
    task and keeps Dask, which keys a task by its arguments, from confusing it with an identical
    one submitted earlier (e.g. one that was cancelled).
    """
    estimator, model, options = cloudpickle.loads(payload)
    try:
        return estimator(model, **options)
    except Exception as err:
        portable = _portable_error(err, task)
        if portable is err:
            raise
    raise portable  # outside the handler: without the unpicklable exception as its context


def _portable_error(err: Exception, task: str) -> Exception:
    """``err`` if plain pickle can send it back from a worker, else a copy that it can.

    An exception that holds (or chains to one that holds) an unpicklable object, e.g. PyTensor
    attaching the failing node of a locally defined Op, would otherwise break the process pool
    (``BrokenProcessPool``) or reach Dask as a pickling error instead of the model's error. The
    copy has the same type, arguments and message where it can (else it is a ``RuntimeError``
    with the same text) and carries the original traceback chain as a note.
    """
    try:
        pickle.dumps(err)
        return err
    except Exception:
        pass
    try:
        copy = type(err)(*err.args)
        pickle.dumps(copy)
        if str(copy) != str(err):  # a constructor that rewrites its arguments into the message
            raise ValueError
    except Exception:
        copy = RuntimeError(f"{type(err).__name__}: {err}")
    copy.add_note(f"on the worker ({task}):\n" + "".join(traceback.format_exception(err)).rstrip())
    return copy.with_traceback(err.__traceback__)


def _failed(name: str, err: BaseException, where: str = "") -> RuntimeError:
    """The error ``compare`` raises when one model's estimator fails: it names the model."""
    return RuntimeError(
        f"estimating the evidence of model {name!r}{where} failed: {type(err).__name__}: {err}"
    )


def _validate_executor(executor) -> None:
    """Reject an ``executor=`` value before any work starts."""
    choices = (
        f"None, one of {list(_EXECUTOR_NAMES)}, a concurrent.futures.Executor or a "
        "dask.distributed.Client"
    )
    if isinstance(executor, str):
        if executor not in _EXECUTOR_NAMES:
            raise ValueError(f"executor must be {choices}; got {executor!r}")
    elif executor is not None and not (
        callable(getattr(executor, "submit", None))
        or callable(getattr(executor, "get_executor", None))
    ):
        raise TypeError(f"executor must be {choices}; got a {type(executor).__name__}")


def _resolve_executor(executor, n_tasks: int):
    """``(executor, owned)``: the executor to submit to, and whether ``compare`` must shut it down.

    ``None`` is sequential; ``"processes"`` a local process pool with one worker per model (at
    most one per CPU); a ``dask.distributed.Client`` is used through ``client.get_executor()``;
    any ``concurrent.futures.Executor`` (or object with ``submit``) as it is.
    """
    if executor is None or n_tasks == 0:
        return None, False
    if isinstance(executor, str):  # "processes", checked by _validate_executor
        return local_pool(max(1, min(n_tasks, usable_cpus()))), True
    if not isinstance(executor, Executor) and callable(getattr(executor, "get_executor", None)):
        return executor.get_executor(), False  # a dask.distributed.Client
    return executor, False


def _run_on_executor(executor, estimator, named, jobs, todo, store, results, progressbar):
    """Submit every model, collect results as they finish (saving each), fail on the first error.

    On a failure the models not yet started are cancelled, and the error names the model.
    """
    tasks = {}
    for name in todo:
        try:
            payload = cloudpickle.dumps((estimator, named[name], jobs[name]))
        except Exception as err:
            raise TypeError(
                f"model {name!r} cannot be sent to the executor (cloudpickle failed: "
                f"{type(err).__name__}: {err})"
            ) from err
        tasks[name] = (_run_pickled, (payload, f"model {name!r}, task {uuid.uuid4().hex}"))
    bar = progress_bar(progressbar and bool(todo), total=len(todo), desc="compare: models")

    def collected(name, result):
        results[name] = result
        store.save(name, result)
        if bar is not None:
            bar.update()
            bar.set_postfix_str(f"{name}: log Z = {result.log_evidence:.3f}")

    try:
        run_tasks(executor, tasks, collected,
                  on_error=lambda name, err: _failed(name, err, " on the executor"))
    finally:
        if bar is not None:
            bar.close()


def compare(
    models,
    method: str = "thermodynamic",
    *,
    prior_model_probs=None,
    executor=None,
    checkpoint=None,
    random_seed=None,
    progressbar: bool = True,
    **estimator_options,
) -> pd.DataFrame:
    r"""Estimate each model's evidence and rank the models, best first.

    .. math::

        p(M_i \mid D) = \frac{p(D \mid M_i)\, p(M_i)}{\sum_j p(D \mid M_j)\, p(M_j)}

    (Barber & Bishop 1997, eq. 2).

    Parameters
    ----------
    models : list of pymc.Model or dict of {str: pymc.Model}
        A list takes names from the models' ``name`` (``model_0``, ``model_1``, ... if unnamed).
        Models of the same data D: an :class:`EvidenceWarning` says, before any work, when the
        values their observed variables hold differ (models whose likelihood is
        ``pm.Potential`` terms alone are not checked).
    method : {"thermodynamic", "nested", "laplace", "bic", "bridge", "cmc"}, default "thermodynamic"
        ``"cmc"`` runs :func:`~pymc_evidence.cmc` once over all the models (its relative
        evidences come from one joint run; ``executor`` is not used).
    prior_model_probs : dict or sequence of float, optional
        Prior model probabilities p(M_i) (positive, summing to 1); uniform by default.
    executor : None, "processes", concurrent.futures.Executor or dask.distributed.Client
        Where the models run. ``None`` (default): one after another in this process, the
        fastest for a few small models. ``"processes"``: a local process pool that ``compare``
        creates and shuts down, one worker per model up to the number of CPUs. An executor
        (e.g. ``ProcessPoolExecutor``, or ``client.get_executor()`` of a
        ``dask.distributed.Client``; a ``Client`` itself is accepted too) runs them
        concurrently on it and is left open. Models are sent with cloudpickle and compile their
        densities on the workers. Each model's random stream is fixed before submission, so
        results do not depend on the scheduling: the same seed gives the same table with or
        without an executor. With an executor the progress bar counts finished models (the
        workers run without bars).
    checkpoint : str or path, optional
        Directory where each finished model's result is saved (netCDF). Calling again with the
        same arguments loads finished models instead of redoing them, and resumes an
        interrupted estimator from its own checkpoint (thermodynamic: after the last finished
        stage), so the table equals that of an uninterrupted run.
    random_seed : int, sequence, numpy.random.SeedSequence or None
        Split into one independent stream per model.
    progressbar : bool, default True
    **estimator_options
        Passed to the estimator (e.g. ``target_se=0.05`` for thermodynamic, ``restarts=20`` for
        laplace).

    Returns
    -------
    pandas.DataFrame
        Indexed by model name, best first, with columns

        ========================  ====================================================================
        ``rank``                  0 for the best model
        ``log_evidence``          estimate of log p(D | M) (nats)
        ``se``                    its standard error
        ``d_log_evidence``        log evidence of the best model minus this one's (≥ 0)
        ``dse``                   standard error of that difference (for ``"cmc"``, from the
                                  replicas of the joint run)
        ``log_bayes_factor``      log Bayes factor of this model against the next-ranked one
                                  (NaN for the last)
        ``weight``                posterior model probability p(M | D) under ``prior_model_probs``
        ``method``                estimator name
        ``warning``               True if the estimator reported a soft problem
        ========================  ====================================================================

        ``table.attrs["results"]`` maps each name to its :class:`~pymc_evidence.EvidenceResult`;
        ``table.attrs["indistinguishable"]`` lists the neighbouring pairs (higher-ranked first)
        whose log Bayes factor is below twice its SE, which an :class:`EvidenceWarning` names.

    Raises
    ------
    RuntimeError
        When an estimator fails on a model, with or without an executor: the message names the
        model and the error, which is chained as ``__cause__`` (on an executor, models not yet
        started are cancelled).

    Examples
    --------
    >>> import pymc_evidence as pm_evidence
    >>> from pymc_evidence.testing import annotators
    >>> models, exact = annotators()
    >>> table = pm_evidence.compare(models, random_seed=0, progressbar=False)
    >>> table.index[0]
    'indep'
    """
    if method not in METHODS:
        raise ValueError(f"method must be one of {sorted(METHODS)}, got {method!r}")
    estimator = METHODS[method]
    named = named_models(models)
    names = list(named)
    log_prior = _prior_log_probs(prior_model_probs, names)
    accepted = inspect.signature(estimator).parameters
    unknown = sorted(set(estimator_options) - set(accepted))
    if unknown:
        raise TypeError(
            f"{method} does not take option(s) {unknown}; it takes "
            f"{sorted(p for p in accepted if p not in _PASSED_BY_COMPARE)}"
        )
    if method == "cmc":  # one joint run over all the models (Liang 2005), not one per model
        results = cmc(named, random_seed=random_seed, progressbar=progressbar, **estimator_options)
        return _table(results, log_prior, method)
    _validate_executor(executor)
    for name, model in named.items():
        try:
            validate_model(model)
        except (ValueError, TypeError) as err:
            raise type(err)(f"model {name!r}: {err}") from err
    if differs := different_data(named):  # cmc says so itself, on its results
        warnings.warn(differs, EvidenceWarning, stacklevel=2)

    seeds = spawn_seeds(random_seed, len(names))
    jobs = {
        name: dict(estimator_options, random_seed=seed, progressbar=progressbar)
        for name, seed in zip(names, seeds)
    }
    store = ResultDirectory(checkpoint, {"method": method,
                                         "options": repr(sorted(estimator_options.items())),
                                         "seed": repr(random_seed)})
    results = {name: load_result(store.path(name)) for name in names if store.has(name)}
    todo = [name for name in names if name not in results]
    if store.directory is not None and "checkpoint" in accepted:
        for name in todo:
            jobs[name]["checkpoint"] = store.path(name).with_suffix(".ckpt")
    runner, owned = _resolve_executor(executor, len(todo))
    if runner is None:
        for name in todo:
            try:
                results[name] = estimator(named[name], **jobs[name])
            except Exception as err:
                raise _failed(name, err) from err
            store.save(name, results[name])
    else:
        remote_jobs = {name: dict(jobs[name], progressbar=False) for name in todo}
        with shut_down_after(runner) if owned else contextlib.nullcontext():
            _run_on_executor(
                runner, estimator, named, remote_jobs, todo, store, results, progressbar
            )
    results = {name: results[name].renamed(name) for name in names}
    return _table(results, log_prior, method)


def _table(results: dict, log_prior: np.ndarray, method: str) -> pd.DataFrame:
    names = list(results)
    log_z = np.array([results[n].log_evidence for n in names])
    se = np.array([results[n].se for n in names])
    log_post = log_z + log_prior
    ranked = ~np.isnan(log_post)
    weight = np.full(len(names), np.nan)
    if ranked.any():
        weight[ranked] = np.exp(log_post[ranked] - logsumexp(log_post[ranked]))
    if not ranked.all():
        unranked = ", ".join(repr(n) for n, r in zip(names, ranked) if not r)
        warnings.warn(
            f"no evidence estimate for {unranked} (NaN; see its result's warnings): listed last "
            "with no weight, and the other models' weights are among themselves",
            EvidenceWarning, stacklevel=3,
        )
    order = np.argsort(-log_z, kind="stable")
    best = order[0]
    ranked_log_z = log_z[order]
    table = pd.DataFrame(
        {
            "rank": np.arange(len(names)),
            "log_evidence": ranked_log_z,
            "se": se[order],
            "d_log_evidence": log_z[best] - ranked_log_z,
            "dse": [0.0 if i == best else results[names[i]].difference_se(results[names[best]])
                    for i in order],
            "log_bayes_factor": np.append(ranked_log_z[:-1] - ranked_log_z[1:], np.nan),
            "weight": weight[order],
            "method": method,
            "warning": [results[names[i]].warning for i in order],
        },
        index=pd.Index([names[i] for i in order], name="model"),
    )
    table.attrs["results"] = {names[i]: results[names[i]] for i in order}
    table.attrs["indistinguishable"] = _indistinguishable(results, [names[i] for i in order])
    return table[COLUMNS]


def _indistinguishable(results: dict, ranked: list) -> list:
    """Neighbours in the ranking whose log Bayes factor is below twice its SE, and a warning
    naming them: their order is not established at this precision."""
    pairs, details = [], []
    for upper, lower in zip(ranked[:-1], ranked[1:]):
        gap = results[upper].log_evidence - results[lower].log_evidence
        se = results[upper].difference_se(results[lower])
        if np.isfinite(gap) and se > 0 and gap < 2 * se:
            pairs.append((upper, lower))
            details.append(f"{upper!r} and {lower!r}: {gap:.2f} ± {se:.2f}")
    if pairs:
        warnings.warn(
            "cannot be told apart at this precision (log Bayes factor within 2 SE of 0): "
            + "; ".join(details) + ". Their order may flip on a rerun; lower target_se (or add "
            "effort) before choosing between them.",
            EvidenceWarning, stacklevel=4,
        )
    return pairs
