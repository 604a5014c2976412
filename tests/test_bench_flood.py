"""bench_flood's last line, from synthetic phases with known round times."""

from __future__ import annotations

from typing import Any

from swarmnode.lab.bench_flood import summary


def _phase(durations: list[float], valid: bool = True) -> dict[str, Any]:
    n = len(durations)
    return {
        "durations": durations,
        "round_s": sum(durations) / n,
        "cpu_s_per_round": sum(durations) / n,
        "rounds": n,
        "valid": valid,
        "honest_accepted": n,
        "honest_trained": n,
        "groups_trained": n,
        "tokens_trained": 10 * n,
        "log_bytes_per_min": 0,
        "s_to_graylist": [None] * 5,
        "outside_training_share": 0.03,
        "trainer_preempted_per_s": 12.0,
        "others_woke_per_s": 11.0,
        "sent": 500,
        "flood_counted": 400,
        "ingest_time_share_max": 0.0,
        "counters": {},
        "work": [[100 + i % 7, 50 + i % 5] for i in range(n)],
    }


def test_flood_phases_are_given_against_calm_and_against_five_idle_peers() -> None:
    calm = [1.0, 1.02, 0.98] * 20
    line = summary(
        {
            "calm0": _phase(calm),
            "5idle0": _phase([1.05 * d for d in calm]),
            "5sybil0": _phase([1.155 * d for d in calm], valid=False),
        }
    )
    sybil = line.split("; 5sybil ")[1]
    assert sybil.startswith("INVALID ratio 1.16 [1.15, 1.16]")  # against calm
    assert "vs_5idle 1.10 [1.09, 1.11]" in sybil  # 1.155 / 1.05, rounds resampled
    idle = line.split("; 5idle ")[1].split(";")[0]
    assert idle.startswith("ratio 1.05") and "vs_5idle" not in idle


def test_sybils_under_every_rate_are_given_against_the_same_flood_at_a_stand_in() -> None:
    """``5sybil_apart`` (the attackers' load without their messages) is the reference
    for ``5sybil_under`` alone: the ratio of the two, and the work-adjusted one."""
    calm = [1.0, 1.02, 0.98] * 20
    line = summary(
        {
            "calm0": _phase(calm),
            "5sybil_under0": _phase([1.12 * d for d in calm]),
            "5sybil_apart0": _phase([1.05 * d for d in calm], valid=False),
        }
    )
    under = line.split("; 5sybil_under ")[1].split(";")[0]
    assert under.startswith("ratio 1.12")
    assert "vs_apart 1.07 [1.06, 1.07]" in under  # 1.12 / 1.05, rounds resampled
    assert "work_adjusted_vs_apart 1.067" in under
    apart = line.split("; 5sybil_apart ")[1]
    assert apart.startswith("INVALID ratio 1.05") and "vs_apart" not in apart


def test_the_flood_across_a_link_is_given_against_the_same_flood_on_loopback() -> None:
    """``5sybil_far`` (the same flood from a namespace of its own) is read against
    ``5sybil_under`` (on loopback): what loopback hides or adds."""
    calm = [1.0, 1.02, 0.98] * 20
    line = summary(
        {
            "calm0": _phase(calm),
            "5sybil_under0": _phase([1.05 * d for d in calm]),
            "5sybil_far0": _phase([1.155 * d for d in calm]),
        }
    )
    far = line.split("; 5sybil_far ")[1]
    assert far.startswith("ratio 1.16") and "vs_under 1.10 [1.09, 1.11]" in far
    assert "work_adjusted_vs_under 1.100" in far
    under = line.split("; 5sybil_under ")[1].split(";")[0]
    assert "vs_under" not in under and "vs_apart" not in under


def test_the_collectors_cost_is_given_per_round_and_generation() -> None:
    from swarmnode.lab.victim import gc_per_round

    gc0 = {"collections": [10, 1, 0], "cpu_s": [0.1, 0.0, 0.0], "trainer_cpu_s": [0.05, 0, 0]}
    gc1 = {"collections": [30, 3, 2], "cpu_s": [0.3, 0.02, 0.4], "trainer_cpu_s": [0.15, 0, 0.2]}
    got = gc_per_round(gc0, gc1, 2)
    assert got == {
        "collections": [10.0, 1.0, 1.0],
        "cpu_s": [0.1, 0.01, 0.2],
        "trainer_cpu_s": [0.05, 0.0, 0.1],
    }
    assert gc_per_round({}, gc1, 1) == {}  # a node that does not report them


def test_a_run_without_calm_says_it_has_no_ratios() -> None:
    """A profiling run of one flood phase printed its phase, then died in the summary
    (KeyError 'calm'), where its last line belongs."""
    line = summary({"5sybil_under0": _phase([1.1] * 10)})
    assert line == "no ratios: no calm phase ran (phases: 5sybil_under)"


def _one_line_error(capsys: Any, *argv: str) -> str:
    """bench_flood's main with ``argv``: it exits 2; its stderr."""
    import sys

    import pytest

    from swarmnode.lab import bench_flood

    saved = sys.argv
    sys.argv = ["bench_flood", *argv]
    try:
        with pytest.raises(SystemExit) as exit_:
            bench_flood.main()
    finally:
        sys.argv = saved
    assert exit_.value.code == 2
    return str(capsys.readouterr().err)


def test_an_unknown_phase_is_a_one_line_error(capsys: Any) -> None:
    err = _one_line_error(capsys, "--phases", "calm,5sybils")
    assert "--phases: no phase 5sybils (known: calm," in err


def test_the_flood_across_a_link_needs_pin_and_says_so_in_one_line(capsys: Any) -> None:
    from swarmnode.lab.farlink import unavailable

    why = unavailable() or "it needs --pin (each side's CPUs)"
    assert f"--phases 5sybil_far: {why}" in _one_line_error(capsys, "--phases", "calm,5sybil_far")
