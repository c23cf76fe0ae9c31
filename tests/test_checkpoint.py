"""Checkpointed runs survive being killed and resume to exactly the uninterrupted result."""

import functools
import pickle
import subprocess
import sys
import time

import pytest

import pymc_evidence as pm_evidence
from pymc_evidence import testing

OPTIONS = dict(random_seed=17, progressbar=False, target_se=None)
SCRIPT = """
import sys
import pymc_evidence as pm_evidence
from pymc_evidence import testing
model, _ = testing.conjugate_regression(dim=20, n_obs=50)
pm_evidence.thermodynamic(model, checkpoint=sys.argv[1], **OPTIONS)
"""


def finished_stages(path):
    try:
        with open(path, "rb") as file:
            rounds = pickle.load(file)["state"]["rounds"]
    except (FileNotFoundError, EOFError, pickle.UnpicklingError):
        return 0
    return sum(len(r.stages) for r in rounds)


@pytest.fixture(scope="module")
def model():
    return testing.conjugate_regression(dim=20, n_obs=50)[0]


def test_killed_run_resumes_to_identical_result(model, tmp_path):
    path = tmp_path / "run.ckpt"
    script = f"OPTIONS = {OPTIONS!r}\n" + SCRIPT
    process = subprocess.Popen([sys.executable, "-c", script, str(path)])
    deadline = time.monotonic() + 300
    while finished_stages(path) < 3:
        assert process.poll() is None, "the run ended before it could be interrupted"
        assert time.monotonic() < deadline
        time.sleep(0.05)
    process.kill()
    process.wait()
    interrupted_at = finished_stages(path)
    assert path.exists()

    resumed = pm_evidence.thermodynamic(model, checkpoint=path, **OPTIONS)
    uninterrupted = pm_evidence.thermodynamic(model, **OPTIONS)
    assert len(resumed.diagnostics) > interrupted_at
    assert resumed.log_evidence == uninterrupted.log_evidence
    assert resumed.se == uninterrupted.se
    assert resumed.diagnostics.equals(uninterrupted.diagnostics)


def test_finished_checkpoint_is_not_rerun_and_guards_settings(model, tmp_path):
    path = tmp_path / "run.ckpt"
    first = pm_evidence.thermodynamic(model, checkpoint=path, **OPTIONS)
    again = pm_evidence.thermodynamic(model, checkpoint=path, **OPTIONS)
    assert again.log_evidence == first.log_evidence
    # Nothing is sampled again, and the reloaded result reports what the estimate cost.
    reload_seconds = again.timing["sampling"] - again.timing["earlier_sessions"]
    assert reload_seconds < 0.1 * first.timing["sampling"]
    assert again.timing["earlier_sessions"] == first.timing["sampling"]
    # the mode search reads the finished particles: a checkpoint serves either setting
    searched = pm_evidence.thermodynamic(model, checkpoint=path, mode_search=4, **OPTIONS)
    assert searched.log_evidence == first.log_evidence and searched.se == first.se
    assert searched.best_log_joint_from_prior == pytest.approx(
        searched.best_log_joint_from_particles, abs=1e-6)
    with pytest.raises(ValueError, match="written by a run with other settings"):
        pm_evidence.thermodynamic(model, checkpoint=path, **dict(OPTIONS, n_particles=128))
    path.write_bytes(b"not a checkpoint")
    with pytest.raises(ValueError, match="cannot be read"):
        pm_evidence.thermodynamic(model, checkpoint=path, **OPTIONS)
    # what format 2 wrote: the format inside the key, no format of its own
    path.write_bytes(pickle.dumps({"key": '{"format": 2}', "rng": {}, "rounds": [],
                                   "sampling_seconds": 1.0}))
    with pytest.raises(ValueError, match="written by an older version of pymc-evidence"):
        pm_evidence.thermodynamic(model, checkpoint=path, **OPTIONS)


@pytest.mark.filterwarnings("ignore:target_se=0.02 not reached")
def test_run_missing_extra_groups_resumes_to_identical_result(model, tmp_path):
    """Extra groups run in chunks, each saved when finished; a run stopped between chunks
    reruns only the missing ones, with the seeds the uninterrupted run gave them."""
    options = dict(OPTIONS, target_se=0.02, max_groups=10, n_particles=64)
    path = tmp_path / "run.ckpt"
    uninterrupted = pm_evidence.thermodynamic(model, checkpoint=path, **options)
    with open(path, "rb") as file:
        saved = pickle.load(file)
    assert len(saved["state"]["rounds"]) == 3  # the first round, then chunks of 4 and 2 groups
    saved["state"]["rounds"][1] = None
    with open(path, "wb") as file:
        pickle.dump(saved, file)
    resumed = pm_evidence.thermodynamic(model, checkpoint=path, **options)
    assert resumed.n_groups == 10
    assert resumed.log_evidence == uninterrupted.log_evidence
    assert resumed.diagnostics.equals(uninterrupted.diagnostics)


def test_run_missing_an_effort_check_level_resumes_to_identical_result(model, tmp_path):
    """The effort check's levels are saved as they finish; a run stopped before the last one
    reruns it with the seed the uninterrupted run gave it."""
    options = dict(OPTIONS, n_particles=64, max_groups=8, effort_check=True)
    path = tmp_path / "run.ckpt"
    uninterrupted = pm_evidence.thermodynamic(model, checkpoint=path, **options)
    with open(path, "rb") as file:
        saved = pickle.load(file)
    assert len(saved["state"]["checks"]) == len(uninterrupted.effort_particles) - 1 >= 1
    saved["state"]["checks"].pop()
    with open(path, "wb") as file:
        pickle.dump(saved, file)
    resumed = pm_evidence.thermodynamic(model, checkpoint=path, **options)
    assert resumed.effort_log_evidence == uninterrupted.effort_log_evidence
    assert resumed.log_evidence == uninterrupted.log_evidence
    assert resumed.diagnostics.equals(uninterrupted.diagnostics)


def test_compare_checkpoint_skips_finished_models(tmp_path, monkeypatch):
    models = {
        "informative": testing.beta_binomial()[0],
        "flat": testing.beta_binomial(alpha=1.0, beta=1.0)[0],
    }
    directory = tmp_path / "compare"
    first = pm_evidence.compare(models, checkpoint=directory, **OPTIONS)
    assert (directory / "informative.nc").exists() and (directory / "flat.nc").exists()

    # an interrupted compare: one model's result is lost, the other is kept and not redone
    (directory / "flat.nc").unlink()
    calls = []
    original = pm_evidence.METHODS["thermodynamic"]

    @functools.wraps(original)
    def counting(model, **options):
        calls.append(model.name)
        return original(model, **options)

    monkeypatch.setitem(pm_evidence.METHODS, "thermodynamic", counting)
    again = pm_evidence.compare(models, checkpoint=directory, **OPTIONS)
    assert len(calls) == 1
    assert again["log_evidence"].equals(first["log_evidence"])
    assert again["se"].equals(first["se"])
    with pytest.raises(ValueError, match="written by a run with other settings"):
        pm_evidence.compare(models, checkpoint=directory, **dict(OPTIONS, random_seed=99))
    # a directory of an earlier format (its manifest held the key alone)
    (directory / "compare.json").write_text('{"method": "thermodynamic"}')
    with pytest.raises(ValueError, match="written by an older version of pymc-evidence"):
        pm_evidence.compare(models, checkpoint=directory, **OPTIONS)


def test_checkpoint_path_is_checked_before_any_work(tmp_path, monkeypatch):
    """A checkpoint file whose directory is missing gets it made (the first save of a long run
    would fail after its work); a directory where a file is expected, or the reverse, is
    refused before the model is compiled."""
    from pymc_evidence.estimators import nested, thermodynamic

    model = testing.beta_binomial()[0]
    path = tmp_path / "not" / "yet" / "run.ckpt"
    nested_options = dict(random_seed=1, progressbar=False, target_se=None, cores=1)
    first = pm_evidence.nested(model, checkpoint=path, **nested_options)
    assert path.exists()
    assert pm_evidence.nested(model, checkpoint=path, **nested_options).log_evidence == (
        first.log_evidence)

    def compiled(*args, **kwargs):
        raise AssertionError("the model was compiled before the checkpoint was checked")

    monkeypatch.setattr(nested, "get_density", compiled)
    monkeypatch.setattr(thermodynamic, "get_density", compiled)
    for estimator in (pm_evidence.nested, pm_evidence.thermodynamic):
        with pytest.raises(ValueError, match="must be the path of a file, got the directory"):
            estimator(model, checkpoint=tmp_path, progressbar=False)
        with pytest.raises(ValueError, match="its directory cannot be made"):
            estimator(model, checkpoint=path / "run.ckpt", progressbar=False)
        with pytest.raises(TypeError, match="checkpoint must be a file path"):
            estimator(model, checkpoint=3, progressbar=False)
    with pytest.raises(ValueError, match="compare's checkpoint must be a directory"):
        pm_evidence.compare([model], checkpoint=path, progressbar=False)


# ------------------------------------------------------------------------------------ nested
NESTED_OPTIONS = dict(random_seed=5, progressbar=False, target_se=None, n_runs=4, n_live=300,
                      cores=1)
NESTED_SCRIPT = """
import sys
import pymc_evidence as pm_evidence
from pymc_evidence import testing
from pymc_evidence.estimators import nested
nested._SAVE_SECONDS = 0.0  # save the unfinished run after every step
model, _ = testing.conjugate_regression(dim=5)
pm_evidence.nested(model, checkpoint=sys.argv[1], **OPTIONS)
"""


def nested_progress(path):
    """(finished runs, whether an unfinished run is saved) in a nested checkpoint."""
    try:
        with open(path, "rb") as file:
            state = pickle.load(file)["state"]
    except (FileNotFoundError, EOFError, pickle.UnpicklingError):
        return 0, False
    return len(state["runs"]), state["current"] is not None


def test_killed_nested_run_resumes_to_identical_result(tmp_path):
    """Killed in the middle of its second run: the resumed call finishes that run from its
    saved state and returns what an uninterrupted call returns, on any number of cores."""
    model, _ = testing.conjugate_regression(dim=5)
    path = tmp_path / "nested.ckpt"
    script = f"OPTIONS = {NESTED_OPTIONS!r}\n" + NESTED_SCRIPT
    process = subprocess.Popen([sys.executable, "-c", script, str(path)])
    deadline = time.monotonic() + 300
    while nested_progress(path) != (1, True):
        assert process.poll() is None, "the run ended before it could be interrupted"
        assert time.monotonic() < deadline
        time.sleep(0.02)
    process.kill()
    process.wait()
    assert nested_progress(path)[1]  # killed with a run unfinished

    resumed = pm_evidence.nested(model, checkpoint=path, **NESTED_OPTIONS)
    uninterrupted = pm_evidence.nested(model, **dict(NESTED_OPTIONS, cores=2))
    assert resumed.run_log_evidence == uninterrupted.run_log_evidence
    assert resumed.log_evidence == uninterrupted.log_evidence and resumed.se == uninterrupted.se
    assert resumed.diagnostics.equals(uninterrupted.diagnostics)
    assert (resumed.posterior["w"] == uninterrupted.posterior["w"]).all()
    assert resumed.timing["earlier_sessions"] > 0
    reloaded = pm_evidence.nested(model, checkpoint=path, **NESTED_OPTIONS)
    assert reloaded.log_evidence == resumed.log_evidence
    assert reloaded.timing["earlier_sessions"] == resumed.timing["sampling"]
    # A default that changed between versions looks like the same call: the refusal says
    # what differs.
    with pytest.raises(ValueError, match=r"other settings .*n_live: 300 in the checkpoint, "
                                         r"200 now; num_delete: 150 in the checkpoint, 100 now"):
        pm_evidence.nested(model, checkpoint=path, **dict(NESTED_OPTIONS, n_live=200))


def test_nested_killed_in_its_moves_check_resumes_to_identical_result(tmp_path):
    """Killed in the middle of a run of the moves check (twice the moves): the resumed call
    finishes it and returns what an uninterrupted call returns, the check's runs on workers."""
    model, _ = testing.conjugate_regression(dim=5)
    options = dict(NESTED_OPTIONS, n_runs=2, moves_check=True)
    path = tmp_path / "nested.ckpt"
    process = subprocess.Popen([sys.executable, "-c", f"OPTIONS = {options!r}\n" + NESTED_SCRIPT,
                                str(path)])
    deadline = time.monotonic() + 300
    while not _in_moves_check(path):
        assert process.poll() is None, "the run ended before it could be interrupted"
        assert time.monotonic() < deadline
        time.sleep(0.02)
    process.kill()
    process.wait()

    resumed = pm_evidence.nested(model, checkpoint=path, **options)
    uninterrupted = pm_evidence.nested(model, **dict(options, cores=2))
    assert resumed.moves_levels == uninterrupted.moves_levels == (25, 50)
    assert resumed.run_log_evidence == uninterrupted.run_log_evidence
    assert resumed.log_evidence == uninterrupted.log_evidence and resumed.se == uninterrupted.se
    assert resumed.timing["earlier_sessions"] > 0


def _in_moves_check(path) -> bool:
    """Whether a nested checkpoint holds an unfinished run of the moves check."""
    try:
        with open(path, "rb") as file:
            current = pickle.load(file)["state"]["current"]
    except (FileNotFoundError, EOFError, pickle.UnpicklingError):
        return False
    return current is not None and isinstance(current[0], tuple)


@pytest.mark.filterwarnings("ignore:target_se=0.02 not reached", "ignore:the groups' log")
def test_run_with_larger_groups_missing_a_chunk_resumes_to_identical_result(model, tmp_path):
    """Groups of 8 spread too wide here and are replaced by groups of 64, then extra groups of
    64 follow; every chunk is saved in the order it ran and a resumed run reruns only the
    missing one."""
    options = dict(OPTIONS, target_se=0.02, max_groups=64, n_particles=8)
    path = tmp_path / "run.ckpt"
    uninterrupted = pm_evidence.thermodynamic(model, checkpoint=path, **options)
    with open(path, "rb") as file:
        saved = pickle.load(file)
    shapes = [r.final_log_weights.shape for r in saved["state"]["rounds"]]
    assert shapes == [(4, 8), (4, 64), (4, 64)]
    saved["state"]["rounds"][2] = None
    with open(path, "wb") as file:
        pickle.dump(saved, file)
    resumed = pm_evidence.thermodynamic(model, checkpoint=path, **options)
    assert resumed.n_groups == uninterrupted.n_groups == 8
    assert resumed.log_evidence == uninterrupted.log_evidence
    assert resumed.diagnostics.equals(uninterrupted.diagnostics)
