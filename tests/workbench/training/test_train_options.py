"""The training choices a person sees (`workbench.training.train_options`) say what the code
does: each preset's description names the layers and width its preset has; checking them and
queueing a run from the command line needs no torch."""

from __future__ import annotations

import json
from pathlib import Path

from core_model.training.config import PRESET_CHOICES
from core_model.transformer.config import PRESETS
from tests.helpers import IMPORT_LOG, cli_that_starts_a_worker, imports_of, make_toy_corpus
from workbench.training import train_options


def test_each_preset_is_described_with_the_layers_and_width_it_has() -> None:
    assert list(train_options.PRESET_DESCRIPTIONS) == list(PRESET_CHOICES)
    for name, preset in PRESETS.items():
        size = f"{preset['n_encoder_layers']}+{preset['n_decoder_layers']} layers"
        shown = train_options.PRESET_DESCRIPTIONS[name]
        assert shown.startswith(f"{size}, d={preset['d_model']}: "), (name, shown)


def test_queueing_a_run_from_the_command_line_does_not_import_torch(wb_home: Path) -> None:
    """`python -m workbench train` only checks the options, writes the run's row and starts a
    worker (which imports torch itself): without torch's import it answers in ~3.0 s on a
    2-core Xeon where it took 5.7-6.8 s. Python's own import log says what it imported."""
    corpus_id = make_toy_corpus()
    done, imported = imports_of(
        cli_that_starts_a_worker(
            "train", "--corpus", str(corpus_id), "--max-steps", "1", env=IMPORT_LOG
        )
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout.strip().splitlines()[-1])["status"] == "queued"
    assert "workbench.training.runs" in imported  # the log is read
    assert "torch" not in imported
