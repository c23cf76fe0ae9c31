"""Sphinx extension: the gallery page, generated at build time from committed results.

The example and benchmark scripts write their figures and tables to ``examples/results/`` and
``benchmarks/results/``. At ``builder-inited`` this extension lists those directories and writes
``docs/_gallery_items.md`` (MyST markdown), which ``docs/gallery.md`` includes. So a newly
committed figure appears in the next build without editing the docs, and a build with no
results at all is still clean (the page then says so).

What is shown, per results directory (``results_gallery_sources`` in ``conf.py``):

* files are grouped by the script that wrote them: ``robot_arm_fig2a.png`` belongs to
  ``examples/robot_arm.py`` (file name = script name, or script name + ``_``/``-`` + anything);
  the group is headed by the script's name and the first line of its docstring; files that match
  no script go to "Other results";
* figures (``.png``, ``.svg``, ``.jpg``, ``.jpeg``, ``.gif``): a figure, captioned with the file
  name;
* tables (``.csv``): a preview, the first ``MAX_TABLE_ROWS`` rows, with numbers to
  ``SIGNIFICANT_DIGITS`` significant digits (at least ``MIN_DECIMALS`` decimals for numbers from
  1 to a million, so that a log evidence keeps its third decimal) and text cells cut at
  ``MAX_CELL_CHARS`` characters, then a download link to the whole file and notes on the
  columns that need one (``COLUMN_NOTES``). When a write-up of the same name reports on the
  table, the preview is folded away (an HTML ``<details>``), the write-up being the summary;
* write-ups (``.md``): included as they are, headings shifted below the group's heading;
* text (``.txt``, ``.json``): the first ``MAX_TEXT_LINES`` lines as a literal block, with a
  download link to the whole file;
* anything else is ignored (e.g. ``.nc`` files, which are not committed).

The generated file is rewritten only when its content changes, so Sphinx's incremental builds
re-read the gallery exactly when the set or content of the results changed.
"""

from __future__ import annotations

import ast
import csv
import io
import os
import re
from pathlib import Path

FIGURES = (".png", ".svg", ".jpg", ".jpeg", ".gif")
TABLES = (".csv",)
WRITEUPS = (".md",)
TEXTS = (".txt", ".json")
MAX_TABLE_ROWS = 10
MAX_CELL_CHARS = 80
SIGNIFICANT_DIGITS = 4
MIN_DECIMALS = 3
MAX_TEXT_LINES = 25
#: Columns whose values need a word of explanation, by column name.
COLUMN_NOTES = {
    "ti": (
        "`ti` ± `ti_se`: the thermodynamic-integration cross-check of the stepping-stone "
        "estimate (`ti_log_evidence`, see {doc}`theory`). It is meaningless, huge (such as "
        "1e25) or NaN, when $\\mathbb{E}_\\lambda[\\log L]$ diverges at the prior, as under "
        "vague noise or scale priors; the stepping-stone column is the estimate."
    ),
}
#: The page that includes the generated file; paths in it are relative to this page.
GALLERY_PAGE = "gallery.md"
#: The generated file, in the same directory as the page: MyST resolves ``:relative-images:``
#: of a nested include from the including file's directory, Sphinx from the page's.
GENERATED = "_gallery_items.md"


def _script_summary(script: Path) -> str:
    """First line of a script's module docstring ('' if it has none or does not parse)."""
    try:
        doc = ast.get_docstring(ast.parse(script.read_text(encoding="utf-8")))
    except (SyntaxError, UnicodeDecodeError, OSError):
        return ""
    return doc.strip().splitlines()[0].strip() if doc else ""


def _owner(stem: str, scripts: list[str]) -> str | None:
    """The script (stem) that wrote a result file: the longest script name it starts with."""
    matches = [
        s for s in scripts if stem == s or re.match(re.escape(s) + r"[_\-.]", stem)
    ]
    return max(matches, key=len) if matches else None


def _title(path: Path) -> str:
    return path.stem.replace("_", " ").replace("-", " ")


def _fence(lines: list[str]) -> str:
    """A backtick fence longer than any run of backticks inside ``lines``."""
    longest = max((len(m) for line in lines for m in re.findall(r"`+", line)), default=0)
    return "`" * max(3, longest + 1)


_FLOAT = re.compile(r"[-+]?(\d+\.\d*|\.\d+|\d+(?=e))(e[-+]?\d+)?", re.IGNORECASE)
#: Characters that can start markup (a role, a reference, math, ...) in a table cell.
_MARKUP = re.compile(r"([\\`*_|\[\]<>:$#])")
#: A cell that would be read as the start of a list.
_LIST_START = re.compile(r"([-+*]|\d+[.)]|\(\d+\))(\s|$)")


def _format_number(x: float) -> str:
    """``SIGNIFICANT_DIGITS`` significant digits; from 1 to 1e6 at least ``MIN_DECIMALS``
    decimals, trailing zeros dropped; scientific notation outside 1e-3 to 1e6."""
    if x == 0:
        return "0"
    if x != x or x in (float("inf"), float("-inf")):
        return str(x)
    size = abs(x)
    if 1 <= size < 1e6:
        text = f"{x:.{max(MIN_DECIMALS, SIGNIFICANT_DIGITS - len(str(int(size))))}f}"
        return text.rstrip("0").rstrip(".")
    if 1e-3 <= size < 1:
        return f"{x:.{SIGNIFICANT_DIGITS}g}"
    mantissa, exponent = f"{x:.{SIGNIFICANT_DIGITS - 1}e}".split("e")
    mantissa = mantissa.rstrip("0").rstrip(".") if "." in mantissa else mantissa
    return f"{mantissa}e{int(exponent):+d}"


def _format_cell(value: str) -> str:
    """A cell of a table preview: numbers with a decimal point or an exponent shortened
    (integers stay as they are), whitespace collapsed, text cut at ``MAX_CELL_CHARS``
    characters, and every character that could start markup escaped by a backslash."""
    text = " ".join(value.split())
    if _FLOAT.fullmatch(text):
        try:
            return _format_number(float(text))
        except ValueError:
            pass
    if len(text) > MAX_CELL_CHARS:
        text = text[: MAX_CELL_CHARS - 1].rstrip() + "…"
    text = _MARKUP.sub(r"\\\1", text)
    start = _LIST_START.match(text)
    if start:  # escape the marker's punctuation: \- text, 1\. text, (1\) text
        at = start.end(1) - 1 if start.group(1)[-1] in ".)" else 0
        text = text[:at] + "\\" + text[at:]
    return text


def _csv_block(path: Path, rel: str, folded: bool = False) -> list[str]:
    """A preview of a table: its first rows, shortened, and a link to the whole file; inside
    a folded ``<details>`` when ``folded`` (a write-up reports on the table)."""
    with path.open(newline="", encoding="utf-8") as handle:
        rows = list(csv.reader(handle))
    if not rows:
        return [f"*{path.name} is empty.*", ""]
    header, body = rows[0], rows[1:]
    if not body:
        return [f"*{path.name} has no rows* (columns: {', '.join(header)}).", ""]
    shown = body[:MAX_TABLE_ROWS]
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow([_format_cell(c) for c in header])
    writer.writerows([[_format_cell(c) for c in row] for row in shown])
    content = out.getvalue().splitlines()
    fence = _fence(content)
    size = (
        f"first {len(shown)} of {len(body)} rows" if len(body) > len(shown)
        else f"{len(body)} row{'s' * (len(body) != 1)}"
    )
    lines = []
    if folded:
        lines += [
            "<details class=\"gallery-data\">",
            f"<summary>The data: <code>{path.name}</code> ({size}, {len(header)} columns)"
            "</summary>",
            "",
        ]
    lines += [f"{fence}{{csv-table}} {path.name}", ":header-rows: 1", ":class: gallery-table", ""]
    lines += content + [fence, ""]
    more = f"{size}; " if len(body) > len(shown) else ""
    lines += [f"({more}{{download}}`download {path.name} <{rel}>`)", ""]
    notes = [COLUMN_NOTES[name] for name in COLUMN_NOTES if name in header]
    lines += [note for text in notes for note in (text, "")]
    if folded:
        lines += ["</details>", ""]
    return lines


def _figure_block(path: Path, rel: str) -> list[str]:
    return [
        f"```{{figure}} {rel}",
        f":alt: {_title(path)}",
        ":width: 100%",
        "",
        f"{_title(path)} (`{path.name}`)",
        "```",
        "",
    ]


def _writeup_block(path: Path, rel: str, level: int) -> list[str]:
    return [
        f"```{{include}} {rel}",
        f":heading-offset: {level}",
        ":relative-images:",
        "```",
        "",
    ]


def _text_block(path: Path, rel: str) -> list[str]:
    """The first ``MAX_TEXT_LINES`` lines of a text file, and a link to the whole file."""
    try:
        n_lines = len(path.read_text(encoding="utf-8").splitlines())
    except UnicodeDecodeError:
        return [f"{{download}}`{path.name} <{rel}>` ({path.stat().st_size // 1024} kB)", ""]
    language = "json" if path.suffix.lower() == ".json" else "text"
    lines = [f"```{{literalinclude}} {rel}", f":language: {language}"]
    if n_lines > MAX_TEXT_LINES:
        lines += [
            f":lines: 1-{MAX_TEXT_LINES}",
            f":caption: {path.name} (first {MAX_TEXT_LINES} of {n_lines} lines)",
        ]
    else:
        lines += [f":caption: {path.name}"]
    lines += ["```", "", f"({{download}}`download {path.name} <{rel}>`)", ""]
    return lines


def _kind_order(path: Path) -> int:
    suffix = path.suffix.lower()
    for rank, kinds in enumerate((WRITEUPS, FIGURES, TABLES, TEXTS)):
        if suffix in kinds:
            return rank
    return len(FIGURES)


def render(repo: Path, page_dir: Path, sources) -> str:
    """The gallery's markdown for ``sources``: (title, results dir, scripts dir) relative to
    ``repo``; file paths in the output are relative to ``page_dir`` (the including page)."""
    shown = FIGURES + TABLES + WRITEUPS + TEXTS
    lines = [
        "<!-- Generated by docs/_ext/results_gallery.py at build time: do not edit. -->",
        "",
    ]
    for title, results_dir, scripts_dir in sources:
        results = repo / results_dir
        scripts = sorted(p.stem for p in (repo / scripts_dir).glob("*.py")) if scripts_dir else []
        files = sorted(
            p for p in results.glob("*") if p.is_file() and p.suffix.lower() in shown
        ) if results.is_dir() else []
        lines += [f"## {title}", ""]
        if not files:
            lines += [
                f"No results are committed in `{results_dir}/` yet. Figures (PNG/SVG), tables "
                f"(CSV) and write-ups (Markdown) that the scripts in `{scripts_dir}/` write there "
                "appear here at the next build.",
                "",
            ]
            continue
        groups: dict[str | None, list[Path]] = {}
        for path in files:
            groups.setdefault(_owner(path.stem, scripts), []).append(path)
        for owner in sorted(groups, key=lambda s: (s is None, s or "")):
            if owner is None:
                lines += ["### Other results", ""]
            else:
                script = repo / scripts_dir / f"{owner}.py"
                lines += [f"### `{scripts_dir}/{owner}.py`", ""]
                summary = _script_summary(script)
                if summary:
                    lines += [summary, ""]
            reported = {p.stem for p in groups[owner] if p.suffix.lower() in WRITEUPS}
            for path in sorted(groups[owner], key=lambda p: (_kind_order(p), p.name)):
                rel = os.path.relpath(path, page_dir).replace(os.sep, "/")
                suffix = path.suffix.lower()
                if suffix in FIGURES:
                    lines += _figure_block(path, rel)
                elif suffix in TABLES:
                    lines += _csv_block(path, rel, folded=path.stem in reported)
                elif suffix in WRITEUPS:
                    lines += _writeup_block(path, rel, level=3)
                else:
                    lines += _text_block(path, rel)
    return "\n".join(lines).rstrip() + "\n"


def _generate(app) -> None:
    srcdir = Path(app.srcdir)
    repo = srcdir.parent
    page_dir = (srcdir / GALLERY_PAGE).parent
    text = render(repo, page_dir, app.config.results_gallery_sources)
    target = srcdir / GENERATED
    if not target.exists() or target.read_text(encoding="utf-8") != text:
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")


def _result_file_links():
    """The transform class, built here so that :func:`render` imports without Sphinx."""
    from docutils import nodes
    from sphinx import addnodes
    from sphinx.transforms import SphinxTransform

    class ResultFileLinks(SphinxTransform):
        """Links in an included write-up to files beside it become download links.

        A write-up in ``examples/results/`` is written to be read on GitHub, where
        ``[table](robot_arm.csv)`` or ``[script](../robot_arm.py)`` point at files. In the
        docs these are not documents, and MyST would report each as a missing cross-reference
        (an error under ``-W``). Here, before references are resolved, such a link to an
        existing file outside the documentation becomes a download link (the file is copied
        into the HTML output); a link to a directory keeps its text only. Links anywhere else
        are left to MyST.
        """

        default_priority = 100

        def apply(self, **kwargs) -> None:
            srcdir = Path(self.env.srcdir).resolve()
            results_dirs = [
                (srcdir.parent / d).resolve() for _, d, _ in self.config.results_gallery_sources
            ]
            page_dir = (srcdir / self.env.docname).parent
            for node in list(self.document.findall(addnodes.pending_xref)):
                if node.get("reftype") != "myst" or not node.source:
                    continue
                source = Path(node.source).resolve()
                if not any(source.is_relative_to(d) for d in results_dirs):
                    continue
                target = node["reftarget"].split("#")[0]
                if not target or "://" in target:
                    continue
                path = (source.parent / target).resolve()
                if not path.exists() or path.is_relative_to(srcdir):
                    continue
                text = node.astext() or path.name
                if path.is_dir():
                    node.replace_self(nodes.inline(text, text))
                    continue
                link = addnodes.download_reference(
                    "", "", refdoc=self.env.docname, refdomain="", reftype="download",
                    refexplicit=True, refwarn=False,
                    reftarget=os.path.relpath(path, page_dir).replace(os.sep, "/"),
                )
                link += nodes.inline(text, text)
                node.replace_self(link)

    return ResultFileLinks


def setup(app):
    app.add_config_value(
        "results_gallery_sources",
        [("Examples", "examples/results", "examples")],
        "env",
    )
    app.connect("builder-inited", _generate)
    app.add_transform(_result_file_links())
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}
