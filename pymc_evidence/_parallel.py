"""Process pools and executors for the estimators and ``compare``: both cores of a laptop, safely.

One way to start a local pool, run tasks on any executor (collecting results as they finish,
cancelling the rest on a failure) and shut a pool down; BLAS limited to one thread meanwhile.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import threading
from concurrent.futures import ProcessPoolExecutor, as_completed

from threadpoolctl import threadpool_limits


def usable_cpus() -> int:
    """CPUs this process may run on (its affinity mask where the OS has one)."""
    if hasattr(os, "process_cpu_count"):  # Python 3.13+
        return os.process_cpu_count() or 1
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0)) or 1
    return os.cpu_count() or 1


def one_blas_thread():
    """Context manager: BLAS on one thread. The samplers' matrices (K×d particles, d×d metrics,
    the MLP densities' K·N×h products) are too small for BLAS threads to pay: on 2 cores,
    thermodynamic chaining of a 100-d Gaussian ran 1.8× faster and the h = 64 robot-arm density
    1.5× faster on one thread; and worker processes already fill the CPUs."""
    return threadpool_limits(limits=1, user_api="blas")


def fork_is_safe() -> bool:
    """Whether workers can be forked from this process: a fork copies only the calling thread,
    so it is safe (and needs no ``if __name__ == "__main__"`` guard in the user's script) while
    no other Python thread runs."""
    return "fork" in multiprocessing.get_all_start_methods() and threading.active_count() == 1


def local_pool(
    max_workers: int, *, fork: bool = False, initializer=None, initargs=()
) -> ProcessPoolExecutor:
    """A local process pool, its workers forked from this process or from a fork server.

    ``fork=True`` (when :func:`fork_is_safe`) forks this process, as PyMC's samplers do on
    Linux. Otherwise a fork server: this process may run threads (a Dask client's event loop,
    progress bars), and forking a threaded process can deadlock the child. The fork server is a
    clean single-threaded process that imports this package (and so PyMC) once, if it is not
    running yet; each worker is forked from it, ready to run; like ``spawn`` it re-imports the
    user's main script, which therefore needs the ``if __name__ == "__main__"`` guard. Where
    there is no fork server (Windows), workers are spawned and import PyMC each.
    ``initializer(*initargs)`` runs once in each worker (ProcessPoolExecutor's own arguments).
    """
    setup = {"initializer": initializer, "initargs": initargs}
    if fork:
        return ProcessPoolExecutor(max_workers, multiprocessing.get_context("fork"), **setup)
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return ProcessPoolExecutor(max_workers, multiprocessing.get_context("spawn"), **setup)
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(["__main__", "pymc_evidence"])  # "__main__": the default
    return ProcessPoolExecutor(max_workers, context, **setup)


def stop_pool(pool: ProcessPoolExecutor, failed: bool) -> None:
    """Shut down a pool the caller created; after a failure, without waiting for running tasks."""
    if failed:
        terminate = getattr(pool, "terminate_workers", None)  # Python 3.14+
        if terminate is not None:
            terminate()
        else:
            for process in list((getattr(pool, "_processes", None) or {}).values()):
                process.terminate()
    pool.shutdown(wait=True, cancel_futures=True)


def run_tasks(executor, tasks: dict, on_result, on_error=None) -> None:
    """Submit every task ``{key: (function, args)}`` to ``executor`` and hand each result to
    ``on_result(key, result)`` as it finishes.

    On the first failure the tasks not yet started are cancelled and the error is raised —
    as ``on_error(key, error)`` returns it, when given (e.g. to name the model that failed).
    """
    futures = {executor.submit(function, *args): key for key, (function, args) in tasks.items()}
    try:
        for future in as_completed(futures):
            key = futures[future]
            try:
                result = future.result()
            except Exception as err:
                if on_error is None:
                    raise
                raise on_error(key, err) from err
            on_result(key, result)
    finally:
        for future in futures:
            future.cancel()


@contextlib.contextmanager
def shut_down_after(pool: ProcessPoolExecutor):
    """Context manager: shut ``pool`` down on leaving; after a failure without waiting for
    its running tasks (:func:`stop_pool`)."""
    failed = True
    try:
        yield pool
        failed = False
    finally:
        stop_pool(pool, failed)
