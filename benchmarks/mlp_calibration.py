"""Are thermodynamic chaining's error bars honest on Bayesian MLPs, at the defaults a user gets?

For each MLP, ``pm_evidence.thermodynamic(model, random_seed=s)`` with every default over
several seeds (the layers are recognised in the graph, hence the MLP ladder
``target_cess=0.95``, the effort check and the mode search), against a reference that does not share chaining's
failure modes:

* on Liang's MLPs and the robot arm with h = 1…3, importance sampling (role
  "importance", :mod:`_importance`): a proposal fitted to posterior draws and made symmetric
  over the units' signed permutations, with the prior as a defensive component — no
  tempering, no constrained moves, no alignment; on the robot arm, of the same model with its
  gamma precisions integrated out analytically (:mod:`_collapsed_robot_arm`), so that no
  scale's ridge separates the proposal from the posterior, and from h = 3 with draws from
  each basin an optimiser finds there (:mod:`_basin_draws`) beside the pilot's;
* chaining with 8 times the particles of the default first round (4 groups of 2048), the MLP's
  layers given, the effort check off (two seeds), and
* nested sampling (``pm_evidence.nested``, the layers given): four runs at its defaults and
  (role "nested 8x") two with eight times the live points,

the last two shown against the first where it was run, otherwise combined by inverse
variance. Every fit's error is reported in units of its own SE (the reference's SE added in
quadrature), and the same seeds with twice the particles (``n_particles=512``) show whether the
estimate still moves with effort. On the robot arm the
"ladder 0.8" roles repeat the fits and their doubling with ``target_cess=0.8``, the ladder of
every model without MLP layers, to show what the finer one changes; "ladder 0.8, chaining 8x"
is the long chaining at that ladder, shown but not part of the reference. On Liang's MLP the
"unaligned" roles repeat the fits and their doubling with ``mlp_layers=None`` (no alignment,
hence also the general ladder and no effort check), what a model gets whose layers are not
recognised.

Models: Liang's example-1 MLP (``liang_mlp(H, *liang_data(seed=1))``, output weights
integrated out, H = 1…4) and the robot-arm MLP (``robot_arm_mlp(h)``, Neal-style gamma
hyperpriors, h = 1…4).

Written: ``benchmarks/results/mlp_calibration.csv`` (one row per run) and ``.md``.

Usage::

    python benchmarks/mlp_calibration.py                          # hours on 2 cores
    python benchmarks/mlp_calibration.py --cases "Liang" --roles defaults doubled
    python benchmarks/mlp_calibration.py --cases "h=2" --roles defaults --seeds 2 --first-seed 4
    python benchmarks/mlp_calibration.py --cases "h=3" --roles nested --checkpoints /tmp/ckpt
    python benchmarks/mlp_calibration.py --cases "h=4" --roles "chaining 8x" --seeds 1 --first-seed 2
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import pandas as pd

import pymc_evidence as pm_evidence
from pymc_evidence import MLPLayer
from pymc_evidence.estimators._stepping_stone import stepping_stone
from pymc_evidence.testing import ROBOT_ARM_LAYER, liang_data, liang_mlp, robot_arm_mlp

from _basin_draws import basin_draws  # this directory: first on sys.path
from _collapsed_robot_arm import CollapsedRobotArm
from _importance import COMPONENTS, N_DRAWS, importance_from_aligned, importance_log_evidence

ROOT = Path(__file__).resolve().parents[1]
CSV = ROOT / "benchmarks" / "results" / "mlp_calibration.csv"
MARKDOWN = CSV.with_suffix(".md")
LIANG_LAYER = MLPLayer("z_in", bias="z_bias")
CASES = {
    **{f"Liang H={h}": (lambda h=h: liang_mlp(h, *liang_data(seed=1)), LIANG_LAYER)
       for h in (1, 2, 3, 4)},
    **{f"robot arm h={h}": (lambda h=h: robot_arm_mlp(h), ROBOT_ARM_LAYER) for h in (1, 2, 3, 4)},
}
#: Where importance sampling is a reference. On the robot arm it samples the model with the
#: gamma precisions integrated out (:mod:`_collapsed_robot_arm`): in the non-centred
#: parameters they put the posterior far from a t mixture (ESS 220 of 100,000 at h = 1).
IMPORTANCE_CASES = [name for name in CASES if name.startswith("Liang")] + [
    "robot arm h=1", "robot arm h=2", "robot arm h=3"]
#: From this many hidden units the robot arm's proposal is also fitted to draws from each basin
#: an optimiser finds (:mod:`_basin_draws`), from this many prior draws and as many of the
#: pilot's draws, with a component per basin: at h = 3 the pilot's draws alone left an ESS
#: of 5–12 of 400,000.
BASIN_HIDDEN_UNITS, BASIN_STARTS = 3, 200
#: References known to be low, with why: the table gives no z against them.
STALE_REFERENCES = {
    "robot arm h=4": "stale: made with the stall rule; the evidence is at least 159.5",
}
ROLES = ("defaults", "doubled", "importance", "chaining 8x", "nested", "nested 8x", "ladder 0.8",
         "ladder 0.8, doubled", "ladder 0.8, chaining 8x", "unaligned", "unaligned, doubled")
#: Roles of rows this script no longer makes: the robot arm's default fits at h ≥ 2 from
#: versions whose precisions HMC alone moved (before the scale moves).
RECORDED_ROLES = ("defaults, HMC alone",)
#: The settings calibrated: fits, the same seeds with twice the particles, and a short label.
SETTINGS = {"defaults": ("doubled", "defaults"),
            "defaults, HMC alone": ("doubled", "defaults before the scale moves (HMC alone)"),
            "ladder 0.8": ("ladder 0.8, doubled", "`target_cess=0.8`"),
            "unaligned": ("unaligned, doubled", "`mlp_layers=None`")}


def run_role(role: str, model, layer, seeds: range | None, dim: int, checkpoint=None):
    """Yield one row per fit (per nested run) as it finishes: log Z, SE, seconds, effort-check
    levels, warnings. ``seeds``: the fits' seeds (None: 1…5, long chaining and importance 1
    and 2; nested runs take their own). ``checkpoint(seed)``, if given, names the file a fit
    (nested: its runs, seed None) saves to and resumes from; seconds then include the earlier
    sessions' sampling."""
    checkpoint = checkpoint or (lambda seed: None)
    if role.startswith("nested"):
        begun = time.perf_counter()
        # 8x: eight times nested's default live points, max(100, 25 d), in two runs
        eightfold = role == "nested 8x"
        runs, n_live, seed = (2, 8 * max(100, 25 * dim), 11) if eightfold else (4, None, 200)
        # Runs at one number of moves, each a row (nested_moves_check.py studies the check).
        result = pm_evidence.nested(model, mlp_layers=layer, n_live=n_live, n_runs=runs,
                                    max_runs=runs, target_se=None, moves_check=False,
                                    random_seed=seed, progressbar=False, cores=1,
                                    checkpoint=checkpoint(None))
        seconds = _seconds(begun, result) / result.n_runs
        for run, (log_z, se) in enumerate(zip(result.run_log_evidence, result.run_se)):
            yield {"seed": run, "log_z": log_z, "se": se, "seconds": seconds,
                   "effort": "", "warnings": " | ".join(result.warnings)}
        return
    if role == "importance":
        yield from _importance_rows(model, layer, seeds or (1, 2),
                                    collapsed=layer is ROBOT_ARM_LAYER)
        return
    # A reference at a fixed effort: four groups of 2048 and no more (max_groups), however
    # they spread.
    long = dict(n_particles=2048, mlp_layers=layer, effort_check=False, target_se=None,
                max_groups=4)
    options = {
        "defaults": dict(),
        "doubled": dict(n_particles=512),
        "chaining 8x": long,
        "ladder 0.8": dict(target_cess=0.8),
        "ladder 0.8, doubled": dict(target_cess=0.8, n_particles=512),
        "ladder 0.8, chaining 8x": dict(long, target_cess=0.8),
        "unaligned": dict(mlp_layers=None),
        "unaligned, doubled": dict(mlp_layers=None, n_particles=512),
    }[role]
    default_seeds = range(1, 3 if role.endswith("chaining 8x") else 6)
    for seed in default_seeds if seeds is None else seeds:
        begun = time.perf_counter()
        result = pm_evidence.thermodynamic(model, random_seed=seed, progressbar=False, cores=1,
                                           checkpoint=checkpoint(seed), **options)
        effort = " ".join(f"{p}x{t}:{z:.3f}±{s:.3f}" for p, t, z, s in zip(
            result.effort_particles, result.effort_transitions, result.effort_log_evidence,
            result.effort_se))
        # the SE's parts, so that a change of its law can be scored on these fits
        yield {"seed": seed, "log_z": result.log_evidence, "se": result.se,
               "seconds": _seconds(begun, result), "effort": effort,
               "warnings": " | ".join(result.warnings), "groups": result.n_groups,
               "se_within": result.se_within, "se_between": result.se_between}


def _seconds(begun: float, result) -> float:
    """Wall seconds of this call plus the sampling of earlier sessions of a resumed fit."""
    return time.perf_counter() - begun + result.timing.get("earlier_sessions", 0.0)


def _importance_rows(model, layer, seeds, collapsed=False):
    """Importance-sampling estimates (:mod:`_importance`), one per seed, each with its own
    proposal fitted to a chaining run's λ = 1 particles; ``collapsed``: of the robot-arm MLP
    with its precisions integrated out (:mod:`_collapsed_robot_arm`), from the particles'
    weights and, from ``BASIN_HIDDEN_UNITS`` units, from the basins an optimiser finds."""
    density = pm_evidence.get_density(model)
    shapes = dict(zip(density.names, density.shapes))
    hidden_units = layer.hidden_units(shapes)
    for seed in seeds:
        begun = time.perf_counter()
        pilot = pm_evidence.thermodynamic(model, mlp_layers=layer, effort_check=False,
                                          target_se=None, random_seed=1000 + seed,
                                          progressbar=False, cores=1)
        posterior = {k: np.asarray(v).reshape((-1,) + v.shape[2:])
                     for k, v in pilot.posterior.items()}
        rng = np.random.default_rng(seed)
        note = ""
        if collapsed:
            weights = CollapsedRobotArm(hidden_units)
            draws, components = weights.flat(posterior), COMPONENTS
            if hidden_units >= BASIN_HIDDEN_UNITS:
                starts = np.concatenate([
                    weights.prior_draws(rng, BASIN_STARTS),
                    draws[rng.choice(len(draws), BASIN_STARTS, replace=False)]])
                from_basins, basins = basin_draws(weights, starts, rng)
                draws, components = np.concatenate([from_basins, draws]), len(basins) + 1
                note = f"; {len(basins)} basins, best log p(w, D) {basins[0]:.2f}"
            log_z, se, ess = importance_from_aligned(
                weights, weights.align(draws), weights.symmetry_group(), rng,
                components=components)
        else:
            log_z, se, ess = importance_log_evidence(density, layer, hidden_units,
                                                     density.from_constrained(posterior), rng)
        yield {"seed": seed, "log_z": log_z, "se": se, "seconds": time.perf_counter() - begun,
               "effort": "", "warnings": f"ESS {ess:.0f} of {N_DRAWS}{note}"}


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_run_arguments(parser, CSV, "(fits of hours that a session limit may cut)")
    parser.add_argument("--roles", nargs="+", default=list(ROLES), choices=ROLES)
    parser.add_argument("--seeds", type=int, default=None,
                        help="fits per model and role (default 5; long chaining and "
                             "importance 2)")
    parser.add_argument("--first-seed", type=int, default=1,
                        help="with --seeds: seed of the first fit (to add fits to earlier ones)")
    args = parser.parse_args(argv)
    if args.seeds is None and args.first_seed != 1:
        parser.error("--first-seed needs --seeds (how many fits from it)")
    rows = []
    seeds = None if args.seeds is None else range(args.first_seed, args.first_seed + args.seeds)
    for name, (build, layer) in CASES.items():
        if args.cases and not any(text in name for text in args.cases):
            continue
        model = build()
        dim = pm_evidence.get_density(model).dim
        for role in args.roles:
            if role == "importance" and name not in IMPORTANCE_CASES:
                continue
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", pm_evidence.EvidenceWarning)
                for row in run_role(role, model, layer, seeds, dim,
                                    _checkpoints(args.checkpoints, name, role)):
                    rows.append({"case": name, "dim": dim, "role": role, **row})
                    print(f"{name}: {role}, {row['seed']}: {row['log_z']:.2f} ± {row['se']:.2f} "
                          f"({row['seconds']:.0f} s) {row['effort']}", flush=True)
                    _merged(args.csv, pd.DataFrame(rows)).to_csv(args.csv, index=False)
    table = _merged(args.csv, pd.DataFrame(columns=["case", "role", "seed"]))
    for other in args.merge:
        table = _merged_frames(table, pd.read_csv(other))
    table.to_csv(args.csv, index=False)
    if args.csv == CSV:
        MARKDOWN.write_text(summarise(table, " ".join(
            ["python benchmarks/mlp_calibration.py", *argv])))
        print(MARKDOWN.read_text())
    return 0


def add_run_arguments(parser: argparse.ArgumentParser, csv: Path, checkpoints_note: str):
    """The options this script shares with the ones that reuse its models and checkpoints:
    which cases, where the rows go, the checkpoints' directory, other processes' rows."""
    parser.add_argument("--cases", nargs="+", default=None, metavar="TEXT",
                        help="run only the models whose name contains one of these")
    parser.add_argument("--csv", type=Path, default=csv,
                        help="where to merge the rows (a second process running at the same "
                        "time needs its own file; merge them with --merge)")
    parser.add_argument("--checkpoints", type=Path, default=None, metavar="DIR",
                        help="save every fit to a checkpoint in DIR and resume from it "
                        + checkpoints_note)
    parser.add_argument("--merge", nargs="*", type=Path, default=[],
                        help="CSV files of other processes to merge into --csv before the "
                        "summary is written")


def _checkpoints(directory: Path | None, name: str, role: str):
    """``seed -> path`` of the checkpoint of one fit of ``name`` and ``role`` in
    ``directory``, or None without a directory."""
    if directory is None:
        return None
    directory.mkdir(parents=True, exist_ok=True)
    return lambda seed: directory / f"{name} {role} {seed}.ckpt".replace(" ", "_")


def _merged(path: Path, new: pd.DataFrame) -> pd.DataFrame:
    """The rows of ``path`` (if it exists) with those of ``new`` replacing the same
    (case, role, seed)."""
    return _merged_frames(pd.read_csv(path) if path.exists() else new.iloc[:0], new)


def _merged_frames(old: pd.DataFrame, new: pd.DataFrame) -> pd.DataFrame:
    keys = ["case", "role", "seed"]
    keep = ~old.set_index(keys).index.isin(new.set_index(keys).index)
    table = pd.concat([old[keep], new], ignore_index=True)
    if table.empty:
        return table
    # concatenating with an empty frame turns integer columns into floats
    table[["dim", "seed"]] = table[["dim", "seed"]].astype(int)
    order = {name: i for i, name in enumerate(CASES)}
    roles = ROLES + RECORDED_ROLES
    rank = [order[c] * len(roles) + roles.index(r) for c, r in zip(table["case"], table["role"])]
    return table.iloc[np.argsort(rank, kind="stable")].reset_index(drop=True)


def pooled(runs: pd.DataFrame) -> tuple[float, float]:
    """Mean log Z of independent fits and its SE: the larger of their own errors combined
    and their spread."""
    count = len(runs)
    sd = runs["log_z"].std(ddof=1) if count > 1 else 0.0
    return runs["log_z"].mean(), max(sd / np.sqrt(count),
                                     float(np.sqrt(np.sum(runs["se"] ** 2))) / count)


def pooled_evidence(runs: pd.DataFrame) -> tuple[float, float]:
    """Log of the mean evidence of independent chaining fits of equally many groups, and its
    SE: the fits pooled as ``thermodynamic`` pools its groups (each fit's SE as its
    within-group error). The mean log Z runs low when the fits' errors have a heavy upper
    tail (a rare group that finds better modes), as on the robot arm with h = 4."""
    if len(runs) == 1:  # a spread needs two fits; one gives its own estimate
        return float(runs["log_z"].iloc[0]), float(runs["se"].iloc[0])
    estimate = stepping_stone(runs["log_z"].to_numpy()[:, None],
                              runs["se"].to_numpy()[:, None] ** 2)
    return estimate.log_evidence, estimate.se


def reference(rows: pd.DataFrame):
    """(log Z, SE, note). Importance sampling where it was run: it shares nothing with the
    fits (no tempering, no constrained moves, no alignment), and the note gives how far long
    chaining and nested sampling sit from it, in their combined SE. Elsewhere chaining 8x and
    nested sampling (its runs at the default and at 8 times the live points pooled
    separately, then combined; the chaining fits' evidences averaged, as their groups would
    be), combined by inverse variance, or the one that exists; the
    note gives nested minus chaining in their combined SE. None (NaN) for a case in
    ``STALE_REFERENCES``, the note saying why."""
    if len(rows) and rows["case"].iloc[0] in STALE_REFERENCES:
        return np.nan, np.nan, STALE_REFERENCES[rows["case"].iloc[0]]
    pool = {"chaining 8x": pooled_evidence, "nested": pooled, "nested 8x": pooled}
    parts = {role: pool[role](rows[rows["role"] == role])
             for role in pool if (rows["role"] == role).any()}
    nested = [parts.pop(role) for role in ("nested", "nested 8x") if role in parts]
    if nested:
        parts["nested"] = _inverse_variance(nested)
    if (rows["role"] == "importance").any():
        value, se = pooled(rows[rows["role"] == "importance"])
        others = [f"{role} {(v - value) / np.hypot(s, se):+.1f} SE"
                  for role, (v, s) in parts.items()]
        return value, se, "IS" + "".join(f"; {other}" for other in others)
    if not parts:
        return np.nan, np.nan, "no reference"
    if len(parts) == 1:
        (role, (value, se)), = parts.items()
        return value, se, f"{role} only"
    (c, c_se), (n, n_se) = parts["chaining 8x"], parts["nested"]
    value, se = _inverse_variance([(c, c_se), (n, n_se)])
    return value, se, f"Δ {(n - c) / np.hypot(c_se, n_se):+.1f} SE"


def _inverse_variance(estimates) -> tuple[float, float]:
    values, ses = np.array(estimates, dtype=float).T
    weights = ses ** -2.0
    return float(np.dot(weights, values) / weights.sum()), float(weights.sum() ** -0.5)


def level_chi_square(efforts: pd.Series) -> tuple[float, int]:
    """Chi-square of the effort checks' first two levels against each other, and the number of
    pairs: Σ (log Z₁ − log Z₂)² / (SE₁² + SE₂²). The two levels of a fit are independent runs
    (their own seeds; twice the transitions per stage, or in older rows twice the particles
    per group), so this tests their SEs without any reference; it is about the number of pairs
    when the SEs are honest."""
    chi_square, pairs = 0.0, 0
    for effort in efforts.fillna(""):
        levels = [level.split(":")[1].split("±") for level in effort.split()]
        if len(levels) > 1:
            (a, a_se), (b, b_se) = (map(float, level) for level in levels[:2])
            chi_square += (a - b) ** 2 / (a_se ** 2 + b_se ** 2)
            pairs += 1
    return chi_square, pairs


def _setting_row(fits, doubled, ref, ref_se, note, label) -> str:
    """The table's cells after the model's for one setting's fits against the reference."""
    z = (fits["log_z"] - ref) / np.hypot(fits["se"], ref_se)
    levels = fits["effort"].fillna("").str.split()
    checked, moved = int((levels.str.len() > 1).sum()), int((levels.str.len() > 2).sum())
    chi_square, pairs = level_chi_square(fits["effort"])
    level_cell = f"{chi_square:.1f} / {pairs}" if pairs else ""
    doubling = ""
    if not doubled.empty:
        (a, a_se), (b, b_se) = pooled(fits), pooled(doubled)
        doubling = f"{(b - a) / np.hypot(a_se, b_se):+.1f}"
    mean, _ = pooled(fits)
    if np.isnan(ref):
        calibration = f" | {note} | {label} | {mean:.2f} | {fits['se'].median():.2f} |  |  |  | "
    else:
        calibration = (f"{ref:.3f} ± {ref_se:.3f} | {note} | {label} | {mean:.2f} | "
                       f"{fits['se'].median():.2f} | {np.abs(z).mean():.2f} | "
                       f"{np.abs(z).max():.2f} | {int((np.abs(z) <= 2).sum())}/{len(z)} | "
                       f"{z.mean():+.2f}")
    return (f"{calibration} | {checked}/{len(fits)} ({moved}) | {level_cell} | {doubling} | "
            f"{fits['seconds'].mean():.0f} |")


def summarise(table: pd.DataFrame, command: str) -> str:
    import pymc as pm

    lines = [
        "# Chaining's error bars on Bayesian MLPs, at the defaults",
        "",
        f"Written by `{command}` on {datetime.date.today()} (Python "
        f"{platform.python_version()}, PyMC {pm.__version__}, {os.cpu_count()} cores); rows "
        "of models and roles not rerun are kept from earlier invocations.",
        "",
        "Defaults: `thermodynamic(model, random_seed=s)` (s = 1, 2, …; the table counts the "
        "fits), every other argument at its default: the layers recognised in the graph (on "
        "Liang's MLP one whose output weights are integrated out), hence the MLP ladder "
        "`target_cess=0.95`, the effort check and the mode search (fits made before the "
        "search existed have the same estimate; of one fit of each of Liang's MLPs and the "
        "robot arm with h = 1…4 it widened h = 3's SE only, `mode_search.md`). "
        "`target_cess=0.8` rows, where run: the "
        "robot arm's fits with that ladder; "
        "`mlp_layers=None` rows: Liang's without alignment (hence also the general ladder 0.8 "
        "and no effort check), for comparison; 'defaults before the scale moves': the robot "
        "arm's fits at h ≥ 2 made at the defaults of versions whose precisions HMC alone "
        "moved. Reference (on Liang's MLPs and the robot arm with h = 1…3): importance "
        "sampling, 400,000 draws per estimate (two estimates pooled where both ran) from a "
        "symmetrised t mixture fitted to "
        "posterior draws (`benchmarks/_importance.py`; on the robot arm of the model with its "
        "precisions integrated out, `benchmarks/_collapsed_robot_arm.py`, from h = 3 with "
        "draws from each basin an optimiser finds there too, `benchmarks/_basin_draws.py`), "
        "which shares nothing with the fits; "
        "'others' gives how far long chaining (4 groups of 2048 particles at the defaults' "
        "ladder, the layers given, two seeds; four at the robot arm's h = 4) and nested "
        "sampling (the layers given; four runs "
        "at its defaults and, where run, two with 8 times the live points) sit from it, in "
        "their combined SE. Elsewhere those two, each pooled (nested: mean log Z; chaining: log "
        "of the mean Z, as the estimator pools groups, since the mean log Z runs low when a "
        "rare group finds better modes; SE the larger of the fits' own errors combined and "
        "their spread), are combined by inverse variance, and "
        "'others' is nested minus chaining in their combined SE. z: a fit's error against the "
        "reference in units of "
        "its own SE and the reference's in quadrature. Doubled: the same seeds and ladder with "
        "`n_particles=512`; 'moved' is the doubled fits' mean minus the fits' in their combined "
        "SE. Levels: the effort checks' first two levels (independent runs with twice the HMC "
        "transitions per stage, in the csv `particles x transitions per particle:log Z±SE`; "
        "fits made before the check doubled the moves ran 256 and 512 particles per group, "
        "or where the groups were resized the size chosen and twice it, and store "
        "`particles:log Z±SE`) against each other, Σ (log Z₁ − log Z₂)² / (SE₁² + SE₂²) over the "
        "fits, which needs no reference and is about the number of pairs when the SEs are "
        "honest (levels are stored to 0.001 nats, in older rows to 0.01). Seconds: mean per "
        "fit, one core (often shared with another benchmark).",
        "",
        "| model | d | reference | others | setting | mean log Z | median SE | mean \\|z\\| "
        "| max \\|z\\| | within 2 SE | mean z | effort checks (moved) | levels: χ² / pairs "
        "| doubled: moved | s per fit |",
        "|---|--:|--:|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|",
    ]
    for name, rows in table.groupby("case", sort=False):
        ref, ref_se, note = reference(rows)
        for role, (doubled_role, label) in SETTINGS.items():
            fits = rows[rows["role"] == role]
            if not fits.empty:
                lines.append(f"| {name} | {int(rows['dim'].iloc[0])} | "
                             + _setting_row(fits, rows[rows["role"] == doubled_role], ref,
                                            ref_se, note, label))
    lines += ["", "Each fit's log Z, SE, effort-check levels and warnings: "
              "`mlp_calibration.csv`.", ""]
    earlier = MARKDOWN.read_text() if MARKDOWN.exists() else ""
    notes = (earlier[earlier.index("## Notes"):] if "## Notes" in earlier
             else "## Notes\n\n(to be written by hand after the run)\n")
    return "\n".join(lines) + "\n" + notes


if __name__ == "__main__":
    sys.exit(main())
