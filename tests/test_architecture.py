"""The package's import graph: no cycle, and every import points down the data flow
model → density → kernels → estimators → results → compare / plots."""

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "pymc_evidence"

#: Each module's layer; a module may import only modules of its own layer or below. Results
#: are a layer below the estimators that build them (and never import one); plumbing is below
#: everything.
LAYERS = {
    "plumbing": 0, "model": 1, "kernels": 2, "estimators": 3, "outputs": 4, "package": 5,
}
MODULE_LAYER = {
    "_compat": "plumbing", "_constants": "plumbing", "_random": "plumbing",
    "_progress": "plumbing", "_parallel": "plumbing", "_checkpoint": "plumbing",
    "_validation": "plumbing",
    "symmetry": "model", "_label_switching": "model", "density": "model", "results": "model",
    "testing": "model",
    "kernels": "kernels", "scale_moves": "kernels", "_optimize": "kernels",
    "estimators": "estimators",
    "comparison": "outputs", "plots": "outputs",
    "__init__": "package",
}


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE).with_suffix("").parts
    return ".".join(parts)


def _layer(module: str) -> int:
    top = module.split(".")[0]
    if top not in MODULE_LAYER:
        pytest.fail(f"module {module!r} has no layer in tests/test_architecture.py: add it")
    return LAYERS[MODULE_LAYER[top]]


def _imports(path: Path) -> set[str]:
    """Modules of the package that ``path`` imports anywhere (also inside functions)."""
    tree = ast.parse(path.read_text())
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module == "pymc_evidence":  # from pymc_evidence import kernels
                found.update(alias.name for alias in node.names)
            elif node.module.startswith("pymc_evidence."):
                found.add(node.module.removeprefix("pymc_evidence."))
        elif isinstance(node, ast.Import):
            found.update(a.name.removeprefix("pymc_evidence.") for a in node.names
                         if a.name.startswith("pymc_evidence."))
    return found


@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    return {_module_name(p): _imports(p) for p in PACKAGE.rglob("*.py")}


def test_every_import_points_down_the_flow(graph):
    upward = [
        f"{module} -> {target}"
        for module, targets in graph.items()
        for target in targets
        if _layer(target) > _layer(module)
    ]
    assert not upward, f"imports against the flow: {upward}"


def test_estimators_never_import_each_others_public_modules(graph):
    """Estimator modules share plumbing, not each other (their private helpers excepted)."""
    crossing = [
        f"{module} -> {target}"
        for module, targets in graph.items() if module.startswith("estimators.")
        for target in targets
        if target.startswith("estimators.") and not target.split(".")[1].startswith("_")
    ]
    assert not crossing


def test_no_import_cycle(graph):
    names = {name.removesuffix(".__init__") for name in graph}
    edges = {name.removesuffix(".__init__"): {t for t in targets if t in names}
             for name, targets in graph.items()}
    state: dict[str, int] = {}

    def visit(node, path):
        state[node] = 1
        for target in edges[node]:
            if state.get(target) == 1:
                pytest.fail(f"import cycle: {' -> '.join(path + [node, target])}")
            if target not in state:
                visit(target, path + [node])
        state[node] = 2

    for node in edges:
        if node not in state:
            visit(node, [])


def test_the_graph_is_read():
    """The checks above see the imports they must judge."""
    imports = _imports(PACKAGE / "estimators" / "thermodynamic.py")
    assert {"density", "results", "_checkpoint", "estimators._tempering"} <= imports
    assert "kernels" in _imports(PACKAGE / "estimators" / "_tempering.py")
