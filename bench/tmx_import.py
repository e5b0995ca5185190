"""A 100k-unit TMX imported with its preview, as a CAT tool writes one.

    python -m bench.tmx_import [--units N] [--workdir DIR]

Writes a TMX 1.4 file of N units (zh-CN / en-US, Trados style: dates and users on each
``<tu>``, a ``<bpt>``/``<ept>`` pair in every tenth segment, a third language in every
twentieth unit) and times, in a fresh WORKBENCH_HOME, ``preview_import`` then
``import_file`` into a new corpus (what the Corpus page's import does), and the TMX export
of the result. Target: preview + import ≤ 30 s.

The last line printed is one JSON object. Timings depend on the machine and on whatever else
runs on it: say so when reporting them.
"""

from __future__ import annotations

import argparse
import json
import random
import time
from pathlib import Path
from xml.sax.saxutils import escape

from bench.home import fresh_home


def write_tmx(path: Path, units: int) -> None:
    rng = random.Random(3)
    chars = "的一是不了人我在有他这中大来上个国到说们为子和你地出道也时年"
    words = [
        "".join(rng.choice("abcdefghilmnoprstu") for _ in range(rng.randint(2, 8)))
        for _ in range(3000)
    ]
    with path.open("w", encoding="utf-8") as out:
        out.write('<?xml version="1.0" encoding="UTF-8"?>\n<tmx version="1.4">\n')
        out.write(
            '<header creationtool="SDL Language Platform" creationtoolversion="8.1" '
            'o-tmf="SDL TM8 Format" datatype="xml" segtype="sentence" adminlang="en-US" '
            'srclang="zh-CN"/>\n<body>\n'
        )
        for i in range(units):
            zh = "".join(rng.choice(chars) for _ in range(rng.randint(8, 30))) + f"{i}。"
            en = " ".join(rng.choice(words) for _ in range(rng.randint(5, 15))) + f" {i}."
            if i % 10 == 0:
                en = f'<bpt i="1">&lt;b&gt;</bpt>{escape(en)}<ept i="1">&lt;/b&gt;</ept>'
            else:
                en = escape(en)
            out.write(
                f'<tu creationdate="20240312T091512Z" creationid="AGENCY\\anna">'
                f'<tuv xml:lang="zh-CN"><seg>{zh}</seg></tuv>'
                f'<tuv xml:lang="en-US"><seg>{en}</seg></tuv>'
            )
            if i % 20 == 0:
                out.write('<tuv xml:lang="de-DE"><seg>Hallo.</seg></tuv>')
            out.write("</tu>\n")
        out.write("</body>\n</tmx>\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--units", type=int, default=100_000)
    parser.add_argument("--workdir", type=Path)
    args = parser.parse_args()
    work = fresh_home(args.workdir, "tmx_import_")
    from workbench.corpus import corpora, exporting, importing

    path = work / "memory.tmx"
    write_tmx(path, args.units)
    corpus = corpora.create_corpus("tmx bench", "zh", "en")
    started = time.perf_counter()
    preview = importing.preview_import(corpus.id, path)
    preview_s = time.perf_counter() - started
    started = time.perf_counter()
    result = importing.import_file(corpus.id, path)
    import_s = time.perf_counter() - started
    started = time.perf_counter()
    exported = exporting.export_pairs(corpus.id, work / "out.tmx")
    export_s = time.perf_counter() - started
    print(
        json.dumps(
            {
                "units": args.units,
                "file_mb": round(path.stat().st_size / 1e6, 1),
                "preview_s": round(preview_s, 2),
                "import_s": round(import_s, 2),
                "preview_and_import_s": round(preview_s + import_s, 2),
                "accepted": preview.accepted,
                "added": result.added,
                "export_s": round(export_s, 2),
                "exported": exported,
            }
        )
    )


if __name__ == "__main__":
    main()
