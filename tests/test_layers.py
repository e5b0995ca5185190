"""The house rules of docs/ARCHITECTURE.md, checked on the source: imports run one way.

Front ends (ui/, the CLI, the HTTP routes) → workbench services → db/ and core_model/; inside
workbench/ each package imports only packages below it in ``WORKBENCH_ORDER``, so there are no
cycles between packages.
"""

from __future__ import annotations

import ast
from pathlib import Path

from tests.helpers import ROOT

# Lowest first: a package may import the top-level modules and the packages before it.
WORKBENCH_ORDER = (
    "backup",
    "team",
    "corpus",
    "models",
    "memory",
    "curation",
    "serving",
    "training",
    "evaluation",
    "cli",
)
RANK = {name: i for i, name in enumerate(WORKBENCH_ORDER)}


def imported_modules(path: Path) -> set[str]:
    """Every module `path` imports (``from workbench import x`` counts as ``workbench.x``)."""
    tree = ast.parse(path.read_text("utf-8"))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
            found |= {f"{node.module}.{alias.name}" for alias in node.names}
    return found


def workbench_package(module: str) -> str | None:
    """'workbench.corpus.pairs' → 'corpus'; top-level modules and non-workbench → None."""
    parts = module.split(".")
    if parts[0] != "workbench" or len(parts) < 2 or parts[1] not in RANK:
        return None
    return parts[1]


def test_every_workbench_module_lives_in_a_known_package() -> None:
    packages = {p.name for p in (ROOT / "workbench").iterdir() if (p / "__init__.py").exists()}
    assert packages == set(WORKBENCH_ORDER)
    for package in packages:
        doc = ast.get_docstring(
            ast.parse((ROOT / "workbench" / package / "__init__.py").read_text())
        )
        assert doc and len(doc) > 80, f"workbench/{package}/__init__.py names its services"


def test_workbench_packages_import_only_packages_below_them() -> None:
    wrong = []
    for path in sorted((ROOT / "workbench").glob("*/*.py")):
        me = path.parent.name
        for module in imported_modules(path):
            other = workbench_package(module)
            if other is not None and other != me and RANK[other] > RANK[me]:
                wrong.append(f"{path.relative_to(ROOT)} imports {module}")
    assert not wrong, "\n".join(wrong)


# The one exception, on purpose: opening the database runs the data step of migration 0008
# (regrouping old corpora's splits needs the corpus' split rule, which db/ may not import).
TOP_LEVEL_EXCEPTIONS = {
    ("storage.py", "workbench.corpus"),
    ("storage.py", "workbench.corpus.splits"),
    # a restore killed half-way is finished or rolled back before the database is opened
    ("storage.py", "workbench.backup"),
    ("storage.py", "workbench.backup.restore_journal"),
}


def test_the_top_level_modules_import_no_package() -> None:
    """The top-level modules (settings, storage, errors, locks) are what every package
    stands on (__main__ only starts the CLI)."""
    for path in sorted((ROOT / "workbench").glob("*.py")):
        if path.name == "__main__.py":
            continue
        used = {
            m
            for m in imported_modules(path)
            if workbench_package(m) and (path.name, m) not in TOP_LEVEL_EXCEPTIONS
        }
        assert not used, f"{path.name} imports {used}"


def test_lower_layers_never_import_the_application() -> None:
    """core_model is usable in a notebook with no database; db knows nothing of workbench."""
    for layer, forbidden in (
        ("core_model", ("workbench", "db", "ui")),
        ("db", ("workbench", "ui")),
    ):
        for path in sorted((ROOT / layer).rglob("*.py")):
            bad = [m for m in imported_modules(path) if m.split(".")[0] in forbidden]
            assert not bad, f"{path.relative_to(ROOT)} imports {bad}"


def test_transformers_is_a_test_only_dependency() -> None:
    """A Marian checkpoint is read with safetensors/torch and SentencePiece
    (core_model.marian): `transformers` only proves, in the tests, that it is read right."""
    app = [ROOT / "streamlit_app.py"]
    for layer in ("core_model", "db", "workbench", "ui"):
        app += sorted((ROOT / layer).rglob("*.py"))
    for path in app:
        bad = [m for m in imported_modules(path) if m.split(".")[0] == "transformers"]
        assert not bad, f"{path.relative_to(ROOT)} imports {bad}"
