"""Every assertion of the suite can fail: none is true by construction (issue 31).

``vacuous_assertions`` reads a test file with ``ast`` and names each ``assert`` that holds
whatever the code under test does:

* a constant that is true, or ``not`` of one that is false (``assert True``, ``assert 1``,
  ``assert "text"``, ``assert not None``), and a non-empty tuple, list, set or dict (``assert
  (x == y, "message")`` is always true);
* an expression compared with itself (``x == x``, ``x is x``, ``x <= x``; one that calls a
  function may give two answers, so ``f(k) == f(k)`` checks that ``f`` is deterministic and
  is not flagged);
* a value compared with a lookup that falls back to that same value (``x == d.get(k, x)``,
  ``getattr(o, name, x) == x``): it passes for every key that ``d`` lacks. (A constant
  fallback says what a missing key means — ``counts.get(k, 0) == 0``: none counted — and is
  not flagged.)
* an ``or`` with an operand that is always true (``ok or True``);
* an ``or`` with an escape hatch over a list written in the test (``… or k not in KNOWN``,
  ``KNOWN`` a literal of the test module): it checks the keys listed there and passes for all
  others, so a new case is silently untested. (``k not in`` data that the code under test
  computed is a real implication and is not flagged.)
"""

from __future__ import annotations

import ast

import pytest

from tests.helpers import ROOT

_LITERALS = (ast.Tuple, ast.List, ast.Set, ast.Dict)
_REFLEXIVE = (ast.Eq, ast.Is, ast.LtE, ast.GtE)  # x op x is true for every x (NaN aside)


def _always_true(node: ast.expr) -> bool:
    """A constant, or a display, whose truth is known without running anything."""
    if isinstance(node, ast.Constant):
        return bool(node.value) and node.value is not Ellipsis
    if isinstance(node, ast.Tuple | ast.List | ast.Set):
        return bool(node.elts)
    if isinstance(node, ast.Dict):
        return bool(node.keys)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        inner = node.operand
        return isinstance(inner, ast.Constant) and not inner.value
    return False


def _same(a: ast.AST, b: ast.AST) -> bool:
    return ast.dump(a) == ast.dump(b)


def _calls(node: ast.AST) -> bool:
    """Whether evaluating ``node`` calls something (twice may then give two answers)."""
    return any(isinstance(n, ast.Call | ast.Await) for n in ast.walk(node))


def _default_of_lookup(node: ast.expr) -> ast.expr | None:
    """``x`` of ``d.get(k, x)`` or ``getattr(o, name, x)``: the value the lookup falls back to."""
    if not isinstance(node, ast.Call) or node.keywords:
        return None
    if isinstance(node.func, ast.Attribute) and node.func.attr == "get" and len(node.args) == 2:
        return node.args[1]
    if isinstance(node.func, ast.Name) and node.func.id == "getattr" and len(node.args) == 3:
        return node.args[2]
    return None


def _compares_with_itself(node: ast.expr) -> str | None:
    if not isinstance(node, ast.Compare):
        return None
    operands = [node.left, *node.comparators]
    for op, left, right in zip(node.ops, operands[:-1], operands[1:], strict=True):
        if isinstance(op, _REFLEXIVE) and _same(left, right) and not _calls(left):
            return "compares an expression with itself"
        if isinstance(op, ast.Eq):
            for value, lookup in ((left, right), (right, left)):
                fallback = _default_of_lookup(lookup)
                if (
                    fallback is not None
                    and not isinstance(fallback, ast.Constant)
                    and _same(fallback, value)
                ):
                    return "compares a value with a lookup that falls back to it"
    return None


def _test_literals(tree: ast.Module) -> set[str]:
    """Names the test module binds, at its top level, to a literal tuple, list, set or dict."""
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.value, _LITERALS):
            names |= {t.id for t in node.targets if isinstance(t, ast.Name)}
        elif (
            isinstance(node, ast.AnnAssign)
            and isinstance(node.value, _LITERALS)
            and isinstance(node.target, ast.Name)
        ):
            names.add(node.target.id)
    return names


def _escape_hatch(operand: ast.expr, literals: set[str]) -> bool:
    """``k not in KNOWN`` with ``KNOWN`` written in the test (a literal, or a name bound to one)."""
    if not (
        isinstance(operand, ast.Compare)
        and len(operand.ops) == 1
        and isinstance(operand.ops[0], ast.NotIn)
    ):
        return False
    container = operand.comparators[0]
    return isinstance(container, _LITERALS) or (
        isinstance(container, ast.Name) and container.id in literals
    )


def _why_vacuous(test: ast.expr, literals: set[str]) -> str | None:
    if _always_true(test):
        return "asserts a value that is always true"
    if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.Or):
        if any(_always_true(v) for v in test.values):
            return "an `or` with an operand that is always true"
        if any(_escape_hatch(v, literals) for v in test.values):
            return "an `or … not in <a list of the test>` escape hatch"
        return None
    return _compares_with_itself(test)


def vacuous_assertions(source: str, filename: str = "<test>") -> list[str]:
    """``file:line: why`` for each assertion of ``source`` that cannot fail."""
    tree = ast.parse(source)
    literals = _test_literals(tree)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Assert):
            why = _why_vacuous(node.test, literals)
            if why is not None:
                found.append(f"{filename}:{node.lineno}: {why}")
    return found


def test_no_assertion_of_the_suite_is_true_by_construction() -> None:
    found = []
    for path in sorted((ROOT / "tests").rglob("*.py")):
        found += vacuous_assertions(path.read_text("utf-8"), str(path.relative_to(ROOT)))
    assert not found, "\n".join(found)


# ------------------------------------------------------------- the check catches each form


@pytest.mark.parametrize(
    "assertion",
    [
        "assert True",
        "assert 1",
        "assert 'a literal'",
        "assert not None",
        "assert (x == 2, 'the message meant for after the comma')",
        "assert [x]",
        "assert {'k': x}",
        "assert x == x",
        "assert page.title is page.title",
        "assert at.title[0].value <= at.title[0].value",
        "assert 0 < n == n",
        "assert x == d.get(k, x)",
        "assert d.get(page, at.title[0].value) == at.title[0].value",
        "assert getattr(o, 'name', x) == x",
        "assert ok or True",
        "assert 1 or ok",
        "assert chinese(text) or page not in ZH_TITLES",
        "assert chinese(text) or page not in ('corpus', 'train')",
    ],
)
def test_the_check_names_each_vacuous_form(assertion: str) -> None:
    source = f"ZH_TITLES = {{'corpus': '语料库'}}\n\n\ndef test_it():\n    {assertion}\n"
    assert len(vacuous_assertions(source, "t.py")) == 1, assertion
    assert vacuous_assertions(source, "t.py")[0].startswith("t.py:5: ")


@pytest.mark.parametrize(
    "assertion",
    [
        "assert x",
        "assert not x",
        "assert False or x",
        "assert x == y",
        "assert x == d.get(k)",
        "assert x == d.get(k, y)",
        "assert d.get(k, x) != x",
        "assert x == {'a': 1}.get(k, 0)",
        "assert a or b",
        "assert ok or page not in computed_pages()",
        "assert ok or page not in result.pages",
        "assert ok or page in ZH_TITLES",
        "assert (x)",
        "assert ()",
        "assert x < x + 1",
        "assert [split(k) for k in keys] == [split(k) for k in keys]",
        "assert counts.get('control_chars', 0) == 0",
        "assert 0 == getattr(o, 'n', 0)",
    ],
)
def test_the_check_leaves_assertions_that_can_fail(assertion: str) -> None:
    source = f"ZH_TITLES = {{'corpus': '语料库'}}\n\n\ndef test_it():\n    {assertion}\n"
    assert vacuous_assertions(source, "t.py") == [], assertion
