"""Barber & Bishop (1997) §5: robot-arm MLP evidence against hidden units, chaining vs Laplace.

MacKay's robot-arm problem: learn (x1, x2) → (y1, y2), y1 = 2 cos x1 + 1.3 cos(x1 + x2),
y2 = 2 sin x1 + 1.3 sin(x1 + x2), from 200 cases with output noise σ = 0.05. The model is
:func:`pymc_evidence.testing.robot_arm_mlp`: one tanh hidden layer of h units, Barber &
Bishop's gamma hyperpriors on four weight-group precisions and on the noise precision,
weights non-centred. For each h:

* **thermodynamic chaining**: ``pm_evidence.thermodynamic(model, mlp_layers=ROBOT_ARM_LAYER,
  ...)``, Barber & Bishop's Fig. 2a; its λ = 1 particles give the posterior-mean prediction;
* **Gaussian approximation**: Barber & Bishop's §4 (Fig. 3a), MacKay's evidence framework:
  :func:`gaussian_mlp` is the same network with fixed-precision Gaussian weight priors, and
  ``pm_evidence.laplace(model, framework="mackay", noise="y", groups=GAUSSIAN_GROUPS,
  start=..., mlp_layers=...)`` finds the modes from the λ = 1 particles that fit the data best,
  re-estimates the weight-decay and noise precisions at each (eq. 10), evaluates eq. 11,
  merges modes that are copies under the 2^h·h! sign-flip × permutation symmetries, adds
  log(2^h h!) and sums the distinct modes. Its scale differs from chaining's by a constant
  (eq. 11 omits the hyperpriors): compare shapes, as Barber & Bishop do. Predictions: the
  network at the best mode, and, as in Fig. 3b, the mean test error over the modes found;
* the **test error**, normalised as in Barber & Bishop's Fig. 2b so that its theoretical minimum
  is 1.0: the mean over test cases and both outputs of (prediction − target)² / σ², σ = 0.05.
  The true function scores 1.0 only in expectation: on a finite test set its score is itself
  noisy (0.942 on MacKay's 400 test rows), and the table reports it as ``test_error_floor``.

Test sets: MacKay's (rows 201–600 of the data, default) or, with ``--test-set generated``,
Barber & Bishop's "own test set of 1000 points using the same prescription": inputs uniform on
x1 ∈ [−1.932, −0.453] ∪ [0.453, 1.932], x2 ∈ [0.534, 3.142] (MacKay's intervals as Neal, 1996,
§3.2 states them; the 600 stored rows lie inside them), targets the function plus N(0, 0.05²).

The run is long (the full mode is h = 1..24) and resumable: each finished h is appended to the
CSV, and h already in the CSV is skipped; the thermodynamic run of an h in progress is
checkpointed after every stage (``--checkpoints``), so an interrupted run continues where it
stopped. Writes ``robot_arm.csv``, ``robot_arm_fig2.png`` (log evidence and test error against
h) and ``robot_arm_fig1.png`` (Fig. 1 diagnostics of one h: log evidence ratio per stage,
E_λ[log L], and the energy of tracked chains at the stage nearest λ = 0.6) to
``examples/results/`` (or ``--out``). ``--quick``: h ∈ {1, 2}, few particles and no Laplace
(its optimisations take minutes per start on this model), written as ``robot_arm_quick*`` so
that it never mixes with the full results.
"""

from __future__ import annotations

import argparse
import time
import warnings
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

import numpy as np
import pandas as pd
import pymc as pm

import pymc_evidence as pm_evidence
from pymc_evidence.testing import ROBOT_ARM_LAYER, robot_arm_data, robot_arm_mlp

NOISE_SD = 0.05
RESULTS = Path(__file__).resolve().parent / "results"
NAME = "robot_arm"
#: Barber & Bishop's weight groups for the Gaussian approximation, with the output biases in the
#: hidden biases' group: alone, the data switch the two output biases off (α → ∞, γ → 0, where
#: eq. 11 does not apply), since the hidden units' biases can stand in for them.
GAUSSIAN_GROUPS = {"w_in": ["w_in"], "biases": ["b_hidden", "b_out"], "w_out": ["w_out"]}
GAUSSIAN_LAYER = pm_evidence.MLPLayer(weights="w_in", bias="b_hidden", output="w_out")
COLUMNS = [
    "h", "dim", "log_z_thermodynamic", "se_thermodynamic", "ti", "ti_se", "n_stages", "n_groups",
    "log_z_laplace", "laplace_modes", "laplace_optima", "log_symmetry",
    "test_error_thermodynamic", "test_error_laplace_map", "test_error_laplace_optima_mean",
    "test_error_floor", "test_set", "n_test", "seconds_thermodynamic", "seconds_laplace",
    "warnings",
]


def arm(x: np.ndarray) -> np.ndarray:
    """The noise-free robot-arm map (Barber & Bishop eq. 12), inputs (n, 2) → outputs (n, 2)."""
    x1, x2 = x[:, 0], x[:, 1]
    return np.column_stack([2.0 * np.cos(x1) + 1.3 * np.cos(x1 + x2),
                            2.0 * np.sin(x1) + 1.3 * np.sin(x1 + x2)])


def generated_test_set(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Barber & Bishop's test set: ``n`` new cases drawn by MacKay's prescription."""
    rng = np.random.default_rng(seed)
    magnitude = rng.uniform(0.453, 1.932, size=n)
    x1 = np.where(rng.uniform(size=n) < 0.5, -magnitude, magnitude)
    x = np.column_stack([x1, rng.uniform(0.534, 3.142, size=n)])
    return x, arm(x) + NOISE_SD * rng.standard_normal((n, 2))


def test_error(prediction: np.ndarray, y: np.ndarray) -> float:
    """Mean over cases and outputs of (prediction − y)² / σ²: 1.0 for the true function, on
    average (Barber & Bishop, Fig. 2b)."""
    return float(np.mean((prediction - y) ** 2) / NOISE_SD**2)


def network(weights: dict, x: np.ndarray) -> np.ndarray:
    """Outputs of the MLP for each draw: weights with leading dim K, inputs (n, 2) → (K, n, 2)."""
    hidden = np.tanh(np.einsum("ni,kih->knh", x, weights["w_in"]) + weights["b_hidden"][:, None])
    return np.einsum("knh,kho->kno", hidden, weights["w_out"]) + weights["b_out"][:, None]


def posterior_mean_prediction(posterior: dict, x: np.ndarray, chunk: int = 256) -> np.ndarray:
    """Average network output over the λ = 1 draws (posterior dict with dims (chain, draw, ...))."""
    flat = {k: np.reshape(posterior[k], (-1, *np.shape(posterior[k])[2:]))
            for k in ("w_in", "b_hidden", "w_out", "b_out")}
    total = np.zeros((len(x), 2))
    n = len(flat["w_in"])
    for start in range(0, n, chunk):
        part = {k: v[start : start + chunk] for k, v in flat.items()}
        total += network(part, x).sum(axis=0)
    return total / n


def gaussian_mlp(h: int, x: np.ndarray, y: np.ndarray):
    """The network of :func:`~pymc_evidence.testing.robot_arm_mlp` with fixed-precision Gaussian
    priors and noise σ = 0.05, the form MacKay's evidence framework needs. The precisions are
    only starting values (the gamma hyperpriors' means; both bias groups start at 1): the
    framework re-estimates them at every mode."""
    with pm.Model() as model:
        w_in = pm.Normal("w_in", 0.0, 1.0, shape=(x.shape[1], h))
        b_hidden = pm.Normal("b_hidden", 0.0, 1.0, shape=h)
        w_out = pm.Normal("w_out", 0.0, 1.0 / np.sqrt(h), shape=(h, y.shape[1]))
        b_out = pm.Normal("b_out", 0.0, 1.0, shape=y.shape[1])
        hidden = pm.math.tanh(pm.math.dot(x, w_in) + b_hidden)
        pm.Normal("y", pm.math.dot(hidden, w_out) + b_out, NOISE_SD, observed=y)
    return model


def _best_fitting(density, posterior: dict, n: int) -> np.ndarray:
    """The ``n`` distinct λ = 1 particles whose networks fit the training data best, as flat
    points of ``density`` (whose variables are the network's weights).

    They sit in the posterior's modes already, so the optimisations from them are short.
    """
    columns = [np.reshape(posterior[name], (-1, size))
               for name, size in zip(density.names, density.sizes)]
    X = np.unique(np.concatenate(columns, axis=1), axis=0)  # resampling duplicates particles
    return X[np.argsort(-density(X).log_likelihood)[:n]]


def run_laplace(h: int, posterior: dict, restarts: int, seed: int, x_test, y_test) -> dict:
    """MacKay's evidence framework summed over the modes, and the test errors at the modes."""
    start = time.perf_counter()
    x_train, y_train = robot_arm_data()[:2]
    model = gaussian_mlp(h, x_train, y_train)
    starts = _best_fitting(pm_evidence.get_density(model), posterior, restarts)
    result = pm_evidence.laplace(
        model, start=starts, restarts=0, framework="mackay", noise="y", groups=GAUSSIAN_GROUPS,
        mlp_layers=GAUSSIAN_LAYER, random_seed=seed, progressbar=False,
    )
    included = result.diagnostics["included"].to_numpy()
    errors = np.array([test_error(prediction, y_test)
                       for prediction in network(result.modes, x_test)])
    return {
        "log_z_laplace": result.log_evidence,
        "laplace_modes": int(included.sum()),
        "laplace_optima": len(starts),
        "log_symmetry": result.log_symmetry,
        # rows are best first; a mode left out of the sum has no evidence to rank it by
        "test_error_laplace_map": errors[0] if included[0] else np.nan,
        "test_error_laplace_optima_mean": float(np.mean(errors[included]))
        if included.any() else np.nan,
        "seconds_laplace": time.perf_counter() - start,
        "_warnings": result.warnings,
    }


def run_thermodynamic(model, options: dict, seed: int, checkpoint: Path):
    """Thermodynamic chaining, checkpointed after every stage (a finished run is reloaded)."""
    return pm_evidence.thermodynamic(
        model, mlp_layers=ROBOT_ARM_LAYER, random_seed=seed, progressbar=False,
        checkpoint=checkpoint, **options,
    )


def run_h(h: int, args, thermo_options: dict, x_test, y_test, checkpoint: Path) -> dict:
    model = robot_arm_mlp(h)
    seed = args.seed + h  # one independent stream per h, the same whatever else is run
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", pm_evidence.EvidenceWarning)
        result = run_thermodynamic(model, thermo_options, seed, checkpoint)
        laplace_row = (run_laplace(h, result.posterior, args.restarts, seed, x_test, y_test)
                       if args.restarts else {"_warnings": []})
    prediction = posterior_mean_prediction(result.posterior, x_test)
    messages = [f"thermodynamic: {w}" for w in result.warnings]
    messages += [f"laplace: {w}" for w in laplace_row.pop("_warnings")]
    return {
        "h": h,
        "dim": pm_evidence.get_density(model).dim,
        "log_z_thermodynamic": result.log_evidence,
        "se_thermodynamic": result.se,
        "ti": result.ti_log_evidence,
        "ti_se": result.ti_se,
        "n_stages": int(result.n_stages),
        "n_groups": int(result.n_groups),
        **laplace_row,
        "test_error_thermodynamic": test_error(prediction, y_test),
        "test_error_floor": test_error(arm(x_test), y_test),
        "test_set": args.test_set,
        "n_test": len(x_test),
        "seconds_thermodynamic": result.timing["total"],
        "warnings": " | ".join(messages),
    }


def _run_all(tasks, workers: int):
    """Rows of ``run_h`` for each task as they finish, in ``workers`` processes.

    Each h is an independent task with its own seed, so the table does not depend on
    ``workers``. The smallest h go first: an interrupted run leaves a curve from h = 1 up.
    """
    if workers == 1:
        yield from (run_h(*task) for task in tasks)
        return
    with ProcessPoolExecutor(workers) as pool:
        futures = [pool.submit(run_h, *task) for task in sorted(tasks, key=lambda t: t[0])]
        yield from (future.result() for future in as_completed(futures))


def plot_fig2(table: pd.DataFrame, path: Path) -> None:
    """Barber & Bishop Figs. 2–3: log evidence by chaining (±2 SE, Fig. 2a) and by the Gaussian
    approximation (Fig. 3a, on its own axis: eq. 11 holds up to a constant), and the normalised
    test errors against h (Figs. 2b, 3b)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    table = table.sort_values("h")
    fig, (chain, gauss, error) = plt.subplots(1, 3, figsize=(14, 3.8), layout="constrained")
    chain.errorbar(table["h"], table["log_z_thermodynamic"], yerr=2 * table["se_thermodynamic"],
                   fmt="o-", ms=4, capsize=3)
    chain.set_title("thermodynamic chaining (±2 SE)")
    gauss.plot(table["h"], table["log_z_laplace"], "s--", ms=4, color="tab:orange")
    gauss.set_title("Gaussian approximation (MacKay, modes summed)")
    for ax in (chain, gauss):
        ax.set_xlabel("hidden units h")
        ax.set_ylabel("log evidence ln p(D | h)")
    error.plot(table["h"], table["test_error_thermodynamic"], "o-", ms=4,
               label="posterior mean (chaining draws)")
    error.plot(table["h"], table["test_error_laplace_map"], "s--", ms=4,
               label="best Gaussian-approximation mode")
    error.plot(table["h"], table["test_error_laplace_optima_mean"], "^:", ms=4,
               label="mean over its modes")
    error.axhline(1.0, color="k", lw=0.8, label="theoretical minimum")
    error.plot(table["h"], table["test_error_floor"], color="0.5", ls="--", lw=0.8,
               label="true function on this test set")
    error.set_yscale("log")
    error.set_xlabel("hidden units h")
    error.set_ylabel("test error / σ²")
    error.legend(fontsize=8)
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_fig1(result, h: int, path: Path) -> None:
    """Barber & Bishop Fig. 1: evidence ratio per stage, E_λ[log L], energies near λ = 0.6."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(15, 3.8), layout="constrained")
    pm_evidence.plot_stages(result, ax=axes[:2])
    axes[0].set_title(f"h = {h}: {len(result.diagnostics)} stages")
    lam = result.diagnostics["lambda"].to_numpy()
    stage = int(np.argmin(np.abs(lam - 0.6)))
    pm_evidence.plot_trace_energy(result, stage=stage, ax=axes[2])
    axes[2].set_title(f"tracked chains at stage {stage}")
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv=None) -> pd.DataFrame:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--quick", action="store_true",
                        help="smoke test: h in {1, 2}, few particles and restarts")
    parser.add_argument("--hidden", type=int, nargs="+", default=None,
                        help="hidden units to run (default: 1..24, or 1 2 with --quick)")
    parser.add_argument("--target-se", type=float, default=0.3,
                        help="thermodynamic target standard error (nats; full mode)")
    parser.add_argument("--n-particles", type=int, default=None,
                        help="thermodynamic particles per group (default 256; 32 with --quick)")
    parser.add_argument("--n-groups", type=int, default=4,
                        help="thermodynamic groups in the first round (full mode)")
    parser.add_argument("--max-groups", type=int, default=32,
                        help="most thermodynamic groups when adding groups for --target-se")
    parser.add_argument("--target-cess", type=float, default=0.95,
                        help="thermodynamic adaptive ladder's conditional ESS (full mode): the "
                             "library's 0.8 anneals too fast for these multimodal posteriors")
    parser.add_argument("--restarts", type=int, default=None,
                        help="Gaussian-approximation optimisations, started at the best-fitting "
                             "λ = 1 particles; 0 skips it (default 16; 0 with --quick)")
    parser.add_argument("--test-set", choices=["mackay", "generated"], default="mackay",
                        help="MacKay's 400 test rows, or 1000 new cases (Barber & Bishop)")
    parser.add_argument("--test-seed", type=int, default=1997, help="seed of --test-set generated")
    parser.add_argument("--seed", type=int, default=0, help="base seed (h is added)")
    parser.add_argument("--diagnostics-h", type=int, default=None,
                        help="h of the Fig. 1 diagnostics (default: the largest h run)")
    parser.add_argument("--workers", type=int, default=1,
                        help="processes running different h at once (e.g. 2 on a 2-core machine)")
    parser.add_argument("--out", type=Path, default=RESULTS, help="output directory")
    parser.add_argument("--checkpoints", type=Path, default=None,
                        help="thermodynamic checkpoints (default: OUT/robot_arm_checkpoints)")
    args = parser.parse_args(argv)
    hidden = args.hidden or ([1, 2] if args.quick else list(range(1, 25)))
    if args.restarts is None:
        args.restarts = 0 if args.quick else 16
    args.checkpoints = args.checkpoints or args.out / f"{NAME}_checkpoints"
    if args.quick:
        thermo_options = {"n_particles": args.n_particles or 16, "n_groups": 2,
                          "target_se": None, "max_transitions": 3}
    else:
        thermo_options = {"n_particles": args.n_particles or 256, "n_groups": args.n_groups,
                          "max_groups": args.max_groups, "target_se": args.target_se,
                          "target_cess": args.target_cess}

    if args.test_set == "mackay":
        _, _, x_test, y_test = robot_arm_data()
    else:
        x_test, y_test = generated_test_set(1000, args.test_seed)

    # Quick runs get their own files, so a smoke test never mixes into (or skips) full results.
    stem = f"{NAME}_quick" if args.quick else NAME
    args.out.mkdir(parents=True, exist_ok=True)
    args.checkpoints.mkdir(parents=True, exist_ok=True)
    csv = args.out / f"{stem}.csv"
    rows = pd.read_csv(csv).to_dict("records") if csv.exists() else []
    done = {int(r["h"]) for r in rows if r["test_set"] == args.test_set}
    for h in sorted(set(hidden) & done):
        print(f"h={h}: already in {csv}, skipped")
    todo = [h for h in hidden if h not in done]
    tasks = [(h, args, thermo_options, x_test, y_test, args.checkpoints / f"{stem}_h{h}.ckpt")
             for h in todo]
    for row in _run_all(tasks, args.workers):
        rows.append(row)
        table = pd.DataFrame(rows, columns=COLUMNS).sort_values(["test_set", "h"])
        table.to_csv(csv, index=False, float_format="%.6g")
        print(f"h={row['h']}: log Z chaining {row['log_z_thermodynamic']:.2f} ± "
              f"{row['se_thermodynamic']:.2f}, Laplace {row.get('log_z_laplace', np.nan):.2f}; "
              f"test error {row['test_error_thermodynamic']:.3f} (posterior mean), "
              f"{row.get('test_error_laplace_map', np.nan):.3f} (MAP)", flush=True)

    table = pd.read_csv(csv)  # as saved, so a resumed run returns exactly the same table
    shown = table[(table["test_set"] == args.test_set) & table["h"].isin(hidden)]
    plot_fig2(shown, args.out / f"{stem}_fig2.png")
    h_diag = args.diagnostics_h or max(hidden)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", pm_evidence.EvidenceWarning)
        result = run_thermodynamic(robot_arm_mlp(h_diag), thermo_options, args.seed + h_diag,
                                   args.checkpoints / f"{stem}_h{h_diag}.ckpt")
    plot_fig1(result, h_diag, args.out / f"{stem}_fig1.png")
    return shown.sort_values("h").reset_index(drop=True)


if __name__ == "__main__":
    main()
