"""Request counts, latency percentiles and batch sizes in Prometheus' text format (/metrics).

Counted in the server process (with ``--workers N``, per process), from the event loop only,
so no lock is needed. Latency percentiles come from the most recent requests of each version
(a bounded window), the way a Prometheus summary reports quantiles. No label ever holds a key
or an address.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict, deque
from dataclasses import dataclass, field

from workbench.serving.batching import BatchDone

QUANTILES = (0.5, 0.95, 0.99)
RECENT = 2_048  # latencies kept per version for the percentiles
NO_VERSION = ""  # requests answered before a version was chosen (errors, /languages, …)


def percentile(values: list[float], q: float) -> float:
    """The q-quantile of ``values`` (nearest rank); 0 for none."""
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered), max(1, math.ceil(q * len(ordered)))) - 1]


@dataclass
class _Latency:
    recent: deque[float] = field(default_factory=lambda: deque(maxlen=RECENT))
    total: float = 0.0
    count: int = 0


class Metrics:
    def __init__(self) -> None:
        self.requests: Counter[tuple[str, str, int]] = Counter()  # (path, version, status)
        self.latency: dict[str, _Latency] = defaultdict(_Latency)  # by version
        self.sentences: Counter[str] = Counter()
        self.batches: Counter[str] = Counter()
        self.batch_seconds: Counter[str] = Counter()

    def observe_request(self, path: str, version: int | None, status: int, seconds: float) -> None:
        label = NO_VERSION if version is None else str(version)
        self.requests[(path, label, status)] += 1
        if version is not None and status < 400:
            latency = self.latency[label]
            latency.recent.append(seconds)
            latency.total += seconds
            latency.count += 1

    def observe_batch(self, done: BatchDone) -> None:
        label = str(done.version_id)
        self.batches[label] += 1
        self.sentences[label] += done.sentences
        self.batch_seconds[label] += done.seconds

    def render(self, queued_sentences: int) -> str:
        """The Prometheus exposition text (version 0.0.4)."""
        out = [
            "# HELP workbench_http_requests_total HTTP requests answered, by path, version "
            "and status.",
            "# TYPE workbench_http_requests_total counter",
        ]
        for (path, version, status), n in sorted(self.requests.items()):
            labels = f'path="{_escape(path)}",version="{version}",status="{status}"'
            out.append(f"workbench_http_requests_total{{{labels}}} {n}")
        out += [
            "# HELP workbench_translate_latency_seconds Time to answer a successful "
            "translation request, by version (quantiles of the most recent requests).",
            "# TYPE workbench_translate_latency_seconds summary",
        ]
        for version, latency in sorted(self.latency.items()):
            recent = list(latency.recent)
            for q in QUANTILES:
                out.append(
                    f'workbench_translate_latency_seconds{{version="{version}",quantile="{q}"}} '
                    f"{percentile(recent, q):.6f}"
                )
            out.append(
                f'workbench_translate_latency_seconds_sum{{version="{version}"}} '
                f"{latency.total:.6f}"
            )
            out.append(
                f'workbench_translate_latency_seconds_count{{version="{version}"}} {latency.count}'
            )
        for name, help_text, values in (
            ("workbench_sentences_translated_total", "Sentences decoded", self.sentences),
            ("workbench_decoder_batches_total", "Decoder calls (shared batches)", self.batches),
            ("workbench_decoder_seconds_total", "Time spent decoding", self.batch_seconds),
        ):
            out += [f"# HELP {name} {help_text}, by version.", f"# TYPE {name} counter"]
            out += [f'{name}{{version="{v}"}} {n:g}' for v, n in sorted(values.items())]
        out += [
            "# HELP workbench_queued_sentences Sentences waiting for the decoder.",
            "# TYPE workbench_queued_sentences gauge",
            f"workbench_queued_sentences {queued_sentences}",
        ]
        return "\n".join(out) + "\n"


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
