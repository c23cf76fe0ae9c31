"""The robot-arm MLP evidence over several h on a Dask cluster: the same table as on one machine.

Architecture selection means many models. This script estimates the evidence of
:func:`pymc_evidence.testing.robot_arm_mlp` (Barber & Bishop 1997, §5: one tanh hidden layer of
h units, gamma hyperpriors) for several h with ``pm_evidence.compare(..., executor=client)``,
each model a task on a Dask cluster, and writes the ranked table to
``examples/results/dask_cluster.csv`` (``dask_cluster_quick.csv`` with ``--quick``).

By default it starts a ``LocalCluster`` of ``--workers`` single-threaded worker processes on
this machine. To use a real cluster, start a scheduler and workers there
(``dask scheduler``; ``dask worker tcp://host:8786 --nthreads 1`` on each machine, all with
pymc-evidence and the same PyMC installed) and pass its address::

    python examples/dask_cluster.py --scheduler tcp://host:8786

Nothing else changes: the models travel with the tasks (cloudpickle), each worker compiles
the densities it needs, and the per-model random streams are fixed before submission, so the
table is the one a sequential run gives with the same ``--seed``. ``--check-sequential`` runs
the comparison again in this process and checks that (``--quick`` does it by default).

Modes: ``--quick``: h ∈ {1, 2}, thermodynamic chaining with 16 particles in 2 groups and at
most 3 HMC transitions per rung, then the same comparison sequentially to check the tables
are identical (about 2 minutes on a busy 2-core machine; its numbers only show that the
pipeline works, they are not converged). Full (default): h ∈ {1, 2, 3, 4}, 64 particles in 4
groups and up to 8 transitions per rung (about 10 minutes with 2 workers on a busy 2-core
machine). Neither is Barber & Bishop's converged Fig. 2a: raise ``--n-particles``,
``--max-transitions`` and ``--hidden`` (and the workers) for that.

Needs the ``dask`` extra: ``pip install "pymc-evidence[dask]"``. On a machine where many
processes compile PyTensor code at once, the workers may wait longer than PyTensor's default
two minutes for its compilation lock: run with ``PYTENSOR_FLAGS=compile__timeout=1200``.
"""

from __future__ import annotations

import argparse
import logging
import time
import warnings
from pathlib import Path

import numpy as np

import pymc_evidence as pm_evidence
from pymc_evidence.testing import robot_arm_mlp

RESULTS = Path(__file__).resolve().parent / "results"
NAME = "dask_cluster"


def build_models(hidden: list[int]) -> dict:
    return {f"h={h}": robot_arm_mlp(h) for h in hidden}


def options(args) -> dict:
    """Thermodynamic settings of the run (compare passes them to every model)."""
    return {
        "n_particles": args.n_particles,
        "n_groups": args.n_groups,
        "max_transitions": args.max_transitions,
        "target_se": args.target_se,
    }


def run_on_cluster(models: dict, args):
    """The comparison through a Dask client: a LocalCluster, or the scheduler at ``--scheduler``."""
    from dask.distributed import Client, LocalCluster

    run = dict(random_seed=args.seed, **options(args))
    if args.scheduler:
        with Client(args.scheduler) as client:
            workers = len(client.scheduler_info()["workers"])
            print(f"connected to {args.scheduler}: {workers} workers")
            return pm_evidence.compare(models, executor=client, **run)
    # One model per worker process at a time; no dashboard (it needs bokeh, and a free port);
    # Dask's own log at ERROR only (e.g. not its warning that a worker took > 4 s to stop).
    with LocalCluster(
        n_workers=args.workers,
        threads_per_worker=1,
        dashboard_address=None,
        silence_logs=logging.ERROR,
    ) as cluster, Client(cluster) as client:
        print(f"LocalCluster: {args.workers} worker processes at {cluster.scheduler_address}")
        return pm_evidence.compare(models, executor=client, **run)


def main(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true",
                        help="h in {1, 2} with small thermodynamic settings (a couple of minutes)")
    parser.add_argument("--hidden", type=int, nargs="+", default=None,
                        help="hidden units, one model each (default 1 2 3 4; 1 2 with --quick)")
    parser.add_argument("--scheduler", default=None, metavar="ADDRESS",
                        help="a running Dask scheduler, e.g. tcp://host:8786 (default: start a "
                             "LocalCluster)")
    parser.add_argument("--workers", type=int, default=2,
                        help="worker processes of the LocalCluster (default 2)")
    parser.add_argument("--n-particles", type=int, default=None,
                        help="thermodynamic particles per group (default 64; 16 with --quick)")
    parser.add_argument("--n-groups", type=int, default=None,
                        help="independent populations per model (default 4; 2 with --quick)")
    parser.add_argument("--max-transitions", type=int, default=None,
                        help="HMC transitions per rung at most (default 8; 3 with --quick)")
    parser.add_argument("--target-se", type=float, default=None,
                        help="add populations until this SE (nats); default: one round")
    parser.add_argument("--seed", type=int, default=1, help="random seed of the comparison")
    parser.add_argument("--check-sequential", action=argparse.BooleanOptionalAction, default=None,
                        help="also run sequentially here and check the tables are identical "
                             "(default: on with --quick, off otherwise)")
    parser.add_argument("--out", type=Path, default=RESULTS, help="output directory")
    args = parser.parse_args(argv)
    quick = args.quick
    args.hidden = args.hidden or ([1, 2] if quick else [1, 2, 3, 4])
    args.n_particles = args.n_particles or (16 if quick else 64)
    args.n_groups = args.n_groups or (2 if quick else 4)
    args.max_transitions = args.max_transitions or (3 if quick else 8)
    if args.check_sequential is None:
        args.check_sequential = quick

    models = build_models(args.hidden)
    print(f"robot-arm MLPs h = {args.hidden}; thermodynamic {options(args)}; seed {args.seed}")
    start = time.perf_counter()
    with warnings.catch_warnings():
        # small settings: the estimator's accuracy warnings are expected, and are in the table
        warnings.simplefilter("ignore", pm_evidence.EvidenceWarning)
        table = run_on_cluster(models, args)
        seconds = time.perf_counter() - start
        print(f"on the cluster: {seconds:.0f} s")
        if args.check_sequential:
            start = time.perf_counter()
            sequential = pm_evidence.compare(
                models, random_seed=args.seed, progressbar=False, **options(args)
            )
            print(f"sequentially in this process: {time.perf_counter() - start:.0f} s")
            identical = table.equals(sequential)  # exact: every digit, NaN where NaN
            print(f"identical to the sequential table: {identical}")
            if not identical:
                raise SystemExit("the cluster's table differs from the sequential one")

    results = table.attrs["results"]
    table.insert(0, "h", [int(name.split("=")[1]) for name in table.index])
    table["n_stages"] = [len(results[name].diagnostics) for name in table.index]
    table["seconds"] = [results[name].timing.get("total", np.nan) for name in table.index]
    print(table.to_string(float_format=lambda x: f"{x:.3f}"))
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / (f"{NAME}_quick.csv" if quick else f"{NAME}.csv")
    table.to_csv(path, float_format="%.6g")
    print(f"wrote {path}")
    return table


if __name__ == "__main__":
    main()
