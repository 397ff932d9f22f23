# SPDX-License-Identifier: Apache-2.0
"""tutti's counters and latency histograms as Prometheus metrics: `prometheus_text(rt)` renders the text exposition
format with no dependency (for a textfile collector or your own HTTP handler); `register(rt)`
adds a collector to prometheus_client's registry when that package is installed, so the
engine's own /metrics endpoint serves them.

    import tutti.metrics
    tutti.metrics.register(rt, labels={"rank": "0"})     # prometheus_client
    print(tutti.metrics.prometheus_text(rt))              # or the text, by hand
"""
from typing import Dict, Iterator, List, Optional, Tuple

# (tutti_stats field, metric name, type, help); counters end in _total, as Prometheus names them.
METRICS: List[Tuple[str, str, str, str]] = [
    ("bytes_read", "tutti_read_bytes_total", "counter", "Bytes read from the pool"),
    ("bytes_written", "tutti_written_bytes_total", "counter", "Bytes written to the pool"),
    ("ios", "tutti_ios_total", "counter", "I/O operations issued"),
    ("lookups", "tutti_lookups_total", "counter", "Lookups (tutti_lookup, leases, lookup clients)"),
    ("hit_chunks", "tutti_lookup_hit_chunks_total", "counter", "Chunks found by lookups"),
    ("miss_chunks", "tutti_lookup_misses_total", "counter", "Lookups that stopped at a missing chunk"),
    ("stored_chunks", "tutti_stored_chunks_total", "counter", "Chunks committed"),
    ("evictions", "tutti_evictions_total", "counter", "Chunks evicted to make room"),
    ("failed_chunks", "tutti_failed_chunks_total", "counter", "Chunks a batch could not move (I/O error, checksum, no room)"),
    ("slots_total", "tutti_slots", "gauge", "Chunk slots in the pool"),
    ("slots_used", "tutti_slots_used", "gauge", "Chunk slots holding a chunk"),
    ("layer_waits", "tutti_layer_waits_total", "counter", "tutti_batch_wait_layer(_async) calls"),
    ("layer_wait_ns", "tutti_layer_wait_seconds_total", "counter", "Time spent blocked in layer waits"),
    ("tier_hits", "tutti_tier_hits_total", "counter", "Chunk-layer loads served by the DRAM tier"),
    ("tier_misses", "tutti_tier_misses_total", "counter", "Chunk-layer loads the DRAM tier did not hold"),
    ("remote_hit_chunks", "tutti_remote_hit_chunks_total", "counter", "Chunks lookups found in the remote tier past the pool"),
    ("remote_loaded_chunks", "tutti_remote_loaded_chunks_total", "counter", "Chunks loads took from the remote tier"),
    ("remote_written_chunks", "tutti_remote_written_chunks_total", "counter", "Chunks written through to the remote tier"),
    ("remote_promoted_chunks", "tutti_remote_promoted_chunks_total", "counter", "Chunks copied from the remote tier into the pool"),
    ("remote_rejected", "tutti_remote_rejected_values_total", "counter", "Remote values refused (another key, shape or layer, bad checksum)"),
    ("remote_errors", "tutti_remote_errors_total", "counter", "Calls to the remote tier that failed or ran past their deadline"),
    ("load_timeouts", "tutti_load_timeouts_total", "counter", "Load batches that gave up after load_timeout_ms"),
]
PER_LAYER = ("tutti_layer_wait_by_layer_seconds_total", "counter", "Time spent blocked waiting for each layer")
# (Runtime.histogram kind, metric name, help): latency histograms.
HISTOGRAMS: List[Tuple[str, str, str]] = [
    ("layer_wait", "tutti_layer_wait_duration_seconds", "Each wait for a layer's KV (the bubble)"),
    ("load", "tutti_load_batch_duration_seconds", "Each load batch, from submit to its last layer in place"),
    ("store", "tutti_store_batch_duration_seconds", "Each store batch, from submit to its commit"),
]


def samples(rt, labels: Optional[Dict[str, str]] = None) -> Iterator[Tuple[str, str, str, List[Tuple[dict, float]]]]:
    """(name, type, help, [(labels, value)]) for every metric of the runtime, now."""
    base = dict(labels or {})
    stats = rt.stats()
    for field, name, kind, help_text in METRICS:
        value = stats[field] / 1e9 if field.endswith("_ns") else stats[field]
        yield name, kind, help_text, [(base, float(value))]
    waits = rt.layer_wait_ns()
    yield PER_LAYER[0], PER_LAYER[1], PER_LAYER[2], [(dict(base, layer=str(i)), ns / 1e9) for i, ns in enumerate(waits)]


def histograms(rt) -> Iterator[Tuple[str, str, dict]]:
    """(name, help, Runtime.histogram's dict) for every latency histogram of the runtime, now."""
    for kind, name, help_text in HISTOGRAMS:
        yield name, help_text, rt.histogram(kind)


def _le(bound: float) -> str:
    return "+Inf" if bound == float("inf") else f"{bound:.17g}"


def _label_text(labels: dict) -> str:
    if not labels:
        return ""
    esc = {k: str(v).replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"') for k, v in labels.items()}
    return "{" + ",".join(f'{k}="{v}"' for k, v in sorted(esc.items())) + "}"


def prometheus_text(rt, labels: Optional[Dict[str, str]] = None) -> str:
    """The runtime's counters in Prometheus' text exposition format (version 0.0.4)."""
    out = []
    for name, kind, help_text, points in samples(rt, labels):
        out.append(f"# HELP {name} {help_text}")
        out.append(f"# TYPE {name} {kind}")
        out.extend(f"{name}{_label_text(lbl)} {value:.17g}" for lbl, value in points)
    base = dict(labels or {})
    for name, help_text, h in histograms(rt):
        out.append(f"# HELP {name} {help_text}")
        out.append(f"# TYPE {name} histogram")
        out.extend(f"{name}_bucket{_label_text(dict(base, le=_le(bound)))} {n}" for bound, n in h["buckets"])
        out.append(f"{name}_sum{_label_text(base)} {h['sum_s']:.17g}")
        out.append(f"{name}_count{_label_text(base)} {h['count']}")
    return "\n".join(out) + "\n"


class TuttiCollector:
    """A prometheus_client collector reading the runtime's counters at each scrape."""

    def __init__(self, rt, labels: Optional[Dict[str, str]] = None):
        self.rt, self.labels = rt, dict(labels or {})

    def collect(self):
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
        for name, kind, help_text, points in samples(self.rt, self.labels):
            keys = sorted(points[0][0]) if points else sorted(self.labels)
            if kind == "counter":  # prometheus_client adds _total itself
                family = CounterMetricFamily(name[:-len("_total")], help_text, labels=keys)
            else:
                family = GaugeMetricFamily(name, help_text, labels=keys)
            for lbl, value in points:
                family.add_metric([lbl[k] for k in keys], value)
            yield family
        keys = sorted(self.labels)
        for name, help_text, h in histograms(self.rt):
            family = HistogramMetricFamily(name, help_text, labels=keys)
            family.add_metric([self.labels[k] for k in keys], [(_le(b), float(n)) for b, n in h["buckets"]], h["sum_s"])
            yield family


def register(rt, labels: Optional[Dict[str, str]] = None, registry=None) -> TuttiCollector:
    """Adds the runtime's counters to prometheus_client's registry (default: its global one).
    Raises ImportError when prometheus_client is not installed; prometheus_text needs nothing."""
    from prometheus_client import REGISTRY
    collector = TuttiCollector(rt, labels)
    (registry if registry is not None else REGISTRY).register(collector)
    return collector
