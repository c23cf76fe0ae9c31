"""Does thermodynamic's mode search, and the tempering from the best mode it finds, replace the
estimate when the particles fell short of the evidence, and only then?

For each MLP of ``mlp_calibration.py`` (Liang's example 1, H = 1…4; the robot arm, h = 1…4),
one default fit, ``pm_evidence.thermodynamic(model, random_seed=s)``, whose mode search
(``mode_search="auto"``, on because the layers are recognised) maximises log p(θ, D) after the
first round from 32 prior draws and from the 8 best particles, and then tempers from a
reference at the best mode found. The same fit without the search
(``mode_search=False``, from the same checkpoint: nothing is sampled twice) gives the SE before
it. Each row: the best log p(θ, D) from the prior draws and from the particles, the estimate
and SE before and after (after the tempering from a found mode, where it ran, with its levels),
the seconds of the search and that tempering beside the fit's, and the error against
``mlp_calibration.py``'s reference where it has one.

Written: ``benchmarks/results/mode_search.csv`` (one row per fit) and ``.md``.

Usage::

    python benchmarks/mode_search.py --checkpoints /tmp/ckpt              # hours on one core
    python benchmarks/mode_search.py --cases "h=3" --checkpoints /tmp/ckpt --csv /tmp/h3.csv
    python benchmarks/mode_search.py --cases none --merge /tmp/h3.csv      # rewrite the page

The checkpoints share ``mlp_calibration.py``'s names, so a default fit of either script is
reused by the other.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pymc as pm

import pymc_evidence as pm_evidence

sys.path.insert(0, str(Path(__file__).resolve().parent))
import mlp_calibration  # noqa: E402  (a sibling script: its models, checkpoints and reference)

ROOT = Path(__file__).resolve().parents[1]
CSV = ROOT / "benchmarks" / "results" / "mode_search.csv"
MARKDOWN = CSV.with_suffix(".md")


def run_case(name: str, seed: int, checkpoints: Path | None) -> dict:
    """One default fit of ``name`` with and without the mode search, as a row. The second
    call reads the first one's checkpoint (in a scratch directory without ``checkpoints``),
    so the fit is sampled once."""
    if checkpoints is None:
        with tempfile.TemporaryDirectory() as scratch:
            return run_case(name, seed, Path(scratch))
    build, _ = mlp_calibration.CASES[name]
    model = build()
    path = mlp_calibration._checkpoints(checkpoints, name, "defaults")
    options = dict(random_seed=seed, progressbar=False, cores=1, checkpoint=path(seed))
    begun = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", pm_evidence.EvidenceWarning)
        plain = pm_evidence.thermodynamic(model, mode_search=False, **options)
        fit_seconds = mlp_calibration._seconds(begun, plain)
        searched = pm_evidence.thermodynamic(model, **options)
    # the search leaves the estimate alone unless the tempering from the mode it found replaced it
    assert (searched.log_evidence == plain.log_evidence
            or np.isfinite(searched.log_evidence_from_prior))
    return {
        "case": name, "dim": pm_evidence.get_density(model).dim, "seed": seed,
        "log_z_before": plain.log_evidence, "se_before": plain.se,
        "log_z": searched.log_evidence, "se": searched.se,
        "best_from_prior": searched.best_log_joint_from_prior,
        "best_from_particles": searched.best_log_joint_from_particles,
        "search_seconds": searched.timing.get("mode_search", np.nan),
        "reference_levels": "; ".join(
            f"{sweeps}: {z:.2f} ± {se:.2f}" for sweeps, z, se in zip(
                searched.reference_sweeps, searched.reference_log_evidence,
                searched.reference_se)),
        "reference_seconds": searched.timing.get("reference", np.nan),
        "fit_seconds": fit_seconds,
        "warned": any("never reached" in w or "in proportion" in w for w in searched.warnings),
    }


def summarise(table: pd.DataFrame, command: str) -> str:
    calibration = pd.read_csv(mlp_calibration.CSV)
    lines = [
        "# Thermodynamic's mode search on Bayesian MLPs",
        "",
        f"Written by `{command}` on {datetime.date.today()} (Python {platform.python_version()}, "
        f"PyMC {pm.__version__}, {os.cpu_count()} cores); rows of fits not rerun are kept "
        "from earlier invocations.",
        "",
        "One default fit per model (`thermodynamic(model, random_seed=s)`), its mode search "
        "after the first round maximising log p(θ, D) from 32 prior draws and from the 8 best "
        "particles (trust-region Newton on the exact Hessian). 'From prior' and 'from "
        "particles': the best log p(θ, D) each reached; a gap of more than a nat is a mode the "
        "particles never reached. On an MLP the tempering then runs again from a reference at "
        "the best mode found; 'levels' are its estimates after each relaxation (sweeps: log Z "
        "± SE), doubled until two doublings agree or, when the particles reached the mode, "
        "until the first agrees with the first round's estimate. It replaces the estimate "
        "('from': mode) when the particles never reached the mode, or when its last level "
        "lies more than 2 combined SE above the first round's estimate; otherwise the "
        "estimate is the tempering from the prior's ('from': prior) and the levels are a "
        "cross-check. Rows with a gap below a nat and no levels were made when that "
        "tempering ran only after a gap. "
        "Before: the fit without the search. Reference and z (error in units of the SE, the "
        "reference's SE in quadrature): `mlp_calibration.md`'s, where it has one. Seconds: one "
        "core, often shared with another benchmark; 'mode s' is the search and the tempering "
        "from the mode.",
        "",
        "| model | d | seed | log Z before | SE before | from prior | from particles | gap "
        "| levels | from | log Z | SE | reference | z | mode s | fit s |",
        "|---|--:|--:|--:|--:|--:|--:|--:|---|---|--:|--:|--:|--:|--:|--:|",
    ]
    for row in table.itertuples():
        ref, ref_se, _ = mlp_calibration.reference(calibration[calibration["case"] == row.case])
        z = (row.log_z - ref) / np.hypot(row.se, ref_se) if np.isfinite(ref) else np.nan
        mode_seconds = row.search_seconds + np.nan_to_num(row.reference_seconds)
        levels = row.reference_levels if isinstance(row.reference_levels, str) else ""
        lines.append(
            f"| {row.case} | {row.dim} | {row.seed} | {row.log_z_before:.2f} | "
            f"{row.se_before:.2f} | {row.best_from_prior:.2f} | {row.best_from_particles:.2f} | "
            f"{round(row.best_from_prior - row.best_from_particles, 1) + 0.0:.1f} | {levels} | "
            f"{'prior' if row.log_z == row.log_z_before else 'mode'} | "
            f"{row.log_z:.2f} | {row.se:.2f} | "
            f"{_cell(ref, '.3f')} | {_cell(z, '+.2f')} | {mode_seconds:.0f} | "
            f"{row.fit_seconds:.0f} |"
        )
    lines += ["", "Each fit's numbers: `mode_search.csv`.", ""]
    notes = _notes()
    return "\n".join(lines) + (("\n" + notes) if notes else "")


def _cell(value: float, spec: str = ".2f") -> str:
    return "" if not np.isfinite(value) else format(value, spec)


def _notes() -> str:
    """The hand-written Notes section of the page, kept when the table is rewritten."""
    if not MARKDOWN.exists():
        return ""
    text = MARKDOWN.read_text()
    start = text.find("## Notes")
    return text[start:] if start >= 0 else ""


def _merged(old: pd.DataFrame, new: pd.DataFrame) -> pd.DataFrame:
    if old.empty:
        return new.reset_index(drop=True)
    keys = ["case", "seed"]
    keep = ~old.set_index(keys).index.isin(new.set_index(keys).index)
    table = pd.concat([old[keep], new], ignore_index=True)
    order = {name: i for i, name in enumerate(mlp_calibration.CASES)}
    rank = [order[c] * 1000 + s for c, s in zip(table["case"], table["seed"])]
    return table.iloc[np.argsort(rank, kind="stable")].reset_index(drop=True)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    mlp_calibration.add_run_arguments(parser, CSV, "(default: a scratch directory per fit)")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    table = pd.read_csv(args.csv) if args.csv.exists() else pd.DataFrame()
    for name in mlp_calibration.CASES:
        if args.cases and not any(text in name for text in args.cases):
            continue
        row = run_case(name, args.seed, args.checkpoints)
        print(f"{name}: {row}", flush=True)
        table = _merged(table, pd.DataFrame([row]))
        table.to_csv(args.csv, index=False)
    for other in args.merge:
        table = _merged(table, pd.read_csv(other))
    table.to_csv(args.csv, index=False)
    if args.csv == CSV:
        MARKDOWN.write_text(summarise(table, " ".join(["python benchmarks/mode_search.py",
                                                       *argv])))
        print(MARKDOWN.read_text())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
