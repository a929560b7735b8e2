"""The insert benchmark's service level: did the background writers hold their rate?

The qr*/qp* steps query while two writers insert and delete at a target rate; a setup
whose server cannot keep that rate has failed the step even if its queries were fast,
so reports show the verdict next to the throughput.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import NamedTuple, Protocol

# A rate counts as sustained at 95% of its target: pacing in batches and the first and
# last partial second cost a few percent even on an idle server.
SLA_FRACTION = 0.95


class HasMetrics(Protocol):
    @property
    def metrics(self) -> Mapping[str, float]: ...


class SlaStatus(NamedTuple):
    target: float  # rows/s the writers were asked to insert (and delete)
    achieved: float  # rows/s they did: the slower of inserts and deletes
    met: bool


class IbenchRates(NamedTuple):
    insert_rows_per_s: float | None
    delete_rows_per_s: float | None
    queries_per_s: float | None


def _rate(metrics: Mapping[str, float], count: str, seconds: str) -> float | None:
    if count not in metrics or not metrics.get(seconds):
        return None
    return metrics[count] / metrics[seconds]


def ibench_rates(metrics: Mapping[str, float]) -> IbenchRates:
    """Rows/s inserted and deleted and queries/s of an insert-benchmark cell's metrics."""
    return IbenchRates(
        insert_rows_per_s=_rate(metrics, "ibench_insert_rows", "ibench_seconds"),
        delete_rows_per_s=_rate(metrics, "ibench_delete_rows", "ibench_delete_seconds")
        or _rate(metrics, "ibench_delete_rows", "ibench_seconds"),
        queries_per_s=_rate(metrics, "ibench_queries", "ibench_query_seconds"),
    )


def ibench_throughput(metrics: Mapping[str, float]) -> tuple[float, str] | None:
    """An insert-benchmark cell's own rate and its unit, or None when it reported none.

    The query steps (qr*/qp*) are judged by queries/s, with the writers' rate as their
    SLA; the loads (l.i0, l.i1, l.i2) by rows/s inserted. l.x builds indexes and reports
    neither. sysbench's QPS counts statements (one per 1000-row INSERT), not work.
    """
    rates = ibench_rates(metrics)
    if metrics.get("ibench_target_rate") and rates.queries_per_s is not None:
        return rates.queries_per_s, "queries/s"
    if rates.insert_rows_per_s is not None:
        return rates.insert_rows_per_s, "rows/s"
    return None


def sla_status(cell: HasMetrics) -> SlaStatus | None:
    """(target, achieved, met) for a qr*/qp* cell; None for a cell without a target rate."""
    metrics = cell.metrics or {}
    target = metrics.get("ibench_target_rate")
    if not target:
        return None
    rates = ibench_rates(metrics)
    achieved = [r for r in (rates.insert_rows_per_s, rates.delete_rows_per_s) if r is not None]
    value = min(achieved) if achieved else 0.0
    return SlaStatus(target=target, achieved=value, met=value >= SLA_FRACTION * target)


class SlaCell(Protocol):
    @property
    def metrics(self) -> Mapping[str, float]: ...
    @property
    def setup(self) -> str: ...
    @property
    def engine(self) -> str: ...
    @property
    def step(self) -> str: ...
    @property
    def repeat(self) -> int: ...


def sla_results(cells: Iterable[SlaCell]) -> list[tuple[str, SlaStatus]]:
    """("setup / engine / step rN", status) for every cell that had a target rate."""
    out = []
    for cell in cells:
        status = sla_status(cell)
        if status is not None:
            out.append((f"{cell.setup} / {cell.engine} / {cell.step} r{cell.repeat}", status))
    return out


__all__ = [
    "SLA_FRACTION",
    "IbenchRates",
    "SlaStatus",
    "ibench_rates",
    "ibench_throughput",
    "sla_results",
    "sla_status",
]
