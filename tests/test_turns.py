"""Turns: the order clients take them in, and what a turn's reports add up to."""

from __future__ import annotations

import pytest

from mallocbench.run.turns import takes_turns, turn_order
from mallocbench.workloads.catalogue import parse_steps
from mallocbench.workloads.sysbench import TURN_DIGITS, Turn, TurnPlan


def test_every_client_settles_first_then_rounds_rotate() -> None:
    assert turn_order(2, 4, settle=1) == "01" + "01" + "10" + "01" + "10"
    assert turn_order(3, 3, settle=1) == "012" + "012" + "120" + "201"
    # Every client gets the same number of measured turns, in every position.
    measured = turn_order(4, 8, settle=1)[4:]
    assert all(measured.count(d) == 8 for d in "0123")


def test_a_longer_settle_adds_unmeasured_rounds_before_the_same_measured_ones() -> None:
    # Four rounds by default (docs/bench/2026-11-29-settle.md).
    assert turn_order(2, 4) == turn_order(2, 4, settle=4)
    assert turn_order(2, 3, settle=4) == "01" + "10" + "01" + "10" + "01" + "10" + "01"
    longer, default = turn_order(3, 5, settle=4), turn_order(3, 5, settle=1)
    # The settle rounds rotate as the measured ones do, so every client settles in
    # every position; the measured turns after them are the default's, turn for turn.
    assert longer[: 4 * 3] == "012" + "120" + "201" + "012"
    assert longer[4 * 3 :] == default[3:]


def test_a_plan_says_whose_turn_and_when() -> None:
    plan = TurnPlan("0110", start=1000.0, width=1.5)
    assert plan.bounds(0) == (1000.0, 1001.5) and plan.bounds(3) == (1004.5, 1006.0)
    assert plan.end == 1006.0 and [plan.owner(k) for k in range(4)] == [0, 1, 1, 0]
    assert plan.args(1) == [
        "--turns=0110",
        "--turn-mine=1",
        "--turn-start=1000.000000",
        "--turn-width=1.500000",
    ]
    assert TurnPlan(TURN_DIGITS[11], 0.0, 1.0).owner(0) == 11


def test_a_turn_sums_each_workers_rate_over_its_own_busy_span() -> None:
    turn = Turn(3)
    # Worker 0 ran the whole second; worker 1 connected late and ran half of it.
    turn.add({"began": 10.0, "ended": 11.0, "queries": 1000, "events": 500, "errors": 1})
    turn.add({"began": 10.5, "ended": 11.001, "queries": 501, "events": 250, "errors": 0})
    assert turn.queries == 1501 and turn.events == 750 and turn.errors == 1
    assert turn.qps == pytest.approx(1000 + 1000, rel=1e-3)
    assert turn.tps == pytest.approx(500 + 499, rel=1e-2)
    assert turn.began == 10.0 and turn.ended == 11.001
    assert turn.seconds == pytest.approx(1.001)


def test_steps_with_background_writers_cannot_take_turns() -> None:
    steps = parse_steps(["point-query", "read-only-order"])
    assert takes_turns(steps)
    steps = parse_steps(["qr100"])
    assert not takes_turns(steps)
