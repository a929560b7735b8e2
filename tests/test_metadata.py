"""RunMetadata reads the stored JSON object into typed fields and writes it back as it was."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mallocbench.analysis.summary import min_effect_of
from mallocbench.errors import MallocbenchError
from mallocbench.model.metadata import (
    AdaptiveRecord,
    AllocatorRecord,
    DesignRecord,
    HostFacts,
    RunMetadata,
)
from mallocbench.model.results import RunResult
from mallocbench.report import facts

FIXTURE = Path(__file__).parent / "fixtures" / "results-small.json"


def _same_json(a: dict[str, object], b: dict[str, object]) -> bool:
    """Equal, and in the same key order (results.json is compared byte for byte)."""
    return json.dumps(a) == json.dumps(b)


def test_the_recorded_runs_metadata_round_trips_key_for_key() -> None:
    stored = json.loads(FIXTURE.read_text())["metadata"]
    meta = RunMetadata.from_dict(stored)
    assert meta.host is not None and meta.host.name == "vm" and meta.host.cpus == 2
    assert meta.dataset is not None and meta.dataset.cache_bytes == 64 << 20
    assert meta.allocators is not None and meta.allocators["je"].version == "5.3.0-1"
    assert meta.durations is not None and meta.durations.max_warmup_s is None
    assert _same_json(meta.to_dict(), stored)
    # ... and through the result that results.json is.
    whole = json.loads(FIXTURE.read_text())
    assert _same_json(RunResult.from_dict(whole).to_dict()["metadata"], stored)


def test_unknown_keys_nulls_and_unreadable_values_survive() -> None:
    stored: dict[str, object] = {
        "from_a_newer_version": {"nested": [1, 2]},
        "host": "h",
        "cpus": None,  # null, not absent
        "kernel": "6.1",
        "label": "nightly",
        "min_effect": "3%",  # as old stores may hold it
        "design": "sequential",  # a shape this version does not read
        "allocators": {"je": "5.3.0"},  # a cluster's hosts agreed on their versions
        "adaptive": {"stage1_blocks": 3, "new_field": True},
    }
    meta = RunMetadata.from_dict(stored)
    assert _same_json(meta.to_dict(), stored)
    assert meta.design is None and meta.allocators is None and meta.min_effect == 0.03
    assert meta.adaptive is not None and meta.adaptive.stage1_blocks == 3
    assert meta.host is not None and meta.host.cpus is None and meta.host.os is None
    assert "os" not in meta.to_dict()
    # Unknown simple values are shown as they always were, under their key.
    assert ("label", "nightly") in facts.run_facts(meta)
    assert all(label != "from_a_newer_version" for label, _ in facts.run_facts(meta))


def test_min_effect_is_read_once_into_a_fraction_and_written_back_as_stored() -> None:
    for stored, typed in (("3%", 0.03), (0, 0.0), (0.05, 0.05), (None, None)):
        meta = RunMetadata.from_dict({"min_effect": stored})
        assert meta.min_effect == typed and not meta.extra
        assert json.dumps(meta.to_dict()) == json.dumps({"min_effect": stored})
        result = RunResult("r1", "e", "base", metadata=meta)
        assert min_effect_of(result) == (typed or 0.0)
    # A changed value is written as the fraction it now is.
    meta = RunMetadata.from_dict({"min_effect": "3%"})
    meta.min_effect = 0.1
    assert meta.to_dict() == {"min_effect": 0.1}
    # No fraction: kept as it came, and refused by the analysis unless --min-effect is given.
    for bad in ("lots", 0.7, "-1%"):
        meta = RunMetadata.from_dict({"min_effect": bad})
        assert meta.min_effect is None and meta.to_dict() == {"min_effect": bad}
        result = RunResult("r1", "e", "base", metadata=meta)
        with pytest.raises(MallocbenchError, match=r"min_effect of run r1 = .* give --min-effect"):
            min_effect_of(result)
        assert min_effect_of(result, 0.02) == 0.02


def test_a_new_record_writes_keys_in_the_order_they_were_set() -> None:
    meta = RunMetadata(
        host=HostFacts(name="h", cpus=4),
        allocators={"je": AllocatorRecord(version="5.3.0")},
        repeats=3,
        design=DesignRecord(asked="interleaved", used="sequential"),
    )
    meta.min_effect = None  # assigned: written as null
    meta.update_from_dict({"soak": {"step": "s"}, "unknown": 1})
    meta.adaptive = AdaptiveRecord(rounds=2)
    meta.notes = ["n"]
    written = meta.to_dict()
    assert list(written)[:12] == list(HostFacts().to_dict())  # every host fact, nulls too
    assert list(written)[12:] == [
        "allocators", "repeats", "design", "min_effect", "soak", "unknown", "adaptive", "notes",
    ]  # fmt: skip
    assert written["allocators"] == {"je": {"version": "5.3.0", "library": None}}
    assert written["design"] == {"asked": "interleaved", "used": "sequential"}
    assert "stage1_blocks" not in written["adaptive"]
    assert RunMetadata().to_dict() == {}
    assert _same_json(RunMetadata.from_dict(written).to_dict(), written)
