"""A comparison to take away: the per-sentence table as CSV, and the whole comparison as one
self-contained HTML file (styles and the sorting script inline, nothing fetched; every piece
of text escaped), to attach to a ticket or send to someone without the workbench."""

from __future__ import annotations

import html
from datetime import UTC, datetime

import pandas as pd

from workbench.evaluation import significance
from workbench.evaluation.evaluation import Comparison

_STYLE = """
body{font-family:system-ui,sans-serif;margin:2rem;color:#1f2328}
h1{font-size:1.4rem}h2{font-size:1.1rem;margin-top:2rem}
table{border-collapse:collapse;font-size:.9rem}
th,td{border:1px solid #d0d7de;padding:.3rem .5rem;vertical-align:top;text-align:left}
th{background:#f6f8fa;cursor:pointer;user-select:none}
td.num{text-align:right;font-variant-numeric:tabular-nums}
tr.differs td{background:#fff8e1}
.better{color:#1a7f37}.worse{color:#cf222e}.same{color:#57606a}
"""

# Click a header to sort by it (numbers as numbers); click again to reverse.
_SORT_SCRIPT = """
document.querySelectorAll("table.sortable th").forEach((th, col) => {
  th.addEventListener("click", () => {
    const body = th.closest("table").tBodies[0];
    const asc = th.dataset.dir !== "asc";
    th.dataset.dir = asc ? "asc" : "desc";
    const key = r => { const t = r.cells[col].dataset.v ?? r.cells[col].textContent;
                       const n = parseFloat(t); return isNaN(n) ? t : n; };
    [...body.rows].sort((a, b) => { const x = key(a), y = key(b);
        return (x < y ? -1 : x > y ? 1 : 0) * (asc ? 1 : -1); })
      .forEach(r => body.appendChild(r));
  });
});
"""


def comparison_csv(comparison: Comparison) -> bytes:
    """The per-sentence table (sources, references, every version's output, chrF and its
    difference from the baseline) as UTF-8 CSV."""
    return comparison.sentences.to_csv(index=False).encode("utf-8")


def comparison_html(comparison: Comparison, title: str, basis: str = "") -> str:
    """The comparison as one HTML page: scores with 95 % intervals and p-values, the verdicts
    in words, and the per-sentence table (sortable by clicking a column header)."""
    made = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    parts = [
        "<!doctype html><html lang='en'><head><meta charset='utf-8'>",
        f"<title>{_e(title)}</title><style>{_STYLE}</style></head><body>",
        f"<h1>{_e(title)}</h1>",
        f"<p>{_e(basis)} · made {made} · paired bootstrap, "
        f"{significance.RESAMPLES:,} resamples, seed {_e(comparison.seed)} (sacreBLEU); "
        f"95 % intervals: {significance.INTERVAL_KIND}</p>",
        "<h2>Scores</h2>",
        _metrics_table(comparison.metrics),
        *([f"<p class='same'>{_e(comparison.withheld)}</p>"] if comparison.withheld else []),
        "<ul>",
        *(f"<li class='{significance.tone(v)}'>{_e(v)}</li>" for v in comparison.verdicts),
        "</ul>",
        "<h2>Sentence by sentence</h2><p>Click a column header to sort.</p>",
        _sentences_table(comparison.sentences),
        f"<script>{_SORT_SCRIPT}</script></body></html>",
    ]
    return "\n".join(parts)


def _metrics_table(metrics: pd.DataFrame) -> str:
    head = ("version", "name", "BLEU", "95 % interval", "p (BLEU)", "chrF", "95 % interval")
    head += ("p (chrF)", "pairs")
    rows = []
    for r in metrics.to_dict(orient="records"):
        cells = [
            _td(f"#{r['version']}"),
            _td(r["name"]),
            _td(f"{r['bleu']:.1f}", num=True),
            _td(f"{r['bleu_low']:.1f} – {r['bleu_high']:.1f}", num=True),
            _td(_p(r["p_value"]), num=True),
            _td(f"{r['chrf']:.1f}", num=True),
            _td(f"{r['chrf_low']:.1f} – {r['chrf_high']:.1f}", num=True),
            _td(_p(r["chrf_p_value"]), num=True),
            _td(str(r["n"]), num=True),
        ]
        rows.append(f"<tr>{''.join(cells)}</tr>")
    return _table(head, rows, sortable=False)


def _sentences_table(sentences: pd.DataFrame) -> str:
    columns = [c for c in sentences.columns if c != "differs"]
    rows = []
    for record in sentences.to_dict(orient="records"):
        cells = "".join(_td(record[c], num=isinstance(record[c], float | int)) for c in columns)
        cls = " class='differs'" if record.get("differs") else ""
        rows.append(f"<tr{cls}>{cells}</tr>")
    return _table(columns, rows, sortable=True)


def _table(head: tuple[str, ...] | list[str], rows: list[str], sortable: bool) -> str:
    cls = " class='sortable'" if sortable else ""
    header = "".join(f"<th>{_e(h)}</th>" for h in head)
    return f"<table{cls}><thead><tr>{header}</tr></thead><tbody>{''.join(rows)}</tbody></table>"


def _td(value: object, num: bool = False) -> str:
    if isinstance(value, float):
        text = f"{value:.1f}"
        return f"<td class='num' data-v='{value}'>{text}</td>"
    return f"<td{' class=num' if num else ''}>{_e(str(value))}</td>"


def _p(value: float | None) -> str:
    return "—" if value is None or value != value else f"{value:.4f}"


def _e(text: str) -> str:
    return html.escape(text, quote=True)
