"""Number formatting shared by every report format."""

from __future__ import annotations

GB = 1024**3


def gb(value: int | float | None) -> str:
    """GiB with two decimals; negative values (an unaccounted remainder) keep their sign."""
    return f"{value / GB:.2f}" if value is not None else "-"


def ratio(value: float | None) -> str:
    return f"{value:.2f}" if value is not None else "-"


def qps(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:,.0f}" if value >= 100 else f"{value:.1f}"


def mib(value: int | float | None) -> str:
    return f"{value / (1 << 20):,.0f} MiB" if value else "-"


def knobs(values: dict[str, str]) -> str:
    return " ".join(f"{k}={v}" for k, v in values.items()) or "-"
