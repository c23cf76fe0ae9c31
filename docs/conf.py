"""Sphinx configuration of the pymc-evidence documentation.

Build: ``make docs`` (or ``sphinx-build -W --keep-going -b html docs docs/_build/html``).
The API reference is generated from the docstrings (autosummary + numpydoc); the gallery page
is generated at build time from the files in ``examples/results/`` and ``benchmarks/results/``
(see ``_ext/results_gallery.py``).
"""

from __future__ import annotations

import os
import re
import sys
from importlib.metadata import PackageNotFoundError, version

DOCS = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(DOCS, "_ext"))

project = "pymc-evidence"
author = "the pymc-evidence developers"
copyright = "2025, the pymc-evidence developers"
try:
    release = version("pymc-evidence")
except PackageNotFoundError:  # building from a checkout that is not installed
    release = "0.1.0"
version = ".".join(release.split(".")[:2])

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.mathjax",
    # MathJax copied into _static/mathjax: the pages' math renders offline, without a CDN.
    "sphinx-mathjax-offline",
    "sphinx.ext.viewcode",
    "numpydoc",
    "results_gallery",
    "generated_outputs",
]

source_suffix = {".md": "markdown", ".rst": "restructuredtext"}
root_doc = "index"
exclude_patterns = ["_build", "_gallery_items.md", "_generated", "Thumbs.db", ".DS_Store"]
templates_path = ["_templates"]

# --- MyST -----------------------------------------------------------------------------------
myst_enable_extensions = ["dollarmath", "amsmath", "colon_fence", "deflist"]
myst_heading_anchors = 3

# --- API reference --------------------------------------------------------------------------
autosummary_generate = True
autosummary_imported_members = True
autodoc_typehints = "none"  # the numpydoc Parameters sections carry the types
autodoc_member_order = "bysource"
autodoc_default_options = {"members": True}
numpydoc_show_class_members = False
numpydoc_class_members_toctree = False
numpydoc_xref_param_type = False

# --- HTML -----------------------------------------------------------------------------------
html_theme = "pydata_sphinx_theme"
html_title = f"pymc-evidence {release}"
html_static_path = ["_static"]
# Wide equations, tables and code scroll sideways instead of being cut at the page's edge.
html_css_files = ["custom.css"]
html_theme_options = {
    "navigation_with_keys": False,
    "show_toc_level": 2,
    "navbar_align": "left",
    "footer_start": ["copyright"],
    "footer_end": ["sphinx-version", "theme-version"],
}
html_sidebars = {"index": [], "getting_started": []}

# --- outputs of the code on the pages (docs/_ext/generated_outputs.py) -------------------------
generated_outputs = {"quickstart": ["examples/quickstart.py"]}

# --- results gallery (docs/_ext/results_gallery.py) ------------------------------------------
results_gallery_sources = [
    ("Examples", "examples/results", "examples"),
    ("Benchmarks", "benchmarks/results", "benchmarks"),
]


# --- References sections of docstrings --------------------------------------------------------
#: A reference starts with its first author, "Surname, I." (initials, perhaps more authors),
#: and has its year in parentheses soon after.
_REFERENCE_START = re.compile(
    r"(?<=\.)\s+(?=[A-ZÀ-Þ][\w'’-]+(?: [A-Z][\w'’-]+)*, (?:[A-Z]\.[ -]?)+[^()]{0,200}?\(\d{4}\))"
)


def _references_as_list(app, what, name, obj, options, lines):
    """A numpydoc "References" section, one reference after another on consecutive lines,
    would render as one paragraph: make each reference an item of a bulleted list."""
    for i in range(len(lines) - 1):
        if lines[i].strip() == "References" and re.fullmatch(r"-{3,}", lines[i + 1].strip()):
            break
    else:
        return
    start = end = i + 2
    while end < len(lines) and not (
        end + 1 < len(lines) and lines[end].strip()
        and re.fullmatch(r"-{3,}", lines[end + 1].strip())
        and len(lines[end + 1].strip()) == len(lines[end].strip())
    ):
        end += 1
    body = lines[start:end]
    if any(line.lstrip().startswith(("..", "- ", "* ", "[")) for line in body):
        return  # already a list, or citations: leave them to numpydoc
    paragraphs, current = [], []
    for line in body + [""]:
        if line.strip():
            current.append(line.strip())
        elif current:
            paragraphs.append(" ".join(current))
            current = []
    items = [item for text in paragraphs for item in _REFERENCE_START.split(text)]
    new = [""] + [f"- {item}" for item in items] + [""]
    lines[start:end] = new


def setup(app):
    # before numpydoc's own handler (priority 500), which parses the sections
    app.connect("autodoc-process-docstring", _references_as_list, priority=400)
