"""Design rationale records: built from decisions, stamped by the time provider, rendered as markdown."""

from __future__ import annotations

from stepline.evidence import drr_for_decision, drr_markdown, make_drr
from stepline.model import Approval, Gate
from stepline.time import frozen


def test_make_drr_is_stamped_and_deterministic() -> None:
    """Under a frozen clock the same decision gets the same time and id; a different one another id."""
    with frozen("2026-04-01T08:00:00+00:00"):
        first = make_drr("use PostgreSQL", "storage for orders", options=["PostgreSQL", "SQLite"],
                         evidence=["E1"], rationale="concurrency", step_id="s3")
        again = make_drr("use PostgreSQL", "storage for orders", options=["PostgreSQL", "SQLite"],
                         evidence=["E1"], rationale="concurrency", step_id="s3")
        other = make_drr("use SQLite", "storage for orders")
    assert first == again and first.id.startswith("drr-") and len(first.id) == 16
    assert first.time == "2026-04-01T08:00:00.000000+00:00"
    assert other.id != first.id
    assert make_drr("d", "c", drr_id="drr-fixed").id == "drr-fixed"


def test_drr_for_a_gate_decision() -> None:
    """A person's approval becomes a DRR naming the gate, the approver and their notes."""
    gate = Gate(gate_id="tool:shell:s2", step_id="s2", kind="tool", reason="high-risk tool 'shell'",
                created_at="2026-04-01T08:00:00+00:00")
    approval = Approval(gate_id=gate.gate_id, decision="approved", approver="ana", time="2026-04-01T08:05:00+00:00",
                        notes="read-only command")
    with frozen("2026-04-01T08:05:00+00:00"):
        drr = drr_for_decision(gate, approval, evidence=["E7"])
    assert drr.decision == "approved: tool:shell:s2" and drr.context == "high-risk tool 'shell'"
    assert (drr.signoff, drr.rationale, drr.gate_id, drr.step_id) == ("ana", "read-only command", gate.gate_id, "s2")
    assert drr.evidence == ["E7"]


def test_markdown_has_every_part() -> None:
    """The markdown carries the id, decision, time, gate, context, options, evidence and rationale."""
    with frozen("2026-04-01T08:00:00+00:00"):
        drr = make_drr("ship it", "release 1.0", options=["ship", "wait"], evidence=["E1", "E2"],
                       rationale="all gates green", signoff="ana", gate_id="g1")
    text = drr_markdown(drr)
    assert text.startswith(f"# {drr.id}: ship it\n")
    for part in ("- Time: 2026-04-01T08:00:00.000000+00:00", "- Gate: g1", "- Sign-off: ana", "## Context",
                 "release 1.0", "## Options", "- wait", "## Evidence", "- E2", "## Rationale", "all gates green"):
        assert part in text
    bare = drr_markdown(make_drr("d", ""))
    assert "_none recorded_" in bare and "_none_" in bare and "## Options" not in bare
