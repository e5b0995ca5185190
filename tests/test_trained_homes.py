"""``tests.helpers.trained_home``, which most trained fixtures stand on: a state is trained
once per run (a module asking again gets a copy of the same training, not a new one), its
first trainings are shared with the states that start alike, and each copy is a data folder
of its own."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers import module_home, trained_home, training
from workbench.models import registry
from workbench.training import run_info


def _runs(home: Path) -> list[tuple[int, object]]:
    with module_home(home):
        return [(r.id, r.finished_at) for r in run_info.list_runs()]


def test_a_state_is_trained_once_and_every_module_gets_its_own_copy(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    first = trained_home(tmp_path_factory, "toy", training(preset="tiny"))
    again = trained_home(tmp_path_factory, "toy", training(preset="tiny"))
    longer = trained_home(
        tmp_path_factory, "toy", training(preset="tiny"), training(preset="tiny", max_steps=15)
    )
    assert first.home != again.home
    assert again.version_ids == first.version_ids
    assert _runs(again.home) == _runs(first.home)  # the same training, copied
    assert _runs(longer.home)[-1] == _runs(first.home)[0]  # listed newest first
    assert len(longer.version_ids) == 2 and longer.version_ids[0] == first.version_ids[0]

    with module_home(first.home):  # a module's changes stay in its copy
        registry.delete_version(first.version_ids[0])
        assert registry.list_versions() == []
    with module_home(again.home):
        assert [v.id for v in registry.list_versions()] == again.version_ids
        folder = registry.artifact_dir(again.version_ids[0])
        assert folder.is_relative_to(again.home) and (folder / "model.safetensors").is_file()
