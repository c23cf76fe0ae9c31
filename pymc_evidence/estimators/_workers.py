"""Independent pieces of one estimator's run (thermodynamic's chunks of groups, nested
sampling's runs) on local worker processes, each with the model's density compiled once.

The model travels to each worker as cloudpickle bytes and is compiled there once (PyTensor's
on-disk cache makes that cheap after the main process's compile); a task then finds it with
:func:`worker_density`.
"""

from __future__ import annotations

import multiprocessing

import cloudpickle

from pymc_evidence._parallel import local_pool, usable_cpus
from pymc_evidence.density import get_density

__all__ = ["PARALLEL_MIN_SECONDS", "n_workers", "density_pool", "worker_density"]

#: Work expected to take less than this (seconds, on one core) is not worth starting workers.
PARALLEL_MIN_SECONDS = 20.0

_density = None  # the worker's compiled density, set by _init_worker


def n_workers(cores: int | None, expected: float, n_tasks: int, fork: bool) -> int:
    """Worker processes for ``n_tasks`` tasks expected to take ``expected`` seconds in all."""
    if cores is None:
        # Automatic only where no main-script guard is needed, and not inside a worker process
        # (e.g. of compare's executor), whose caller already keeps the CPUs busy.
        parallel = fork and multiprocessing.parent_process() is None
        cores = usable_cpus() if parallel and expected > PARALLEL_MIN_SECONDS else 1
    if multiprocessing.current_process().daemon:  # daemonic processes cannot have children
        cores = 1
    return min(cores, n_tasks)


def density_pool(model, backend: str, workers: int, fork: bool):
    """A local process pool whose workers each compile ``model``'s density once."""
    return local_pool(workers, fork=fork, initializer=_init_worker,
                      initargs=(cloudpickle.dumps((model, backend)),))


def _init_worker(payload: bytes) -> None:
    global _density
    model, backend = cloudpickle.loads(payload)
    _density = get_density(model, backend=backend)


def worker_density():
    """The density compiled in this worker process by :func:`density_pool`."""
    return _density
