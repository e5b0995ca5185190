"""Every error a service raises for the user carries a message id (issue 23): checked on the
source of ``workbench/``, so a page can always show it in the user's language.

A ``raise`` of ``WorkbenchError``, ``PermissionDenied`` or any subclass defined in
``workbench/`` must pass, as its message, an ``N_("literal")`` call: a whole sentence with
named placeholders, its values given as keyword parameters. Also accepted, since every text
they can give is a marked literal all the same: ``TABLE[key]`` where ``TABLE`` is a module-level
dict literal whose values are all ``N_("literal")`` calls, a module-level ``NAME =
N_("literal")`` of any module, a function's parameter annotated ``MessageId`` (its callers
pass marked literals), and ``a if cond else b`` of accepted messages. A re-raise (``raise
exc``, ``raise X from exc``) and an error built with no message are left alone.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

from tests.helpers import ROOT

BASE_ERRORS = {"WorkbenchError"}
PLACEHOLDER = re.compile(r"(?<!\{)\{(\w+)(?:[!:][^{}]*)?\}")


def sources() -> dict[Path, ast.Module]:
    return {p: ast.parse(p.read_text("utf-8")) for p in sorted((ROOT / "workbench").rglob("*.py"))}


def _name(node: ast.expr) -> str | None:
    """``X`` or ``module.X`` → "X"."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def error_classes(trees: dict[Path, ast.Module]) -> set[str]:
    """WorkbenchError and every class of ``workbench/`` deriving from it, at any depth."""
    found = set(BASE_ERRORS)
    classes = [n for tree in trees.values() for n in ast.walk(tree) if isinstance(n, ast.ClassDef)]
    grew = True
    while grew:
        grew = False
        for cls in classes:
            if cls.name not in found and any(_name(b) in found for b in cls.bases):
                found.add(cls.name)
                grew = True
    return found


def _marked(node: ast.expr) -> str | None:
    """The literal of an ``N_("literal")`` call, else None."""
    if (
        isinstance(node, ast.Call)
        and _name(node.func) == "N_"
        and len(node.args) == 1
        and not node.keywords
        and isinstance(node.args[0], ast.Constant)
        and isinstance(node.args[0].value, str)
    ):
        return node.args[0].value
    return None


def _assignments(tree: ast.Module) -> Iterator[tuple[str, ast.expr]]:
    """(NAME, value) of the module-level ``NAME = value`` and ``NAME: T = value``."""
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, value = node.targets[0], node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            target, value = node.target, node.value
        else:
            continue
        if isinstance(target, ast.Name):
            yield target.id, value


def _tables(tree: ast.Module) -> dict[str, list[str]]:
    """Module-level ``NAME = {...}`` dicts whose values are all ``N_("literal")`` calls:
    NAME -> those literals."""
    tables: dict[str, list[str]] = {}
    for name, value in _assignments(tree):
        if isinstance(value, ast.Dict) and value.values:
            literals = [_marked(v) for v in value.values]
            if all(literal is not None for literal in literals):
                tables[name] = literals  # type: ignore[assignment]
    return tables


def constants(trees: dict[Path, ast.Module]) -> dict[str, list[str]]:
    """Module-level ``NAME = N_("literal")`` of every module: NAME -> [that literal]."""
    found: dict[str, list[str]] = {}
    for tree in trees.values():
        for name, value in _assignments(tree):
            literal = _marked(value)
            if literal is not None:
                found[name] = [literal]
    return found


def message_id_parameters(tree: ast.Module) -> set[str]:
    """Names of function parameters annotated ``MessageId`` (the type says what they hold)."""
    return {
        arg.arg
        for node in ast.walk(tree)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        for arg in node.args.args + node.args.kwonlyargs
        if arg.annotation is not None and _name(arg.annotation) == "MessageId"
    }


def message_ids(node: ast.expr, tables: dict[str, list[str]]) -> list[str] | None:
    """The message ids an error's message argument can be (empty: not known here, but a
    message id by its type), or None when it is not one."""
    literal = _marked(node)
    if literal is not None:
        return [literal]
    if isinstance(node, ast.Name) and node.id in tables:
        return tables[node.id]
    if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name):
        return tables.get(node.value.id)
    if isinstance(node, ast.IfExp):
        body, orelse = message_ids(node.body, tables), message_ids(node.orelse, tables)
        return body + orelse if body is not None and orelse is not None else None
    return None


def raised_errors(trees: dict[Path, ast.Module]) -> Iterator[tuple[Path, ast.Call, ast.expr]]:
    """(file, the error's construction, its message argument) of every raise of an error
    class with a message."""
    errors = error_classes(trees)
    for path, tree in trees.items():
        for node in ast.walk(tree):
            if not isinstance(node, ast.Raise) or not isinstance(node.exc, ast.Call):
                continue  # a bare raise, a re-raise of a caught exception, a class
            call = node.exc
            if _name(call.func) not in errors:
                continue
            message = call.args[0] if call.args else None
            message = next((k.value for k in call.keywords if k.arg == "message"), message)
            if message is not None:
                yield path, call, message


def where(path: Path, node: ast.AST) -> str:
    return f"{path.relative_to(ROOT)}:{node.lineno}"


def accepted(trees: dict[Path, ast.Module]) -> dict[Path, dict[str, list[str]]]:
    """Per file, the names an error's message may be: its tables, every module's constants,
    its ``MessageId`` parameters (no literal known)."""
    shared = constants(trees)
    return {
        path: {
            **shared,
            **_tables(tree),
            **{name: [] for name in message_id_parameters(tree)},
        }
        for path, tree in trees.items()
    }


def test_every_raised_workbench_error_carries_a_message_id() -> None:
    trees = sources()
    tables = accepted(trees)
    offenders = [
        where(path, message)
        for path, _call, message in sorted(
            raised_errors(trees), key=lambda found: (found[0], found[2].lineno)
        )
        if message_ids(message, tables[path]) is None
    ]
    assert not offenders, (
        f'{len(offenders)} raises whose message is not N_("a literal") with named '
        f"parameters (issue 23): {offenders}"
    )


def test_every_placeholder_of_a_raised_message_is_given() -> None:
    """``WorkbenchError(N_("no corpus {name!r}"))`` without ``name=`` would show the braces
    (or fail with a KeyError when some other parameter is given)."""
    trees = sources()
    tables = accepted(trees)
    problems = []
    for path, call, message in raised_errors(trees):
        if any(k.arg is None for k in call.keywords):
            continue  # **params: not checked here
        given = {k.arg for k in call.keywords}
        for msgid in message_ids(message, tables[path]) or []:
            missing = set(PLACEHOLDER.findall(msgid)) - given
            if missing:
                problems.append(f"{where(path, message)}: {msgid!r} lacks {sorted(missing)}")
    assert not problems, problems


def test_the_scan_finds_subclasses_and_offenders() -> None:
    """The scan itself: a subclass of a subclass counts, each kind of message is judged."""
    tree = ast.parse(
        "class A(WorkbenchError): ...\n"
        "class B(errors.A): ...\n"
        "T = {1: N_('one {x}'), 2: N_('two')}\n"
        "raise B(f'bad {x}')\n"
        "raise A(N_('good {x}'), x=1)\n"
        "raise WorkbenchError(T[k], x=1)\n"
        "raise PermissionDenied(N_('a') if c else 'b')\n"
        "raise B from exc\n"
        "raise ValueError(f'not ours {x}')\n"
        "raise A(message='fragment ' + x)\n"
        "C = N_('constant {y}')\n"
        "raise A(C, y=2)\n"
        "def f(refusal: MessageId, other: str):\n"
        "    raise A(refusal)\n"
        "    raise A(other)\n"
    )
    path = ROOT / "workbench" / "example.py"
    trees = {path: tree}
    assert error_classes(trees) == {"WorkbenchError", "A", "B"}
    judged = {
        message.lineno: message_ids(message, accepted({path: tree})[path])
        for _path, _call, message in raised_errors({path: tree, **_errors_module()})
        if _path == path
    }
    assert judged == {
        **{4: None, 5: ["good {x}"], 6: ["one {x}", "two"], 7: None, 10: None},
        **{12: ["constant {y}"], 14: [], 15: None},
    }


def _errors_module() -> dict[Path, ast.Module]:
    path = ROOT / "workbench" / "errors.py"
    return {path: ast.parse(path.read_text("utf-8"))}
