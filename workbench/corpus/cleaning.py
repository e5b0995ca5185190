"""Cleaning pairs, at import and on demand: filters that drop noisy pairs and a Chinese script
normalisation that rewrites them — counted and previewed before anything happens, and, for a
corpus, undoable.

The rules (``Cleaner.check``, one pair at a time; the options are ``CleaningOptions``):

* **language identification** (py3langid, a fork of langid.py: 97 languages, ~50 µs a
  sentence): a side is dropped only when the identifier is *confident* (normalised
  probability ≥ ``LANGID_CONFIDENCE``) that it is another language than the corpus says.
  Short sentences ("Stop!") get low confidence and are kept: on Multi30k and Tatoeba
  validation sentences this rule drops none of the well-formed pairs.
* **length ratio**: the longer side has more than ``max_ratio`` times the tokens of the
  shorter (``text_rules.rough_token_count``: CJK characters count one each) — misaligned.
* **copies**: source equals target (ignoring case and spacing) — untranslated.
* **Chinese script** (OpenCC): the Chinese side(s) converted Traditional → Simplified
  (``t2s``) or Simplified → Traditional (``s2t``), so one corpus does not teach two scripts.

Pure: no database. At import the rules are options of the preview
(``workbench.corpus.import_checks``): dropped rows are reported as ``filtered`` and never written,
converted ones as warnings. A corpus is cleaned, and a clean-up undone, by
``workbench.corpus.cleanups``.
"""

from __future__ import annotations

import functools
from dataclasses import asdict, dataclass
from typing import Any

from workbench.corpus.text_rules import normalize_text, rough_token_count
from workbench.errors import WorkbenchError
from workbench.messages import N_, Message

LANGID_CONFIDENCE = 0.9
# The Chinese script conversions (OpenCC configurations) every front end offers.
CHINESE_CONVERSIONS = {
    "none": N_("leave as it is"),
    "t2s": N_("Traditional → Simplified"),
    "s2t": N_("Simplified → Traditional"),
}
# Why a pair is dropped or changed, in the words every report uses (message ids: ui.i18n).
REASONS = {
    "lang_source": N_("source in another language"),
    "lang_target": N_("target in another language"),
    "ratio": N_("length ratio too large"),
    "copy": N_("target is a copy of the source"),
    "converted": N_("Chinese script converted"),
    "duplicate": N_("duplicate after conversion"),
}
DROP_REASONS = ("lang_source", "lang_target", "ratio", "copy", "duplicate")
# Language families py3langid tells apart but a corpus' language code does not.
_LANG_ALIASES = {"zh": {"zh", "yue", "wuu"}, "no": {"no", "nb", "nn"}, "nb": {"no", "nb", "nn"}}


@dataclass(frozen=True)
class CleaningOptions:
    """What to clean. The default cleans nothing."""

    language_id: bool = False
    max_ratio: float | None = None  # drop pairs whose token-length ratio is above it
    drop_copies: bool = False
    chinese: str = "none"  # a key of CHINESE_CONVERSIONS

    def __post_init__(self) -> None:
        if self.chinese not in CHINESE_CONVERSIONS:
            raise WorkbenchError(
                N_("Unknown Chinese conversion {name!r}: use {choices}."),
                name=self.chinese,
                choices=", ".join(CHINESE_CONVERSIONS),
            )
        if self.max_ratio is not None and not self.max_ratio >= 1:
            raise WorkbenchError(
                N_("The length ratio must be at least 1, got {ratio}."), ratio=self.max_ratio
            )

    @property
    def active(self) -> bool:
        return (
            self.language_id
            or self.max_ratio is not None
            or self.drop_copies
            or self.chinese != "none"
        )

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Verdict:
    """What the rules make of one pair: dropped (``reason``), changed, or kept as it is."""

    reason: str | None  # a DROP_REASONS key, or "converted", or None: unchanged
    source: str
    target: str
    detail: str = ""  # a Message, e.g. "looks like en (0.99)" (a page translates it)

    @property
    def dropped(self) -> bool:
        return self.reason in DROP_REASONS


def base_language(code: str) -> str:
    """'pt-BR' -> 'pt', 'zh_Hant' -> 'zh'."""
    return code.replace("_", "-").split("-")[0].lower()


@functools.cache
def _identifier() -> Any:
    from py3langid.langid import MODEL_FILE, LanguageIdentifier

    return LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True)


def identifiable(lang: str) -> bool:
    """Whether language identification knows the corpus language ``lang``."""
    return base_language(lang) in _identifier().labels


@functools.cache
def _converter(config: str) -> Any:
    import opencc

    return opencc.OpenCC(config)


class Cleaner:
    """The rules of ``options`` for a corpus' two languages."""

    def __init__(self, options: CleaningOptions, src_lang: str, tgt_lang: str) -> None:
        self.options = options
        self.langs = (base_language(src_lang), base_language(tgt_lang))
        # Sides whose language py3langid does not know are never judged by it.
        self.check_lang = tuple(options.language_id and identifiable(lang) for lang in self.langs)
        convert = options.chinese != "none"
        self.convert = tuple(convert and lang == "zh" for lang in self.langs)

    @property
    def unchecked_languages(self) -> list[str]:
        """Corpus languages that language identification cannot check."""
        if not self.options.language_id:
            return []
        return [lang for lang, ok in zip(self.langs, self.check_lang, strict=True) if not ok]

    def check(self, source: str, target: str) -> Verdict:
        for side, text, reason in ((0, source, "lang_source"), (1, target, "lang_target")):
            if self.check_lang[side]:
                found, confidence = _identifier().classify(text)
                expected = self.langs[side]
                if found not in _LANG_ALIASES.get(expected, {expected}) and (
                    confidence >= LANGID_CONFIDENCE
                ):
                    detail = Message(
                        N_("looks like {lang} ({confidence})"),
                        lang=found,
                        confidence=f"{confidence:.2f}",
                    )
                    return Verdict(reason, source, target, detail)
        if self.options.drop_copies and _squash(source) == _squash(target):
            return Verdict("copy", source, target)
        if self.options.max_ratio is not None:
            a, b = rough_token_count(source), rough_token_count(target)
            if max(a, b) > self.options.max_ratio * max(1, min(a, b)):
                return Verdict("ratio", source, target, Message(N_("{a} vs {b} tokens"), a=a, b=b))
        if any(self.convert):
            new_source = self._convert(source) if self.convert[0] else source
            new_target = self._convert(target) if self.convert[1] else target
            if (new_source, new_target) != (source, target):
                return Verdict("converted", new_source, new_target)
        return Verdict(None, source, target)

    def _convert(self, text: str) -> str:
        return normalize_text(_converter(self.options.chinese).convert(text))


def _squash(text: str) -> str:
    return "".join(text.casefold().split())
