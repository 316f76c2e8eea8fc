"""``GET /metrics``: the proxy's requests and the cache's own counters, in Prometheus's text
format (written by ``prometheus_client``, not by hand).

Two kinds of figure:

- the proxy's, counted in this process: requests by endpoint, cache outcome and HTTP status,
  and the time to a response's headers;
- the cache's, read from its store at each scrape (every process sharing the cache, since it
  was made): lookups, hits, misses, tokens and dollars spent and avoided per category, evictions,
  entries and bytes, and per table under a wrong-hit budget its threshold in force and the
  budget's estimates (wrong-hit rate, the model's self-disagreement, the excess the budget bounds,
  with the upper ends of their 95% intervals), per table the candidates the opposites gate
  refused, and per templated table the lookups each exact slot refused and the distinct
  values of its partitioning slots;
- the templates learned from the traffic (``--learn-templates``): per template its calls and
  hits, its fixed text (shortened) as a label, its slots with their roles, and the calls
  passed through while their template was being learned.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterator

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import generate_latest
from prometheus_client.registry import Collector

from .. import CacheStats
from ..types import TableStats

__all__ = ["CONTENT_TYPE", "ProxyMetrics"]

CONTENT_TYPE = CONTENT_TYPE_LATEST

# (metric name, help, the TableStats field summed per category)
_COUNTERS = (
    ("llmcache_lookups", "Lookups (hits and misses)", "lookups"),
    ("llmcache_hits", "Calls answered from the cache", "hits"),
    ("llmcache_misses", "Calls looked up and sent to the LLM", "misses"),
    ("llmcache_collects", "Calls sent to the LLM and stored without a lookup", "collects"),
    ("llmcache_bypasses", "Calls let through (mode off, a bypassed category)", "bypasses"),
    ("llmcache_tokens_spent", "Tokens the LLM was paid for", "tokens_spent"),
    ("llmcache_tokens_avoided", "Tokens hits saved", "tokens_avoided"),
    ("llmcache_spent_dollars", "US dollars the LLM was paid", "usd_spent"),
    ("llmcache_avoided_dollars", "US dollars hits saved", "usd_avoided"),
    ("llmcache_evicted", "Entries evicted to keep within the cache's bounds", "evicted"),
    ("llmcache_expired", "Entries evicted past their time to live", "expired"),
    ("llmcache_corrupt", "Damaged entries met and evicted", "corrupt"),
    ("llmcache_store_failures", "Answers returned but not stored", "store_failures"),
    (
        "llmcache_refused_opposites",
        "Candidates over the threshold refused as meaning the opposite of the query (each a miss)",
        "refused_opposites",
    ),
)
_TABLE = ["category", "agent", "model", "table"]


def _budget_gauges(tables: list[TableStats]) -> Iterator[Metric]:
    budgeted = [t for t in tables if t.wrong_hit_budget is not None or t.labels]
    gauges = {
        "budget": GaugeMetricFamily(
            "llmcache_budget_delta", "The wrong-hit budget (delta) of a table", labels=_TABLE
        ),
        "threshold": GaugeMetricFamily(
            "llmcache_budget_threshold",
            "The raw-cosine threshold in force: learned, or the strict one until labels prove one",
            labels=_TABLE,
        ),
        "labels": GaugeMetricFamily(
            "llmcache_budget_labels", "Labels of a table (right and wrong)", labels=_TABLE
        ),
        "wrong": GaugeMetricFamily(
            "llmcache_budget_wrong_rate",
            "Estimated wrong-hit rate at the threshold in force",
            labels=_TABLE,
        ),
        "wrong_upper": GaugeMetricFamily(
            "llmcache_budget_wrong_rate_upper",
            "Upper end of the wrong-hit rate's 95% interval",
            labels=_TABLE,
        ),
        "self": GaugeMetricFamily(
            "llmcache_budget_self_disagreement",
            "How often two fresh answers to one prompt disagree (the model's own variability)",
            labels=_TABLE,
        ),
        "excess": GaugeMetricFamily(
            "llmcache_budget_excess",
            "Wrong-hit rate minus self-disagreement: what the budget bounds",
            labels=_TABLE,
        ),
        "excess_upper": GaugeMetricFamily(
            "llmcache_budget_excess_upper",
            "Upper end of the excess's 95% interval (kept at or under the budget)",
            labels=_TABLE,
        ),
        "closed": GaugeMetricFamily(
            "llmcache_budget_closed",
            "1 when a table serves no hit (its labels say so)",
            labels=_TABLE,
        ),
        "audit": GaugeMetricFamily(
            "llmcache_budget_audit_guard",
            "1 when a table keeps its budget by auditing hits (fail-open), 0 by proving "
            "thresholds (fail-closed)",
            labels=_TABLE,
        ),
        "audits": GaugeMetricFamily(
            "llmcache_budget_audits",
            "Would-be hits audited under the audit guard (asked anyway and compared)",
            labels=_TABLE,
        ),
        "audit_dollars": GaugeMetricFamily(
            "llmcache_budget_audit_dollars",
            "US dollars the audits cost (also inside the spent dollars)",
            labels=_TABLE,
        ),
    }
    for t in budgeted:
        where = [t.category, t.agent, t.model, t.key]
        values = {
            "budget": t.wrong_hit_budget,
            "threshold": t.threshold_in_force,
            "labels": float(t.labels),
            "wrong": t.wrong_rate,
            "wrong_upper": t.wrong_rate_ci[1] if t.wrong_rate_ci else None,
            "self": t.self_disagreement,
            "excess": t.excess,
            "excess_upper": t.excess_ci[1] if t.excess_ci else None,
            "closed": float(t.closed),
            "audit": float(t.guard == "audit") if t.guard is not None else None,
            "audits": float(t.audits),
            "audit_dollars": t.audit_usd,
        }
        for name, value in values.items():
            if value is not None:
                gauges[name].add_metric(where, value)
    yield from gauges.values()


def _slot_figures(tables: list[TableStats]) -> Iterator[Metric]:
    """Per templated table: the lookups each exact slot refused (what it costs), and the
    distinct values of each partitioning slot (see llmcache/_slots.py)."""
    labels = [*_TABLE, "slot"]
    refused = CounterMetricFamily(
        "llmcache_exact_refused",
        "Lookups an exact slot turned into a miss although the nearest entry was close enough",
        labels=labels,
    )
    parts = GaugeMetricFamily(
        "llmcache_partition_slot_values",
        "Distinct values of a table's partitioning slot (exact, never embedded)",
        labels=labels,
    )
    for t in tables:
        where = [t.category, t.agent, t.model, t.key]
        for slot, n in sorted(t.exact_refused.items()):
            refused.add_metric([*where, slot], float(n))
        for slot, n in sorted(t.partition_slots.items()):
            parts.add_metric([*where, slot], float(n))
    yield refused
    yield parts


def _learned_figures(stats: CacheStats) -> Iterator[Metric]:
    """The learned templates (see the module's docstring)."""
    labels = ["template", "text"]
    calls = CounterMetricFamily(
        "llmcache_learned_template_calls",
        "Calls filed under a template learned from the traffic, with its fixed text",
        labels=labels,
    )
    hits = CounterMetricFamily(
        "llmcache_learned_template_hits",
        "Calls a learned template's tables answered from the cache",
        labels=labels,
    )
    slots = GaugeMetricFamily(
        "llmcache_learned_template_slot",
        "A learned template's slot and its role (partition: whose call it is, exact, never "
        "embedded; embedded: what is asked)",
        labels=["template", "slot", "role"],
    )
    for t in stats.learned:
        calls.add_metric([t.name, t.text], float(t.calls))
        hits.add_metric([t.name, t.text], float(t.hits))
        for slot in t.partition_slots:
            slots.add_metric([t.name, slot, "partition"], 1.0)
        for slot in t.embedded_slots:
            slots.add_metric([t.name, slot, "embedded"], 1.0)
    yield calls
    yield hits
    yield slots
    yield CounterMetricFamily(
        "llmcache_learning_passed",
        "Calls without cache options passed through uncached while their template was learned",
        value=float(stats.learning),
    )
    yield CounterMetricFamily(
        "llmcache_learning_filed_late",
        "Answers of calls passed through while their template was learned, filed once it was",
        value=float(stats.filed_late),
    )


class _CacheCollector(Collector):
    """Reads the cache's counters at each scrape (see the module's docstring)."""

    def __init__(self, stats: Callable[[], CacheStats]) -> None:
        self._stats = stats

    def collect(self) -> Iterator[Metric]:
        stats = self._stats()
        sums: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
        for table in stats.tables:
            for _, _, field in _COUNTERS:
                sums[table.category][field] += getattr(table, field)
        for name, documentation, field in _COUNTERS:
            family = CounterMetricFamily(
                name, f"{documentation}, per category", labels=["category"]
            )
            for category, values in sorted(sums.items()):
                family.add_metric([category], values[field])
            yield family
        if stats.entries is not None:
            yield GaugeMetricFamily("llmcache_entries", "Entries in the cache", stats.entries)
        if stats.bytes is not None:
            yield GaugeMetricFamily("llmcache_bytes", "Bytes of the stored entries", stats.bytes)
        yield from _budget_gauges(stats.tables)
        refused = CounterMetricFamily(
            "llmcache_table_refused_opposites",
            "Candidates over the threshold refused as meaning the opposite of the query, per table",
            labels=_TABLE,
        )
        for t in stats.tables:
            if t.refused_opposites:
                refused.add_metric([t.category, t.agent, t.model, t.key], t.refused_opposites)
        yield refused
        yield from _slot_figures(stats.tables)
        yield from _learned_figures(stats)


class ProxyMetrics:
    """The proxy's registry: its own counters, and the cache's read at each scrape."""

    def __init__(self, stats: Callable[[], CacheStats]) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self._requests = Counter(
            "llmcache_proxy_requests",
            "Requests answered, by endpoint, cache outcome (hit, miss, collect, bypass, pass "
            "for a request without cache options, error) and HTTP status",
            ["endpoint", "outcome", "status"],
            registry=self.registry,
        )
        self._seconds = Histogram(
            "llmcache_proxy_response_seconds",
            "Time from a request to its response's headers, by endpoint and cache outcome",
            ["endpoint", "outcome"],
            buckets=(0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
            registry=self.registry,
        )
        self.registry.register(_CacheCollector(stats))

    def observe(self, endpoint: str, outcome: str, status: int, seconds: float) -> None:
        self._requests.labels(endpoint, outcome, str(status)).inc()
        self._seconds.labels(endpoint, outcome).observe(seconds)

    def render(self) -> bytes:
        """The text exposition (reads the cache's store: call it off the event loop)."""
        return generate_latest(self.registry)
