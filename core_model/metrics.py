"""Corpus-level BLEU and chrF with sacreBLEU (detokenized, cased — the comparable numbers).

Chinese or Japanese references need sacreBLEU's 'zh'/'ja-mecab' tokenizers for BLEU; '13a' on
unsegmented text would score whole sentences as single words. We pick 'zh' automatically when
the references are mostly CJK.
"""

from __future__ import annotations

from collections.abc import Sequence

import sacrebleu


def _is_cjk(ch: str) -> bool:
    cp = ord(ch)
    return (
        0x4E00 <= cp <= 0x9FFF
        or 0x3400 <= cp <= 0x4DBF
        or 0x3040 <= cp <= 0x30FF  # kana
        or 0xF900 <= cp <= 0xFAFF
        or 0x20000 <= cp <= 0x2FA1F
    )


def bleu_tokenizer_for(refs: Sequence[str]) -> str:
    """'zh' when over a third of the reference letters are CJK, else sacreBLEU's default '13a'."""
    letters = [ch for r in refs[:500] for ch in r if ch.isalpha()]
    if letters and sum(map(_is_cjk, letters)) / len(letters) > 0.33:
        return "zh"
    return "13a"


def corpus_bleu(hyps: Sequence[str], refs: Sequence[str], tokenize: str | None = None) -> float:
    """sacreBLEU corpus BLEU in [0, 100] (one reference per hypothesis)."""
    if not hyps:
        return 0.0
    tok = tokenize or bleu_tokenizer_for(refs)
    return float(sacrebleu.corpus_bleu(list(hyps), [list(refs)], tokenize=tok).score)


def corpus_chrf(hyps: Sequence[str], refs: Sequence[str]) -> float:
    """sacreBLEU chrF (character n-gram F-score, β=2) in [0, 100]; tokenizer-free."""
    if not hyps:
        return 0.0
    return float(sacrebleu.corpus_chrf(list(hyps), [list(refs)]).score)


def score(hyps: Sequence[str], refs: Sequence[str], tokenize: str | None = None) -> dict:
    """{'bleu', 'chrf', 'n'} for hypotheses against their references."""
    if len(hyps) != len(refs):
        raise ValueError(f"{len(hyps)} hypotheses but {len(refs)} references")
    return {
        "bleu": round(corpus_bleu(hyps, refs, tokenize), 2),
        "chrf": round(corpus_chrf(hyps, refs), 2),
        "n": len(hyps),
    }


def sentence_bleu(hyp: str, ref: str, tokenize: str | None = None) -> float:
    """Smoothed sentence BLEU for per-sentence side-by-side views."""
    tok = tokenize or bleu_tokenizer_for([ref])
    return float(sacrebleu.sentence_bleu(hyp, [ref], tokenize=tok).score)
