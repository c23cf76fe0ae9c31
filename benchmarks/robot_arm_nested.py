"""Nested sampling against thermodynamic chaining on the robot-arm Bayesian MLP.

For each number of hidden units h (ascending) this runs, on ``robot_arm_mlp(h)`` with
``mlp_layers=ROBOT_ARM_LAYER`` and ``random_seed=h``, one process, ``cores=1``:

* **nested**: ``pm_evidence.nested`` at its default ``n_live`` and ``num_inner_steps``, a fixed
  4 runs (``target_se=None``), on ``--cores`` processes (default 1; the same estimate);
* **thermodynamic**: chaining as ``robot_arm_curve.py`` runs it (64 particles × 4 groups,
  ``max_groups=4``, ``target_cess=0.95``, ``target_se=0.3``: the curve's settings and seeds).

Every run is checkpointed to ``DIR/{method}_h{h}.ckpt``: a killed invocation resumes where it
stopped, and finished runs return at once. After each finished run its row in
``benchmarks/results/robot_arm_nested.csv`` is written (replacing an older row for the same h and
method) and ``benchmarks/results/robot_arm_nested.md`` is rewritten from the CSV (keeping its
hand-written ``## Notes``). Nested sampling's
cost grows about as dim² × information, so h = 8 (47 parameters) may take hours.

Usage::

    python benchmarks/robot_arm_nested.py                      # h = 1 2 3 4 6 8, both methods
    python benchmarks/robot_arm_nested.py --hidden 1 --methods nested
    python benchmarks/robot_arm_nested.py --hidden 4 --methods nested --cores 2
"""

from __future__ import annotations

import argparse
import datetime
import math
import os
import platform
import sys
import time
import warnings
from pathlib import Path

import pandas as pd

import pymc_evidence as pm_evidence
from pymc_evidence.testing import ROBOT_ARM_LAYER, robot_arm_mlp

ROOT = Path(__file__).resolve().parents[1]
CSV = ROOT / "benchmarks" / "results" / "robot_arm_nested.csv"
MARKDOWN = CSV.with_suffix(".md")
CHECKPOINTS = ROOT / "benchmarks" / "checkpoints" / "robot_arm_nested"
METHODS = ("nested", "thermodynamic")
COLUMNS = ["h", "dim", "method", "log_z", "se", "seconds", "cores", "information", "insertion_z",
           "moves_per_dim", "run_log_evidence", "run_se", "warnings"]


def run(method: str, h: int, checkpoint: Path, cores: int = 1) -> dict:
    """One (h, method) run, resumed from ``checkpoint`` if it exists, as a CSV row.

    ``cores`` spreads nested sampling's independent runs over processes: the same estimate,
    and ``seconds`` becomes the wall time over those processes.
    """
    model = robot_arm_mlp(h)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", pm_evidence.EvidenceWarning)
        if method == "nested":
            result = pm_evidence.nested(
                model, mlp_layers=ROBOT_ARM_LAYER, target_se=None, n_runs=4, max_runs=4,
                moves_check=False, cores=cores, random_seed=h, progressbar=False,
                checkpoint=checkpoint,
            )
        else:
            result = pm_evidence.thermodynamic(
                model, mlp_layers=ROBOT_ARM_LAYER, n_particles=64, n_groups=4, max_groups=4,
                target_cess=0.95, target_se=0.3, random_seed=h, progressbar=False, cores=1,
                checkpoint=checkpoint,
            )
    row = {"h": h, "dim": pm_evidence.get_density(model).dim, "method": method,
           "log_z": result.log_evidence, "se": result.se,
           "seconds": result.timing["sampling"], "cores": cores if method == "nested" else 1,
           "warnings": " | ".join(result.warnings)}
    if method == "nested":
        row.update(information=result.information, insertion_z=result.insertion_z,
                   moves_per_dim=result.settings["num_inner_steps"] // row["dim"],
                   run_log_evidence=" ".join(f"{v:.4f}" for v in result.run_log_evidence),
                   run_se=" ".join(f"{v:.4f}" for v in result.run_se))
    return row


def store(row: dict) -> pd.DataFrame:
    """Write ``row`` into the CSV, replacing an earlier row for its (h, method)."""
    table = pd.DataFrame([row])
    if CSV.exists():
        old = pd.read_csv(CSV)
        old = old[(old["h"] != row["h"]) | (old["method"] != row["method"])]
        table = pd.concat([old, table], ignore_index=True)
    table = table.reindex(columns=COLUMNS).sort_values(["h", "method"]).reset_index(drop=True)
    table["cores"] = table["cores"].fillna(1).astype(int)  # rows from before the column: one
    table.to_csv(CSV, index=False)
    return table


def recombine() -> pd.DataFrame:
    """The CSV with each nested row's log Z and SE recomputed from its runs."""
    from types import SimpleNamespace

    from pymc_evidence.estimators.nested import _combine

    table = pd.read_csv(CSV)
    for i, row in table[table["method"] == "nested"].iterrows():
        runs = [SimpleNamespace(log_z=float(z), log_z_se=float(se)) for z, se in
                zip(row["run_log_evidence"].split(), row["run_se"].split())]
        table.loc[i, ["log_z", "se"]] = _combine(runs)[:2]
    table.to_csv(CSV, index=False)
    return table


def _estimate(row) -> str:
    return "" if row is None else f"{row['log_z']:.2f} ± {row['se']:.2f}"


def _number(row, column: str, fmt: str) -> str:
    return "" if row is None or pd.isna(row[column]) else format(row[column], fmt)


def _seconds(row) -> str:
    """Sampling seconds; wall time over the processes, said so, where the runs had several."""
    if row is None:
        return ""
    cores = row.get("cores", 1)
    cores = 1 if pd.isna(cores) else int(cores)
    return f"{row['seconds']:.0f}" + (f" ({cores} cores)" if cores > 1 else "")


def summarise(table: pd.DataFrame, command: str) -> str:
    """The Markdown report: one table row per h, both methods side by side."""
    import pymc as pm

    lines = [
        "# Nested sampling against thermodynamic chaining on the robot-arm MLP",
        "",
        f"Written by `benchmarks/robot_arm_nested.py` on {datetime.date.today()} "
        f"(Python {platform.python_version()}, PyMC {pm.__version__}, {os.cpu_count()} cores); "
        f"last command `{command}`. Rows come from `robot_arm_nested.csv` (per-run values and "
        "warnings there); rows may come from different invocations of the script.",
        "",
        "Both methods: `robot_arm_mlp(h)`, `mlp_layers=ROBOT_ARM_LAYER`, `random_seed=h`, "
        "`cores=1` (nested: its runs on several processes where the seconds say so, which "
        "then are wall time), one method at a time. Nested: default `n_live` (max(100, 25 d)) and "
        "`num_inner_steps` (the default of the version that made the row; moves: "
        "slice moves per replacement), 4 runs, `target_se=None`. Chaining: 64 "
        "particles × 4 groups, `target_cess=0.95`, as `robot_arm_curve.py`. Seconds: "
        "sampling, summed over the parts of a resumed run. "
        "H: information (nats). Δ/σ: (nested − chaining) / √(se_n² + se_c²).",
        "",
        "| h | dim | nested log Z | moves | nested s | H | insertion z | chaining log Z "
        "| chaining s | Δ/σ |",
        "|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|",
    ]
    for h, rows in table.groupby("h"):
        by_method = {row["method"]: row for _, row in rows.iterrows()}
        nested, chaining = by_method.get("nested"), by_method.get("thermodynamic")
        z = ""
        if nested is not None and chaining is not None:
            z = format((nested["log_z"] - chaining["log_z"])
                       / math.hypot(nested["se"], chaining["se"]), "+.1f")
        lines.append(
            f"| {h} | {rows['dim'].iloc[0]} | {_estimate(nested)} "
            f"| {_number(nested, 'moves_per_dim', '.0f')}{' d' if nested is not None else ''} "
            f"| {_seconds(nested)} | {_number(nested, 'information', '.1f')} "
            f"| {_number(nested, 'insertion_z', '+.2f')} | {_estimate(chaining)} "
            f"| {_number(chaining, 'seconds', '.0f')} | {z} |"
        )
    earlier = MARKDOWN.read_text() if MARKDOWN.exists() else ""
    notes = (earlier[earlier.index("## Notes"):] if "## Notes" in earlier
             else "## Notes\n\n(to be written by hand after the run)\n")
    return "\n".join(lines) + "\n\n" + notes


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hidden", type=int, nargs="+", default=[1, 2, 3, 4, 6, 8])
    parser.add_argument("--methods", nargs="+", choices=METHODS, default=list(METHODS))
    parser.add_argument("--checkpoints", type=Path, default=CHECKPOINTS)
    parser.add_argument("--cores", type=int, default=1,
                        help="processes for nested sampling's runs (same estimate; seconds "
                        "are then wall time, not time on one core)")
    parser.add_argument("--recombine", action="store_true",
                        help="no sampling: recompute every nested row's log Z and SE from its "
                        "runs with the installed version's combination of runs")
    args = parser.parse_args(argv)
    command = " ".join(["python benchmarks/robot_arm_nested.py", *argv])
    if args.recombine:
        MARKDOWN.write_text(summarise(recombine(), command))
        return 0
    args.checkpoints.mkdir(parents=True, exist_ok=True)
    CSV.parent.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    for h in sorted(args.hidden):
        for method in (m for m in METHODS if m in args.methods):
            row = run(method, h, args.checkpoints / f"{method}_h{h}.ckpt", args.cores)
            MARKDOWN.write_text(summarise(store(row), command))
            extra = (f", H {row['information']:.1f}, insertion z {row['insertion_z']:+.2f}"
                     if method == "nested" else "")
            print(f"h={h} (dim {row['dim']}) {method}: log Z {row['log_z']:.2f} ± "
                  f"{row['se']:.2f}{extra}, {row['seconds']:.0f} s sampling; "
                  f"{(time.perf_counter() - start) / 60:.1f} min elapsed", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
