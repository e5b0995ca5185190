"""Compare's loss curves: a continued version is drawn where its ancestors' steps ended."""

from __future__ import annotations

from types import SimpleNamespace

from ui.compare_panel import steps_before


def _version(id: int, steps: int, parent: int | None = None) -> SimpleNamespace:
    return SimpleNamespace(id=id, parent_version_id=parent, metrics={"steps": steps})


def test_a_continued_version_starts_after_its_ancestors_steps() -> None:
    versions = {v.id: v for v in (_version(1, 285), _version(2, 60, 1), _version(3, 40, 2))}
    assert steps_before(versions[1], versions) == 0  # a new model starts at step 0
    assert steps_before(versions[2], versions) == 285
    assert steps_before(versions[3], versions) == 345  # the parent's and its parent's


def test_a_deleted_ancestor_ends_the_count() -> None:
    versions = {v.id: v for v in (_version(2, 60, 1), _version(3, 40, 2))}  # #1 deleted
    assert steps_before(versions[3], versions) == 60
    assert steps_before(versions[2], versions) == 0
