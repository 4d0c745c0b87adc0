"""The engine session's console (harness.engine_session): an emulated engine said once an experiment."""

from __future__ import annotations

from harness.engine_session import emulated_line


def test_an_emulated_engine_is_said_once_not_at_every_launch():
    """A comparison launches its engines once a repeat: the EMULATED line came under each launch (issue 44:
    no warning printed twice); now the first launch of an engine with a timing source says it."""
    emu = {"emulated": True, "timing_source": "h200-test-profile"}
    first = emulated_line("dynamo-test-once", emu)
    assert first.startswith("EMULATED: engine=dynamo-test-once's timings come from h200-test-profile, not from")
    assert emulated_line("dynamo-test-once", emu) == ""
    assert emulated_line("dynamo-test-once", {**emu, "timing_source": "other"}).startswith("EMULATED")
    assert emulated_line("vllm", {"emulated": False}) == ""
