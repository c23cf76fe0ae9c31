"""Liang (2005), §3.1 Example 1: which of the MLPs H1–H4 generated the simulated data?

Data: n = 30 points from a tanh MLP with P = 2 inputs and H = 2 hidden units (Liang's weights,
σ = 0.2). Models: H = 1, …, 4 hidden units with Liang's prior (eq. 3.2; ν = η = 1,
τ_β = τ_γ = 100), the output weights integrated out as Liang does
(:func:`pymc_evidence.testing.liang_mlp`). Four estimators side by side:

* contour Monte Carlo with Liang's birth/death moves (``cmc(..., mlp_layer=...)``);
* thermodynamic integration / stepping stones, one model at a time;
* nested sampling, one model at a time, points aligned under the layer's symmetries
  (``mlp_layers=``);
* Laplace, modes merged under the layer's 2^H·H! symmetries (``mlp_layers=``).

Table 3 of the paper (column (1,100)): H1 0.08 %, H2 84.99 %, H3 13.77 %, H4 1.16 %. The full
mode also repeats Table 4: CMC's posterior model probabilities against the sample size.

Writes to ``--out`` (default ``examples/results``): ``liang_mlp_table3.csv`` (one row per model
and method), ``liang_mlp_table4.csv`` (full mode; one row per sample size and model) and
``liang_mlp.png`` (CMC's model transition path, and the probabilities by method). Both tables
also give each method's probabilities with every model's evidence divided by H!, the number of
orderings of its hidden units (``per_ordering``; Table 4: ``mean_per_ordering``): Liang's
numbers match ours read that way.

Run ``python examples/liang_mlp.py --quick`` for a smoke test (minutes: most of it compiles the
four models' densities and Hessians, ~10–20 min with a cold PyTensor cache on a loaded machine).
The full Table 3 takes one to several hours of a core at the defaults, most of it the
thermodynamic fits' tempering from the mode; its thermodynamic and nested fits are
checkpointed to ``OUT/liang_mlp_checkpoints`` (``--checkpoints``), so an interrupted run,
started again, resumes them (finished fits are reloaded). ``--methods`` reruns some of Table 3's
estimators and keeps the other estimators' rows of the table already in ``--out`` (CMC, which
the figure draws, always runs: about a minute).
"""

from __future__ import annotations

import argparse
import math
import time
import warnings
from pathlib import Path

import numpy as np
import pandas as pd

import pymc_evidence as pm_evidence
from pymc_evidence import MLPLayer
from pymc_evidence.testing import liang_data, liang_mlp

HIDDEN = (1, 2, 3, 4)
#: Table 3's estimators besides CMC, in the table's order.
ESTIMATORS = ("thermodynamic", "nested", "laplace")
#: The layer of liang_mlp: hidden weights z_in (P × H) and biases z_bias; output integrated out.
LAYER = MLPLayer("z_in", bias="z_bias")
#: Liang (2005), Table 3, column (1,100): evidence in % (SD over 10 runs) and sampling frequency.
PAPER_TABLE3 = {
    "H1": (0.08, 0.01, 24.61), "H2": (84.99, 0.39, 25.18),
    "H3": (13.77, 0.34, 25.13), "H4": (1.16, 0.05, 25.07),
}
#: Liang (2005), Table 4: evidence in % averaged over 10 data sets per sample size.
PAPER_TABLE4 = {
    10: (56.49, 36.20, 6.57, 0.73), 20: (14.35, 71.35, 13.02, 1.28),
    25: (0.57, 83.94, 14.21, 1.27), 30: (0.05, 84.82, 13.95, 1.17),
    40: (0.00, 86.40, 12.66, 0.95), 50: (0.00, 87.99, 11.25, 0.76),
}
SETTINGS = {
    # quick: a smoke test of the whole pipeline; full: the paper's tables. HMC trajectories are
    # capped at 16 leapfrog steps: within-model moves need not mix fast, ĝ does the work.
    True: dict(cmc=dict(n_chains=4, n_pilot=16, delta_end=0.02, stage_length=100,
                        max_leapfrog=16),
               thermo=dict(n_particles=32, n_groups=2, max_groups=2, target_se=None),
               nested=dict(n_live=60, num_inner_steps=20, target_se=None, moves_check=False),
               laplace=dict(restarts=2), sizes=(), datasets=0),
    False: dict(cmc=dict(n_chains=10, n_pilot=64, delta_end=1e-3, stage_length=300,
                         max_leapfrog=16),
                thermo=dict(), nested=dict(),  # the defaults a user gets
                laplace=dict(restarts=16), sizes=(10, 20, 25, 30, 40, 50), datasets=3),
}
#: CMC settings of the sample-size study (Table 4): one run per data set, as Liang's.
TABLE4_CMC = dict(n_chains=8, n_pilot=32, delta_end=2e-3, stage_length=200, max_leapfrog=16)


def _models(x, y):
    return {f"H{h}": liang_mlp(h, x, y) for h in HIDDEN}


def _probabilities(log_z: dict) -> dict:
    values = np.array(list(log_z.values()))
    p = np.exp(values - np.nanmax(values))
    return dict(zip(log_z, p / np.nansum(p)))


def _probability_sd(log_z: dict, se: dict) -> dict:
    """The probabilities' SD propagated from the log evidences' SEs (delta method:
    ∂p_k/∂log Z_j = p_k (δ_kj − p_j)); NaN where no estimate has an SE (Laplace)."""
    p = np.array(list(_probabilities(log_z).values()))
    errors = np.array([se[name] for name in log_z])
    if not np.any(errors > 0):
        return dict.fromkeys(log_z, np.nan)
    jacobian = np.diag(p) - np.outer(p, p)
    return dict(zip(log_z, np.sqrt(jacobian**2 @ errors**2)))


def _per_ordering(probability: dict) -> dict:
    """The probabilities with each model's evidence divided by H!, the number of orderings of
    its H hidden units: the evidence of one ordering of the units with the prior left
    normalised over all of them. Liang's Tables 3 and 4 match ours read this way (README)."""
    p = np.array([probability[f"H{h}"] / math.factorial(h) for h in HIDDEN])
    return dict(zip((f"H{h}" for h in HIDDEN), p / p.sum()))


def _run_cmc(models, seed, options):
    return pm_evidence.cmc(models, mlp_layer=LAYER, anchor_draws=0, random_seed=seed,
                           progressbar=False, **options)


def table3(seed: int, quick: bool, checkpoints: Path | None = None,
           methods=ESTIMATORS) -> tuple[pd.DataFrame, dict]:
    """CMC's and ``methods``' posterior model probabilities on Liang's data set; the
    thermodynamic and nested fits saved to (and resumed from) ``checkpoints``."""
    settings = SETTINGS[quick]
    x, y = liang_data(30, seed=seed)
    models = _models(x, y)
    rows = []
    start = time.perf_counter()
    results = _run_cmc(models, seed, settings["cmc"])
    cmc_time = time.perf_counter() - start
    for name, res in results.items():
        rows.append(dict(
            model=name, method="cmc", probability=res.probability,
            probability_se=res.probability_se, log_evidence=np.nan, se=np.nan,
            frequency=res.frequency, birth_acceptance=res.birth_acceptance,
            death_acceptance=res.death_acceptance, seconds=cmc_time / len(models),
        ))
    for method in methods:
        log_z, se, seconds = {}, {}, {}
        for i, (name, model) in enumerate(models.items()):
            start = time.perf_counter()
            checkpoint = (None if checkpoints is None
                          else checkpoints / f"table3{'_quick' * quick}_seed{seed}_{method}_{name}")
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # their flags are kept in the result
                if method == "thermodynamic":
                    res = pm_evidence.thermodynamic(model, random_seed=seed + i, progressbar=False,
                                                    checkpoint=checkpoint, **settings["thermo"])
                elif method == "nested":
                    res = pm_evidence.nested(model, mlp_layers=LAYER, random_seed=seed + i,
                                             progressbar=False, checkpoint=checkpoint,
                                             **settings["nested"])
                else:
                    res = pm_evidence.laplace(model, mlp_layers=LAYER, random_seed=seed + i,
                                              progressbar=False, **settings["laplace"])
            log_z[name], se[name] = res.log_evidence, res.se
            # a resumed fit: its earlier sessions count too
            seconds[name] = time.perf_counter() - start + res.timing.get("earlier_sessions", 0.0)
        sd = _probability_sd(log_z, se)
        for name, p in _probabilities(log_z).items():
            rows.append(dict(model=name, method=method, probability=p, probability_se=sd[name],
                             log_evidence=log_z[name], se=se[name], frequency=np.nan,
                             birth_acceptance=np.nan, death_acceptance=np.nan,
                             seconds=seconds[name]))
    for name, (evidence, sd, frequency) in PAPER_TABLE3.items():
        rows.append(dict(model=name, method="liang2005", probability=evidence / 100,
                         probability_se=sd / 100 / np.sqrt(10), frequency=frequency / 100))
    return pd.DataFrame(rows), results


def table4(seed: int, quick: bool, datasets: int | None = None, sizes=None,
           path: Path | None = None) -> pd.DataFrame:
    """CMC's posterior model probabilities against the sample size n (Liang's Table 4), over
    ``datasets`` simulated data sets per n (Liang: 10); rewritten to ``path`` after each n."""
    settings = SETTINGS[quick]
    datasets = settings["datasets"] if datasets is None else datasets
    rows = []
    for n in settings["sizes"] if sizes is None else sizes:
        for data_set in range(datasets):
            data_seed = 1000 * n + data_set + seed
            x, y = liang_data(n, seed=data_seed)
            results = _run_cmc(_models(x, y), data_seed, TABLE4_CMC)
            per_ordering = _per_ordering({name: res.probability for name, res in results.items()})
            for name, res in results.items():
                rows.append(dict(n=n, data_set=data_set, model=name,
                                 probability=res.probability,
                                 probability_se=res.probability_se,
                                 per_ordering=per_ordering[name]))
        if path is not None:
            _summarise(pd.DataFrame(rows)).to_csv(path, index=False)
    return _summarise(pd.DataFrame(rows))


def _summarise(runs: pd.DataFrame) -> pd.DataFrame:
    """Per n and model: mean, SD and count of the probabilities over data sets, the mean of the
    probabilities per ordering (:func:`_per_ordering`); how many data sets put the most
    probability on a model other than the true H2; Liang's mean."""
    if runs.empty:
        return runs
    best = runs.loc[runs.groupby(["n", "data_set"])["probability"].idxmax()]
    errors = (best["model"] != "H2").groupby(best["n"]).sum()
    summary = runs.groupby(["n", "model"])["probability"].agg(["mean", "std", "count"]).reset_index()
    summary["mean_per_ordering"] = runs.groupby(["n", "model"])["per_ordering"].mean().to_numpy()
    summary["error_rate"] = summary["n"].map(errors)
    summary["paper_mean"] = [PAPER_TABLE4.get(n, (np.nan,) * 4)[HIDDEN.index(int(m[1:]))] / 100
                             for n, m in zip(summary["n"], summary["model"])]
    return summary


def figure(table: pd.DataFrame, results: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.container import BarContainer

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    # Show the replica that moves most in the last stage: a replica can sit in H1 for a
    # whole stage, since H1 <-> H2 jumps are almost never accepted.
    stats = next(iter(results.values())).sample_stats
    last = stats["stage"] == stats["stage"].max()
    switches = [np.count_nonzero(np.diff(path[keep])) for path, keep in
                zip(stats["model_index"], last)]
    replica = int(np.argmax(switches))
    pm_evidence.plot_cmc_path(results, chain=replica, ax=left)
    left.set_title(f"CMC's model path, last stage (replica {replica} of {len(switches)}, "
                   "the most mobile)", fontsize=10)
    wide = table.pivot(index="model", columns="method", values="probability")
    wide = wide[[c for c in ("liang2005", "cmc", "thermodynamic", "nested", "laplace")
                 if c in wide]]
    # Liang's evidences match ours divided by H! (README): CMC's read that way, beside his
    wide.insert(1, "cmc ÷ H! (one ordering of the units)",
                table[table["method"] == "cmc"].set_index("model")["per_ordering"])
    errors = table.pivot(index="model", columns="method", values="probability_se")
    wide.plot.bar(ax=right, rot=0, yerr=errors.reindex(columns=wide.columns), capsize=2)
    bars = [c for c in right.containers if isinstance(c, BarContainer)]
    for bar in bars[list(wide.columns).index("cmc ÷ H! (one ordering of the units)")]:
        bar.set_hatch("//")
    right.set_ylim(0, 1.05)
    right.legend(loc="upper right", fontsize=8)
    right.set_ylabel("posterior model probability")
    right.set_title("Liang (2005) Example 1, n = 30", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _kept_rows(path: Path, methods) -> pd.DataFrame:
    """The rows of ``methods`` in the Table 3 at ``path``, to keep beside a rerun of the
    others; an error before any work if the table lacks them."""
    if not methods:
        return pd.DataFrame()
    table = pd.read_csv(path) if path.exists() else pd.DataFrame(columns=["model", "method"])
    kept = table[table["method"].isin(methods)]
    missing = [m for m in methods if list(kept.loc[kept["method"] == m, "model"])
               != [f"H{h}" for h in HIDDEN]]
    if missing:
        raise ValueError(f"{path} has no rows of {missing} to keep: rerun them too "
                         f"(--methods {' '.join(ESTIMATORS)})")
    return kept


def _with_per_ordering(table: pd.DataFrame) -> pd.DataFrame:
    """Table 3 with each method's probabilities per ordering (:func:`_per_ordering`), Liang's
    rows left as he reported them."""
    table = table.copy()
    table["per_ordering"] = np.nan
    for _, rows in table[table["method"] != "liang2005"].groupby("method"):
        per_ordering = _per_ordering(dict(zip(rows["model"], rows["probability"])))
        table.loc[rows.index, "per_ordering"] = rows["model"].map(per_ordering)
    return table


def _in_table_order(table: pd.DataFrame) -> pd.DataFrame:
    order = {m: i for i, m in enumerate(("cmc", *ESTIMATORS, "liang2005"))}
    return table.sort_values("method", key=lambda m: m.map(order), kind="stable",
                             ignore_index=True)


def main(quick: bool = False, out: str | Path = "examples/results", seed: int = 0,
         datasets: int | None = None, only: str | None = None, sizes=None,
         checkpoints: str | Path | None = None, methods=ESTIMATORS) -> dict:
    """Run the example; returns ``{"table3": DataFrame, "table4": DataFrame, "seconds": float}``
    (an empty DataFrame for a table not run: ``only="table3"`` or ``"table4"`` runs one).
    ``checkpoints``: a directory for Table 3's thermodynamic and nested fits (None: none).
    ``methods``: Table 3's estimators to run besides CMC; the others' rows are kept from the
    table in ``out``."""
    unknown = sorted(set(methods) - set(ESTIMATORS))
    if unknown:
        raise ValueError(f"methods must be among {ESTIMATORS}, got {unknown}")
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    t3 = t4 = pd.DataFrame()
    if only != "table4":
        path = out / "liang_mlp_table3.csv"
        kept = _kept_rows(path, [m for m in ESTIMATORS if m not in methods])
        if checkpoints is not None:
            checkpoints = Path(checkpoints)
            checkpoints.mkdir(parents=True, exist_ok=True)
        t3, results = table3(seed, quick, checkpoints, [m for m in ESTIMATORS if m in methods])
        t3 = _in_table_order(pd.concat([t3, kept], ignore_index=True) if len(kept) else t3)
        t3 = _with_per_ordering(t3)
        t3.to_csv(path, index=False)
        figure(t3, results, out / "liang_mlp.png")
        print(f"table 3 done after {time.perf_counter() - start:.0f} s", flush=True)
    if only != "table3" and not quick:
        t4 = table4(seed, quick, datasets, sizes, out / "liang_mlp_table4.csv")
    return {"table3": t3, "table4": t4, "seconds": time.perf_counter() - start}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="small settings: a smoke test")
    parser.add_argument("--out", default="examples/results", help="output directory")
    parser.add_argument("--seed", type=int, default=0, help="data and sampler seed")
    parser.add_argument("--datasets", type=int, default=None,
                        help="data sets per sample size in Table 4 (default 3; Liang: 10)")
    parser.add_argument("--only", choices=("table3", "table4"), default=None,
                        help="run one of the two tables (Table 4 only in full mode)")
    parser.add_argument("--sizes", type=int, nargs="+", default=None,
                        help="sample sizes of Table 4 (default Liang's 10 20 25 30 40 50)")
    parser.add_argument("--checkpoints", default=None,
                        help="Table 3's fit checkpoints (default: OUT/liang_mlp_checkpoints)")
    parser.add_argument("--methods", nargs="+", choices=ESTIMATORS, default=list(ESTIMATORS),
                        help="Table 3's estimators to run besides CMC (default all); the others' "
                        "rows are kept from the table in OUT")
    args = parser.parse_args()
    output = main(quick=args.quick, out=args.out, seed=args.seed, datasets=args.datasets,
                  only=args.only, sizes=args.sizes,
                  checkpoints=args.checkpoints or Path(args.out) / "liang_mlp_checkpoints",
                  methods=args.methods)
    with pd.option_context("display.width", 160, "display.max_columns", 20):
        for name in ("table3", "table4"):
            if not output[name].empty:
                print(output[name].round(4).to_string(index=False))
    print(f"total {output['seconds']:.0f} s")
