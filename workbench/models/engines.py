"""Who decodes a translation, and the weights an export may have: the one source of these
choices for the services, the CLI and the pages (pure Python: importing it loads no model).

- ``handwritten``: core_model's decoder — the default, the reference and the fallback.
- ``ctranslate2``: the version exported to CTranslate2 (models.ctranslate2_export), decoded
  by that engine (workbench.models.ctranslate2_translator), when the package is installed.
"""

from __future__ import annotations

import importlib.util

from workbench.messages import N_

ENGINES = ("handwritten", "ctranslate2")
MAX_BEAM = 16  # the widest beam search a request may ask of any engine
EXPORT_FORMATS = ("ctranslate2",)  # what `export-version` writes
# message ids: a page shows them translated (``ui.i18n.translate``)
ENGINE_LABELS = {"handwritten": N_("handwritten decoder"), "ctranslate2": N_("CTranslate2")}

# Weight types of a CTranslate2 export; the first is the export's default. CTranslate2
# converts at load time to what the machine supports (int16 runs as int8 or float32 on CPUs
# without Intel MKL).
QUANTIZATIONS = ("float32", "int8", "int16")
UNKNOWN_QUANTIZATION = N_("Unknown quantization {quantization!r}; choose one of {choices}.")
# The engine translates with int8 weights: 2-3x faster than float32 on a CPU, BLEU within
# 0.1 of it on Multi30k (bench/decode_speed.py); float32 decodes exactly as our decoder.
ENGINE_QUANTIZATION = "int8"


def ctranslate2_installed() -> bool:
    return importlib.util.find_spec("ctranslate2") is not None


def available_engines() -> list[str]:
    """The engines this installation can run, the default first."""
    return [e for e in ENGINES if e != "ctranslate2" or ctranslate2_installed()]
