"""The documentation's sources, checked without building them (the build is `make docs`).

Every public name of the package must appear in the API reference (docs/api.md), every name
listed there must exist, and the gallery generator must render committed results (or their
absence) into valid page source.
"""

from __future__ import annotations

import __future__
import importlib
import inspect
import re
from pathlib import Path

import pytest
from _scripts import load_script  # tests/_scripts.py

import pymc_evidence

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
API_PAGE = DOCS / "api.md"
#: Submodules whose ``__all__`` is documented name by name in the API reference.
DOCUMENTED_SUBMODULES = ("pymc_evidence.testing", "pymc_evidence.kernels")


def public_names(module) -> list[str]:
    """``__all__`` if the module defines it, else its public non-module attributes."""
    if hasattr(module, "__all__"):
        return list(module.__all__)
    return sorted(
        name
        for name, value in vars(module).items()
        if not name.startswith("_")
        and not inspect.ismodule(value)
        and not isinstance(value, __future__._Feature)
    )


def documented_names(text: str) -> set[str]:
    """Fully qualified names listed in the ``autosummary`` blocks of the API page."""
    names: set[str] = set()
    module = None
    in_autosummary = False
    for line in text.splitlines():
        stripped = line.strip()
        if match := re.match(r"\.\. currentmodule:: (\S+)", stripped):
            module, in_autosummary = match.group(1), False
        elif stripped.startswith(".. autosummary::"):
            in_autosummary = True
        elif stripped.startswith(".. ") or stripped.startswith("```"):
            in_autosummary = False
        elif in_autosummary and stripped and not stripped.startswith(":"):
            if not line.startswith((" ", "\t")):
                in_autosummary = False
            elif re.fullmatch(r"~?[A-Za-z_][\w.]*", stripped):
                name = stripped.lstrip("~")
                names.add(name if module is None else f"{module}.{name}")
    return names


@pytest.fixture(scope="module")
def api_names() -> set[str]:
    return documented_names(API_PAGE.read_text(encoding="utf-8"))


def test_every_public_name_is_in_the_api_reference(api_names):
    missing = [n for n in public_names(pymc_evidence) if f"pymc_evidence.{n}" not in api_names]
    assert not missing, f"add to an autosummary list in docs/api.md: {missing}"


@pytest.mark.parametrize("module_name", DOCUMENTED_SUBMODULES)
def test_every_public_name_of_documented_submodules_is_in_the_api_reference(
    api_names, module_name
):
    module = importlib.import_module(module_name)
    missing = [n for n in public_names(module) if f"{module_name}.{n}" not in api_names]
    assert not missing, f"add to the {module_name} list in docs/api.md: {missing}"


def test_every_name_in_the_api_reference_exists(api_names):
    assert len(api_names) > 10  # the parser found the lists
    stale = []
    for qualified in sorted(api_names):
        module_name, _, attr = qualified.rpartition(".")
        if not hasattr(importlib.import_module(module_name), attr):
            stale.append(qualified)
    assert not stale, f"docs/api.md lists names that do not exist: {stale}"


def test_documented_names_parser():
    text = """
```{eval-rst}
.. currentmodule:: pkg

.. autosummary::
   :toctree: api
   :nosignatures:

   alpha
   ~Beta
```
Some prose mentioning gamma.

```{eval-rst}
.. currentmodule:: pkg.sub

.. autosummary::
   :toctree: api

   delta
```
"""
    assert documented_names(text) == {"pkg.alpha", "pkg.Beta", "pkg.sub.delta"}


# ------------------------------------------------------------------------------ gallery
@pytest.fixture(scope="module")
def gallery():
    return load_script("docs/_ext/results_gallery.py")


SOURCES = [("Examples", "examples/results", "examples")]


def test_gallery_without_results_says_so(gallery, tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "examples").mkdir()
    text = gallery.render(tmp_path, tmp_path / "docs", SOURCES)
    assert "## Examples" in text
    assert "No results are committed in `examples/results/` yet" in text


def test_gallery_groups_results_by_script(gallery, tmp_path):
    (tmp_path / "docs").mkdir()
    examples = tmp_path / "examples"
    results = examples / "results"
    results.mkdir(parents=True)
    (examples / "robot_arm.py").write_text('"""Robot arm: chaining vs Laplace.\n\nMore."""\n')
    (examples / "robot.py").write_text('"""A shorter name that must not capture robot_arm_*."""\n')
    (results / "robot_arm_fig2a.png").write_bytes(b"\x89PNG")
    (results / "robot_arm.csv").write_text(
        "h,log_evidence\n" + "".join(f"{h},{-400.123456789 + h}\n" for h in range(60))
    )
    (results / "robot_arm_notes.md").write_text("# Notes\n\nMatched.\n")
    (results / "unrelated.svg").write_text("<svg/>")
    (results / "run.nc").write_bytes(b"CDF")  # not shown

    text = gallery.render(tmp_path, tmp_path / "docs", SOURCES)

    robot_arm = text.index("### `examples/robot_arm.py`")
    assert "Robot arm: chaining vs Laplace." in text
    assert "```{figure} ../examples/results/robot_arm_fig2a.png" in text
    assert text.index("robot_arm_fig2a.png") > robot_arm
    assert "```{csv-table} robot_arm.csv" in text
    assert "-400.123" in text and "-400.123456789" not in text  # long floats shortened
    assert f"first {gallery.MAX_TABLE_ROWS} of 60 rows" in text
    assert "```{include} ../examples/results/robot_arm_notes.md" in text
    assert text.index("### Other results") < text.index("unrelated.svg")
    assert "run.nc" not in text
    assert "examples/robot.py" not in text  # the longest matching script name wins


#: Pages a user reads, beside the documentation sources.
USER_PAGES = [ROOT / "README.md", ROOT / "examples" / "README.md",
              *sorted((ROOT / "benchmarks" / "results").glob("*.md")),
              *sorted(p for p in DOCS.rglob("*.md") if "_build" not in p.parts
                      and p.name != "_gallery_items.md")]
DEVELOPMENT_LOG = re.compile(
    r"\bsession \d|\bthis session\b|\bat commit\b|commit `[0-9a-f]{7}|issue #\d"
    r"|/work/|shared/papers",
    re.IGNORECASE,
)


@pytest.mark.parametrize("page", USER_PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_pages_speak_about_the_package_not_its_development(page):
    """No development-log wording (sessions, commits, issue numbers) and no paths that exist
    only on the developers' machines."""
    hits = [line for line in page.read_text().splitlines() if DEVELOPMENT_LOG.search(line)]
    assert not hits, hits[:3]
