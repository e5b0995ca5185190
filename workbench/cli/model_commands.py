"""``versions``, ``register``, ``translate``, ``evaluate``, ``compare`` and ``export-version``:
the model versions."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from workbench.cli.common import (
    EXIT_OK,
    Command,
    json_option,
    positive_int,
    print_done,
    print_json,
    print_table,
    print_text,
    read_lines,
    row_id,
    stdin_lines,
)
from workbench.corpus.corpora import CORPUS_REF_HELP
from workbench.corpus.text_rules import escape_controls
from workbench.errors import WorkbenchError
from workbench.evaluation import significance
from workbench.messages import N_
from workbench.models.engines import ENGINE_QUANTIZATION, ENGINES, EXPORT_FORMATS, QUANTIZATIONS

if TYPE_CHECKING:
    from workbench.corpus.glossary import Glossary


def _cmd_versions(args: argparse.Namespace) -> int:
    from workbench.models.registry import versions_table

    table = versions_table()
    if args.json:
        print(
            escape_controls(
                table.to_json(orient="records", date_format="iso", force_ascii=False), json=True
            )
        )
    elif table.empty:
        print("no model versions yet: train one with `python -m workbench train`")
    else:
        shown = table.drop(columns=["notes"])
        shown["origin"] = shown["origin"].map(_origin_cell)
        print_table(shown)
    return EXIT_OK


def _origin_cell(origin: dict | None) -> str | None:
    """An imported version's origin in the text table: 'marian from opus-mt-zh-en.zip'."""
    return f"{origin.get('format')} from {origin.get('file')}" if origin else None


def _args_register(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "folder",
        type=Path,
        metavar="FOLDER_OR_ZIP",
        help="a model folder (e.g. from core_model.distributed), a public Marian / OPUS-MT "
        "model as Hugging Face saves it (config.json, model.safetensors or pytorch_model.bin, "
        "source.spm, target.spm, vocab.json), or a zip of either",
    )
    p.add_argument(
        "--marian",
        action="store_true",
        help="it must be a Marian model (without it, one is detected from its config.json)",
    )
    p.add_argument(
        "--target-token",
        metavar="TOKEN",
        help="a multilingual Marian model's target language, e.g. '>>cmn_Hans<<' (an "
        "error lists the model's choices)",
    )
    p.add_argument(
        "--corpus",
        help=f"link the version to this corpus (and take its languages): {CORPUS_REF_HELP}",
    )
    p.add_argument("--src-lang", help="source language code, e.g. de")
    p.add_argument("--tgt-lang", help="target language code, e.g. en")
    p.add_argument(
        "--name",
        help="version name (default: a public model's own, its folder's or zip's name, e.g. "
        "opus-mt-zh-en; '<corpus> v<id>' for a folder of ours)",
    )
    p.epilog = (
        "OPUS-MT models (CC-BY 4.0): https://huggingface.co/Helsinki-NLP, e.g. "
        "`git clone https://huggingface.co/Helsinki-NLP/opus-mt-zh-en`. Their languages are "
        "read from the folder unless given; the file, format, Hugging Face id and licence "
        "they name are kept as the version's origin (`versions --json`)."
    )


def _cmd_register(args: argparse.Namespace) -> int:
    from workbench.models.model_import import import_version

    version_id = import_version(
        args.folder,
        args.corpus,
        args.src_lang,
        args.tgt_lang,
        args.name,
        marian=args.marian,
        target_token=args.target_token,
    )
    print(json.dumps({"version_id": version_id}))
    return EXIT_OK


def _glossary_arg(p: argparse.ArgumentParser, what: str) -> None:
    p.add_argument("--glossary", metavar="CORPUS", help=f"{what}: {CORPUS_REF_HELP}")


def _glossary(version_ids: list[int], corpus: str | None) -> Glossary | None:
    """The glossary of ``corpus``, which must be of the versions' languages."""
    from workbench.corpus.glossary import glossary_of
    from workbench.models.registry import corpus_of_pair

    if not corpus:
        return None
    corpus_ids = [corpus_of_pair(v, corpus) for v in version_ids]  # each version checked
    return glossary_of(corpus_ids[0])


def _args_translate(p: argparse.ArgumentParser) -> None:
    p.add_argument("--version", type=row_id, required=True, help="model version id")
    p.add_argument("--beam", type=positive_int, default=1, help="beam size (1 = greedy)")
    p.add_argument(
        "--engine",
        choices=ENGINES,
        default=ENGINES[0],
        help="who decodes: our handwritten decoder (default) or the version exported to "
        "CTranslate2 (exported on first use)",
    )
    p.add_argument(
        "--quantization",
        choices=QUANTIZATIONS,
        help=f"weights of the CTranslate2 engine (default {ENGINE_QUANTIZATION}; needs "
        "--engine ctranslate2)",
    )
    _glossary_arg(p, "use the required terms of this corpus' glossary")
    p.add_argument(
        "--memory",
        action="store_true",
        help="decode with the corpus memory (kNN-MT over the train pairs of the version's "
        "corpus, or of --memory-corpus): saved pairs act at once, without training",
    )
    p.add_argument(
        "--matches",
        type=positive_int,
        metavar="N",
        help="print one JSON object per sentence with its N closest memory matches",
    )
    p.add_argument(
        "--memory-exact",
        action="store_true",
        help="a sentence (or an XLIFF unit's text) that the memory holds exactly gets its "
        "curated target instead of the model's output (off by default: scripts and "
        "evaluations get the model's output)",
    )
    p.add_argument(
        "--memory-corpus",
        metavar="CORPUS",
        help=f"the memory (default: the version's corpus): {CORPUS_REF_HELP}",
    )
    p.add_argument("--xliff", type=Path, metavar="IN", help="translate this XLIFF 1.2/2.x file")
    p.add_argument("--out", type=Path, metavar="OUT", help="where --xliff writes the file")
    p.add_argument("text", nargs="*", help="sentences (default: one per line on stdin)")


def _cmd_translate(args: argparse.Namespace) -> int:
    from workbench.memory.recall import translate_with_memory
    from workbench.models.translation import DecodingOptions

    if args.quantization is not None and args.engine == ENGINES[0]:
        raise WorkbenchError(N_("--quantization needs --engine ctranslate2"))
    if args.xliff is not None or args.out is not None:
        return _translate_xliff(args)
    texts = args.text or stdin_lines()
    results, memory = translate_with_memory(
        args.version,
        texts,
        DecodingOptions(
            beam=args.beam,
            engine=args.engine,
            quantization=args.quantization or ENGINE_QUANTIZATION,
            knn=args.memory,
        ),
        glossary=_glossary([args.version], args.glossary),
        matches=args.matches or 0,
        use_exact=args.memory_exact,
        corpus=args.memory_corpus,
    )
    for text, result, recalled in zip(texts, results, memory, strict=True):
        if args.matches:
            print_json(_translation_record(text, result.text, recalled))
        else:
            print_text(result.text)
    return EXIT_OK


def _translation_record(source: str, text: str, recalled: Any) -> dict[str, Any]:
    """A sentence, its translation, where that came from, and its memory matches."""
    return {
        "source": source,
        "text": text,
        "origin": "memory" if recalled.exact is not None else "model",
        "matches": [
            {"pair_id": m.pair_id, "source": m.source, "target": m.target, "score": m.score}
            for m in recalled.matches
        ],
    }


def _translate_xliff(args: argparse.Namespace) -> int:
    from workbench.memory.file_translation import translate_xliff
    from workbench.output_files import checked_target, write_file

    given = args.text or args.matches or args.glossary or args.quantization
    if args.xliff is None or args.out is None or given:
        raise WorkbenchError(
            N_(
                "--xliff IN needs --out OUT, and no sentences, --matches, --glossary or "
                "--quantization"
            )
        )
    if checked_target(args.out) == args.xliff.resolve():  # refused before translating
        raise WorkbenchError(N_("--out must not be the --xliff file itself"))
    filled = translate_xliff(
        args.version,
        args.xliff,
        beam=args.beam,
        engine=args.engine,
        use_memory=args.memory_exact,
        corpus=args.memory_corpus,
    )
    write_file(args.out, filled.data)
    return print_done(
        f"translated {filled.translated} units ({filled.from_memory} from the memory), kept "
        f"{filled.kept} translated ones, left {filled.untranslatable} untranslatable: {args.out}"
    )


def _args_export_version(p: argparse.ArgumentParser) -> None:
    p.add_argument("version", type=row_id, help="model version id")
    p.add_argument("out", type=Path, help="the folder to write (new or empty)")
    p.add_argument("--format", choices=EXPORT_FORMATS, required=True, help="what to export to")
    p.add_argument(
        "--quantization",
        choices=QUANTIZATIONS,
        default=QUANTIZATIONS[0],
        help=f"weight type (default {QUANTIZATIONS[0]}, which decodes exactly as ours)",
    )


def _cmd_export_version(args: argparse.Namespace) -> int:
    from workbench.models.ctranslate2_export import export_version

    folder = export_version(args.version, args.out, args.quantization)
    print(
        json.dumps(
            {
                "version_id": args.version,
                "format": args.format,
                "quantization": args.quantization,
                "folder": str(folder),
            }
        )
    )
    return EXIT_OK


def _args_evaluate(p: argparse.ArgumentParser) -> None:
    p.add_argument("--version", type=row_id, required=True, help="model version id")
    p.add_argument("--src", type=Path, required=True, help="source sentences, one per line")
    p.add_argument("--ref", type=Path, required=True, help="reference translations")
    p.add_argument("--beam", type=int, default=1, help="beam size (1 = greedy)")
    _glossary_args(p)


def _glossary_args(p: argparse.ArgumentParser) -> None:
    _glossary_arg(p, "report the hit rate of this corpus' glossary terms (term_hit_rate)")
    p.add_argument(
        "--enforce-glossary", action="store_true", help="make the translations use those terms"
    )


def _glossary_choice(args: argparse.Namespace, version_ids: list[int]) -> dict[str, Any]:
    """``--glossary``/``--enforce-glossary`` (``_glossary_args``) as keyword arguments."""
    if args.enforce_glossary and not args.glossary:
        raise WorkbenchError(N_("--enforce-glossary needs --glossary CORPUS"))
    return {"glossary": _glossary(version_ids, args.glossary), "enforce": args.enforce_glossary}


def _cmd_evaluate(args: argparse.Namespace) -> int:
    from workbench.evaluation.evaluation import evaluate

    glossary = _glossary_choice(args, [args.version])
    scores = evaluate(args.version, _test_pairs(args.src, args.ref), beam=args.beam, **glossary)
    print(json.dumps(scores))
    return EXIT_OK


def _args_compare(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--versions",
        type=row_id,
        nargs="+",
        required=True,
        metavar="ID",
        help="two or more version ids; the first is the baseline of the p-values",
    )
    p.add_argument("--src", type=Path, required=True, help="source sentences, one per line")
    p.add_argument("--ref", type=Path, required=True, help="reference translations")
    p.add_argument("--beam", type=positive_int, default=1, help="beam size (1 = greedy)")
    _glossary_args(p)
    p.epilog = (
        f"Prints the verdicts in words, then one JSON object. The 95 % intervals are the "
        f"{significance.INTERVAL_KIND}s of sacreBLEU's paired bootstrap "
        f"({significance.RESAMPLES:,} resamples), so they lie within 0 to 100. Below "
        f"{significance.MIN_VERDICT_PAIRS} test pairs no p-value or verdict is given (the "
        "JSON's verdict_withheld says why)."
    )


def _cmd_compare(args: argparse.Namespace) -> int:
    from workbench.evaluation.evaluation import compare

    glossary = _glossary_choice(args, args.versions)
    comparison = compare(args.versions, _test_pairs(args.src, args.ref), beam=args.beam, **glossary)
    for line in [comparison.withheld] if comparison.withheld else comparison.verdicts:
        print_text(line)
    print_json(comparison.as_dict())
    return EXIT_OK


def _test_pairs(src: Path, ref: Path) -> list[tuple[str, str]]:
    sources, references = read_lines(src), read_lines(ref)
    if not sources and not references:
        raise WorkbenchError(
            N_("{src} and {ref} are empty: no test pairs to score"), src=src, ref=ref
        )
    if len(sources) != len(references):
        raise WorkbenchError(
            N_("{src} has {n_src} lines but {ref} has {n_ref}"),
            src=src,
            n_src=len(sources),
            ref=ref,
            n_ref=len(references),
        )
    return list(zip(sources, references, strict=True))


COMMANDS = [
    Command(
        "versions",
        "list the model versions",
        json_option("one JSON array of versions"),
        _cmd_versions,
    ),
    Command(
        "register",
        "add a model made elsewhere: a folder of ours or a public Marian (OPUS-MT) model",
        _args_register,
        _cmd_register,
    ),
    Command("translate", "translate sentences with a version", _args_translate, _cmd_translate),
    Command("evaluate", "BLEU/chrF of a version on a test set", _args_evaluate, _cmd_evaluate),
    Command(
        "compare",
        "BLEU/chrF of versions with 95% intervals and p-values",
        _args_compare,
        _cmd_compare,
    ),
    Command(
        "export-version",
        "export a version to another inference engine",
        _args_export_version,
        _cmd_export_version,
    ),
]
