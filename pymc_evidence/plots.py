"""Plots of evidence results (matplotlib, imported lazily). Each function returns its axes."""

from __future__ import annotations

import numpy as np

__all__ = ["plot_stages", "plot_trace_energy", "plot_evidence", "plot_cmc_path", "plot_nested"]


def _axes(ax, n):
    import matplotlib.pyplot as plt

    if ax is not None:
        return ax
    _, axes = plt.subplots(1, n, figsize=(5 * n, 3.6), squeeze=False, layout="constrained")
    return axes[0] if n > 1 else axes[0, 0]


def _log_axis(axis, values) -> None:
    """A log axis whose ticks are labelled in plain numbers: at 1, 2 and 5 × 10^k when the
    values span at most three decades (else every decade), so that a short range still has
    several labelled ticks."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    values = np.asarray(values, dtype=float)
    values = values[np.isfinite(values) & (values > 0)]
    decades = np.log10(values.max() / values.min()) if values.size else 0.0
    axis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0) if decades <= 3 else (1.0,)))
    axis.set_major_formatter(FuncFormatter(lambda tick, _: f"{tick:g}"))
    axis.set_minor_formatter(NullFormatter())


def _value_axis(ax, values) -> None:
    """The y scale for values that may span decades: linear unless their magnitudes span more
    than two decades; then a symmetric log scale, linear below the power of ten at or above
    the smallest magnitude (at most ten decades below the largest, so that a value that
    happens to lie near zero does not crowd the labels there), with ticks at 0 and 1, 2 and
    5 × 10^k labelled in plain numbers."""
    from matplotlib.ticker import FixedLocator, FuncFormatter

    magnitude = np.abs(np.asarray(values, dtype=float))
    magnitude = magnitude[np.isfinite(magnitude) & (magnitude > 0)]
    if magnitude.size == 0 or magnitude.max() < 100 * magnitude.min():
        return
    largest = float(magnitude.max())
    lowest = int(np.ceil(np.log10(max(float(magnitude.min()), largest * 1e-10))))
    ax.set_yscale("symlog", linthresh=10.0**lowest)
    highest = int(np.floor(np.log10(largest)))
    subs = (1.0, 2.0, 5.0) if highest - lowest <= 3 else (1.0,)
    ticks = [s * 10.0**k for k in range(lowest, highest + 1) for s in subs]
    ax.yaxis.set_major_locator(FixedLocator([-t for t in ticks[::-1]] + [0.0] + ticks))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda tick, _: f"{tick:g}"))


def plot_stages(result, ax=None):
    """Log evidence ratio per stage and E_λ[log L] against λ (Barber & Bishop 1997, figure 1b).

    Parameters
    ----------
    result : EvidenceResult
        From :func:`~pymc_evidence.thermodynamic`.
    ax : sequence of two matplotlib Axes, optional

    Returns
    -------
    numpy.ndarray of two Axes
        Left: ln{p(D|M_k)/p(D|M_{k−1})} at each λ_k, with ±2 SE bars, and each ratio's SE on
        its own axis (right), since the bars are often smaller than the markers. Right: the
        mean of log L at each λ (the thermodynamic-integration integrand), on a symmetric-log
        scale when it spans decades.
    """
    from matplotlib.ticker import MaxNLocator

    diagnostics = result.diagnostics
    if "log_ratio" not in diagnostics:
        raise ValueError(f"plot_stages needs a staged result (thermodynamic), got method {result.method!r}")
    left, right = _axes(ax, 2)
    lam = diagnostics["lambda"].to_numpy()
    left.errorbar(lam, diagnostics["log_ratio"], yerr=2 * diagnostics["log_ratio_se"], fmt="o",
                  ms=3, capsize=2, label="log ratio ± 2 SE")
    left.set_xscale("log")
    _log_axis(left.xaxis, lam)
    left.set_xlabel("λ")
    left.set_ylabel("log evidence ratio of stage")
    left.set_title(f"{result.model_name or 'model'}: {len(lam)} stages, "
                   f"log Z = {result.log_evidence:.2f} ± {result.se:.2f}")
    errors = left.twinx()
    errors.plot(lam, diagnostics["log_ratio_se"], "s--", ms=3, lw=0.8, color="C1",
                label="SE of the ratio (right axis)")
    errors.set_ylim(bottom=0)
    errors.yaxis.set_major_locator(MaxNLocator(4))
    errors.set_ylabel("SE of the ratio", color="C1")
    errors.tick_params(axis="y", colors="C1")
    lines = [h for a in (left, errors) for h in a.get_legend_handles_labels()[0]]
    left.legend(lines, [h.get_label() for h in lines], fontsize="small", loc="lower left")
    right.plot(lam, diagnostics["mean_log_likelihood"], "o-", ms=3)
    right.set_xscale("log")
    _log_axis(right.xaxis, lam)
    _value_axis(right, diagnostics["mean_log_likelihood"])
    right.set_xlabel("λ")
    right.set_ylabel(r"$\mathrm{E}_\lambda[\log L]$")
    return np.array([left, right])


def plot_trace_energy(result, stage=None, ax=None):
    """Energy E = −(log p(θ) + λ log L(θ)) of tracked chains after each HMC transition.

    Barber & Bishop (1997, Fig. 1a) plot the error of successive samples at one λ to show they
    are uncorrelated. Here the energies of a few tracked chains are shown along the run (stage
    boundaries dotted) or within one stage.

    Parameters
    ----------
    result : EvidenceResult
        From :func:`~pymc_evidence.thermodynamic` (it records ``result.trace``).
    stage : int, optional
        Only this stage (negative counts from the end). Default: the whole run.
    ax : matplotlib Axes, optional
    """
    trace = result.trace
    if trace is None or trace.empty:
        raise ValueError("this result has no per-transition trace (thermodynamic records one)")
    ax = _axes(ax, 1)
    if stage is not None:
        stages = np.unique(trace["stage"])
        trace = trace[trace["stage"] == stages[stage]]
    energy = -(trace["log_prior"] + trace["lambda"] * trace["log_likelihood"])
    steps = trace.groupby("stage")["transition"].max() + 1
    offset = (steps.cumsum() - steps).reindex(trace["stage"]).to_numpy()
    x = offset + trace["transition"].to_numpy()
    for chain in np.unique(trace["chain"]):
        mask = (trace["chain"] == chain).to_numpy()
        ax.plot(x[mask], energy[mask], lw=0.8)
    _value_axis(ax, energy)
    if stage is None:
        for boundary in (steps.cumsum() - steps).to_numpy()[1:]:
            ax.axvline(boundary - 0.5, color="0.8", ls=":", lw=0.6)
        ax.set_xlabel("HMC transition (all stages)")
    else:
        ax.set_xlabel(f"HMC transition at λ = {trace['lambda'].iloc[0]:.4g}")
    ax.set_ylabel(r"energy $-\log \pi_\lambda(\theta)$")
    return ax


def plot_evidence(table, x=None, ax=None, reference=None, label=None):
    """Log evidence of each model with ±2 SE error bars (e.g. against hidden units, figure 2a).

    Parameters
    ----------
    table : pandas.DataFrame
        From :func:`~pymc_evidence.compare`.
    x : dict or sequence, optional
        Position of each model (e.g. ``{"h=4": 4, ...}``, or values in table order). Default:
        models in table order, labelled by name.
    ax : matplotlib Axes, optional
    reference : dict, optional
        Exact log evidences by model name, drawn as crosses in front of the estimates.
    label : str, optional
        Legend label (e.g. the method), so several tables can share one axes.

    Points are joined by a line only when ``x`` places the models on a numeric axis (e.g.
    hidden units): models listed by name are not a series.
    """
    ax = _axes(ax, 1)
    names = list(table.index)
    if x is None:
        positions = np.arange(len(names))
        ax.set_xticks(positions, names, rotation=30 if len(names) > 6 else 0)
        ax.margins(x=0.25 if len(names) < 4 else 0.05)
    elif isinstance(x, dict):
        positions = np.array([x[name] for name in names], dtype=float)
    else:
        positions = np.asarray(x, dtype=float)
    order = np.argsort(positions, kind="stable")
    ax.errorbar(
        positions[order], table["log_evidence"].to_numpy()[order],
        yerr=2 * table["se"].to_numpy()[order], fmt="o" if x is None else "o-", ms=6,
        mfc="none", capsize=3, label=(label or str(table["method"].iloc[0])) + " ± 2 SE",
    )
    if reference is not None:
        ax.plot(positions, [reference[name] for name in names], "kx", ms=8, mew=1.5, zorder=3,
                label="exact")
    ax.set_ylabel("log evidence")
    ax.legend()
    return ax


def plot_cmc_path(result, chain=0, stage=-1, ax=None):
    """Model visited by a contour Monte Carlo run against the iteration (Liang 2005, figures 1, 3).

    A free random walk over the models (every model visited, none favoured) is what a
    converged CMC run looks like.

    Parameters
    ----------
    result : EvidenceResult or dict of {str: EvidenceResult}
        From :func:`~pymc_evidence.cmc` (any model's result: they share the path).
    chain : int, default 0
        Which independent replica to show.
    stage : int or None, default -1
        Only this stage (negative counts from the end; Liang plots the last). ``None``: all.
    ax : matplotlib Axes, optional

    Returns
    -------
    matplotlib Axes
    """
    if isinstance(result, dict):
        result = next(iter(result.values()))
    stats = result.sample_stats or {}
    if getattr(result, "method", None) != "cmc" or "model_index" not in stats:
        raise ValueError(
            f"plot_cmc_path needs a result of cmc(), got method {getattr(result, 'method', None)!r}"
        )
    path = np.asarray(stats["model_index"])[chain]
    iteration = np.asarray(stats["iteration"])[chain]
    stages = np.asarray(stats["stage"])[chain]
    if stage is not None:
        chosen = np.unique(stages)[stage]
        keep = stages == chosen
        path, iteration = path[keep], iteration[keep]
    ax = _axes(ax, 1)
    names = list(result.settings.get("models", []))
    ax.plot(iteration, path + 1, ".", ms=2)
    ax.plot(iteration, path + 1, "-", lw=0.3, color="0.6")
    ticks = np.arange(1, (len(names) or int(path.max()) + 1) + 1)
    ax.set_yticks(ticks, names or [str(t) for t in ticks])
    ax.set_xlabel("iteration" + ("" if stage is None else f" (stage {int(chosen)})"))
    ax.set_ylabel("model")
    ax.set_title(f"CMC model transition path (replica {chain})")
    return ax


def plot_nested(result, ax=None):
    r"""A nested-sampling run as Skilling (2006, figure 2) draws it: log L* against log X, and
    where the posterior mass lies.

    Parameters
    ----------
    result : NestedResult
        From :func:`~pymc_evidence.nested`.
    ax : sequence of two matplotlib Axes, optional

    Returns
    -------
    numpy.ndarray of two Axes
        Left: each run's contour log L* against its expected log prior volume log X. Right:
        the posterior mass per unit log X of each run (each step's share of the run's evidence
        over the log-volume it spans, about :math:`L X / Z`): the bulge where the evidence
        comes from, which lies a little beyond log X = −H (H, the information, dashed; the
        posterior's d dimensions push it further by about d/2). A run that stops before the
        bulge has passed has not found all of the evidence.
    """
    diagnostics = result.diagnostics
    if result.method != "nested" or "log_threshold" not in diagnostics:
        raise ValueError(f"plot_nested needs a result of nested(), got method {result.method!r}")
    left, right = _axes(ax, 2)
    for run, steps in diagnostics.groupby("run"):
        log_x = steps["log_x"].to_numpy()
        log_threshold = steps["log_threshold"].to_numpy()
        finite = np.isfinite(log_threshold)
        left.plot(log_x[finite], log_threshold[finite], lw=1, label=f"run {run + 1}")
        # Each step's share of the run's evidence, over the log-volume the step spans.
        share = np.diff(np.exp(steps["log_z_steps"].to_numpy()
                               - result.run_log_evidence[run]), prepend=0.0)
        width = -np.diff(log_x, prepend=0.0)
        right.plot(log_x + width / 2, share / width, lw=1)
    left.set_xlabel("log X (prior volume inside the contour)")
    left.set_ylabel("log L*")
    left.set_title(f"{result.model_name or 'model'}: log Z = {result.log_evidence:.2f} "
                   f"± {result.se:.2f}")
    if result.n_runs <= 8:
        left.legend(fontsize="small")
    right.axvline(-result.information, color="0.4", ls="--", lw=1, label="log X = −H")
    right.set_xlabel("log X")
    right.set_ylabel("posterior mass per unit log X")
    right.legend(fontsize="small")
    return np.array([left, right])
