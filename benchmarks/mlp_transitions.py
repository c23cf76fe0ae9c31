"""HMC transitions per stage on the robot-arm MLP: does the stall rule cut the moves short?

``kernels.mutate`` ends a stage's moves when the population has decorrelated from its start,
or, with its stall rule, when a high correlation stops falling (meant for chains held in
separate modes). Past the phase transition of the robot-arm MLP with h = 4 that rule stopped
nearly every stage after 3–5 transitions; with MLP layers aligned ``thermodynamic`` now moves
without it. This study runs one round of ``--groups`` groups of ``--particles`` particles (the
defaults' ladder and layers; no extra groups, effort check or mode search, so that only the
moves differ) at the defaults, with the stall rule on as it was before (``stall rule``), and
with ``decorrelation=0`` (every stage runs ``max_transitions``), and records each group's log
evidence: with unbiased Ẑ per group, a kernel that mixes better shows as groups whose logs sit
higher and closer.

Rows are merged into ``benchmarks/results/mlp_transitions.csv`` (same setting and seed
replaced) and summarised in ``mlp_transitions.md``, whose hand-written notes are kept.

Usage::

    python benchmarks/mlp_transitions.py --seeds 11 12                     # ~40 min per seed
    python benchmarks/mlp_transitions.py --setting "stall rule" --seeds 11 12  # ~16 min per seed
    python benchmarks/mlp_transitions.py --setting decorrelation=0 --seeds 11 12  # ~40 min per seed
    python benchmarks/mlp_transitions.py --setting decorrelation=0 --max-transitions 40 \
        --groups 4 --seeds 11                                              # ~45 min
    python benchmarks/mlp_transitions.py --setting decorrelation=0 --no-scale-moves \
        --groups 2 --particles 128 --seeds 11                              # HMC alone
    python benchmarks/mlp_transitions.py --h 3 --setting decorrelation=0 --max-transitions 40 \
        --groups 4 --seeds 11                                              # ~70 min
    python benchmarks/mlp_transitions.py --seeds --merge other.csv         # rewrite the summary

Times at h = 4 (the last h = 3) on one core of this 2-core machine.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import pickle
import platform
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
CSV = ROOT / "benchmarks" / "results" / "mlp_transitions.csv"
MARKDOWN = CSV.with_suffix(".md")
SETTINGS = {"defaults": {}, "stall rule": {}, "decorrelation=0": {"decorrelation": 0.0}}
KEYS = ["h", "setting", "scale_moves", "max_transitions", "particles", "groups", "seed"]


def run(h: int, setting: str, max_transitions: int, particles: int, groups: int,
        seed: int, scale_moves: bool = True) -> dict:
    import pymc_evidence as pm_evidence
    from pymc_evidence.testing import robot_arm_mlp

    with tempfile.TemporaryDirectory() as directory:
        checkpoint = Path(directory) / "fit.ckpt"
        start = time.perf_counter()
        stall = _stall_rule_on() if setting == "stall rule" else contextlib.nullcontext()
        scales = contextlib.nullcontext() if scale_moves else _without_scale_moves()
        with warnings.catch_warnings(), stall, scales:
            warnings.simplefilter("ignore", pm_evidence.EvidenceWarning)
            result = pm_evidence.thermodynamic(
                robot_arm_mlp(h), n_particles=particles, n_groups=groups, max_groups=groups,
                target_se=None, effort_check=False, mode_search=False,
                max_transitions=max_transitions, random_seed=seed, progressbar=False,
                cores=1, checkpoint=checkpoint, **SETTINGS[setting])
        seconds = time.perf_counter() - start
        # The groups' own estimates are not in the result; the checkpoint keeps each stage.
        with open(checkpoint, "rb") as file:
            stages = pickle.load(file)["state"]["rounds"][0].stages
    per_group = np.sum([stage.log_ratio for stage in stages], axis=0)
    lam = np.array([stage.lam for stage in stages])
    transitions = np.array([stage.move.n_transitions for stage in stages])
    return {
        "h": h, "setting": setting, "scale_moves": scale_moves,
        "max_transitions": max_transitions,
        "particles": particles, "groups": groups, "seed": seed,
        "log_z": result.log_evidence, "se": result.se,
        "group_log_z": " ".join(f"{value:.3f}" for value in np.sort(per_group)),
        "stages": len(stages), "transitions": int(transitions.sum()),
        "transitions_late": int(transitions[lam > 0.2].sum()),
        "stages_late": int(np.sum(lam > 0.2)), "seconds": seconds,
    }


@contextlib.contextmanager
def _stall_rule_on():
    """Every HMC move of the fits inside with the stall rule on, as MLPs had it before."""
    from pymc_evidence import kernels

    original = kernels.mutate

    def mutate(*args, **options):
        return original(*args, **{**options, "stall_rule": True})

    kernels.mutate = mutate
    try:
        yield
    finally:
        kernels.mutate = original


@contextlib.contextmanager
def _without_scale_moves():
    """The fits inside without scale moves (HMC alone), as MLPs moved before."""
    from pymc_evidence.estimators import thermodynamic

    original = thermodynamic.find_scale_pairs
    thermodynamic.find_scale_pairs = lambda density: ()
    try:
        yield
    finally:
        thermodynamic.find_scale_pairs = original


def summarise(table: pd.DataFrame, command: str) -> str:
    lines = [
        "# HMC transitions per stage on the robot-arm MLP",
        "",
        f"Written by `{command}` on {datetime.date.today()} (Python "
        f"{platform.python_version()}, one core per fit, other jobs sharing the machine). "
        "One round of `thermodynamic(robot_arm_mlp(h), n_particles, n_groups, target_se=None, "
        "effort_check=False, mode_search=False, max_transitions, random_seed=seed)`, the "
        "defaults' ladder and layers otherwise; `decorrelation=0` runs `max_transitions` at "
        "every stage, the defaults stop a stage's moves once the population has decorrelated, "
        "and `stall rule` (the defaults before) also once its correlation with the start has "
        "stopped falling. Groups: each group's log "
        "evidence, sorted; median and SD over the groups. Transitions: summed over the "
        "stages, and over the stages past λ = 0.2 (at h = 4 the phase transition is at "
        "λ ≈ 0.06–0.15). Scale moves: whether each HMC transition was followed by moves of "
        "the weight precisions along with the standardised weights they scale "
        "(`pymc_evidence.scale_moves`; rows without them were made before they existed, or "
        "with `--no-scale-moves`).",
        "",
        "| h | setting | scale moves | max transitions | particles × groups | seed | log Z ± SE "
        "| groups | median | SD | transitions (past 0.2) | s |",
        "|--:|---|---|--:|--:|--:|--:|---|--:|--:|--:|--:|",
    ]
    for row in table.itertuples(index=False):
        groups = np.array([float(v) for v in row.group_log_z.split()])
        lines.append(
            f"| {row.h} | {row.setting} | {'yes' if row.scale_moves else 'no'} | "
            f"{row.max_transitions} | {row.particles} × "
            f"{row.groups} | {row.seed} | {row.log_z:.2f} ± {row.se:.2f} | "
            f"{', '.join(f'{v:.1f}' for v in groups)} | {np.median(groups):.2f} | "
            f"{np.std(groups, ddof=1):.2f} | {row.transitions} ({row.transitions_late} "
            f"in {row.stages_late} stages) | {row.seconds:.0f} |")
    notes = "\n## Notes\n\nHand-written; kept when the script rewrites the table.\n"
    if MARKDOWN.exists() and "\n## Notes\n" in MARKDOWN.read_text():
        notes = "\n## Notes\n" + MARKDOWN.read_text().split("\n## Notes\n", 1)[1]
    return "\n".join(lines) + "\n" + notes


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--h", type=int, default=4, help="hidden units")
    parser.add_argument("--setting", choices=SETTINGS, default="defaults")
    parser.add_argument("--max-transitions", type=int, default=20)
    parser.add_argument("--particles", type=int, default=256)
    parser.add_argument("--groups", type=int, default=8)
    parser.add_argument("--seeds", type=int, nargs="*", default=[11])
    parser.add_argument("--no-scale-moves", action="store_true",
                        help="HMC alone, without the scale moves of the weight precisions")
    parser.add_argument("--csv", type=Path, default=CSV,
                        help="where to merge the rows (a second process running at the same "
                        "time needs its own file; merge them with --merge)")
    parser.add_argument("--merge", nargs="*", type=Path, default=[],
                        help="CSV files of other processes to merge before the summary")
    args = parser.parse_args(argv)
    table = (_sorted(_with_scale_column(pd.read_csv(args.csv))) if args.csv.exists()
             else pd.DataFrame(columns=KEYS))
    for other in [_with_scale_column(pd.read_csv(path)) for path in args.merge]:
        table = _merged(table, other)
    for seed in args.seeds:
        row = run(args.h, args.setting, args.max_transitions, args.particles, args.groups, seed,
                  not args.no_scale_moves)
        print(row, flush=True)
        table = _merged(table, pd.DataFrame([row]))
        table.to_csv(args.csv, index=False)
    table.to_csv(args.csv, index=False)
    if args.csv == CSV:
        MARKDOWN.write_text(summarise(table, " ".join(
            ["python benchmarks/mlp_transitions.py", *argv])))
    return 0


def _with_scale_column(table: pd.DataFrame) -> pd.DataFrame:
    """Rows written before the scale moves existed ran without them."""
    if "scale_moves" not in table:
        table.insert(2, "scale_moves", False)
    return table


def _merged(old: pd.DataFrame, new: pd.DataFrame) -> pd.DataFrame:
    """``old`` with the rows of ``new`` replacing those of the same keys."""
    keep = ~old.set_index(KEYS).index.isin(new.set_index(KEYS).index)
    table = pd.concat([frame for frame in (old[keep], new) if not frame.empty],
                      ignore_index=True)
    return _sorted(table)


def _sorted(table: pd.DataFrame) -> pd.DataFrame:
    """By model, then the defaults before the other settings, then the keys' values."""
    order = table["setting"].map(list(SETTINGS).index)
    return (table.assign(order=order).sort_values(["h", "order", *KEYS[2:]], kind="stable")
            .drop(columns="order").reset_index(drop=True))


if __name__ == "__main__":
    sys.exit(main())
