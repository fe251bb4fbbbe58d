"""The pure parts of a derived request timeout: what it is from the work and the measured decode step
(tinker_atropos/request_timeouts.py), and the finding on requests that outlived theirs
(rl_mcp/diagnosis/request_rules.py). The real run is in test_env_stalls.py."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from rl_mcp.diagnosis.facts import RunFacts
from rl_mcp.diagnosis.request_rules import requests_time_out
from rl_mcp.diagnosis.rules import diagnose
from rl_mcp.runs.env_health import Requests
from tinker_atropos.env_process.timeout_fitter import policy_of
from tinker_atropos.reply_cap import ReplyCap
from tinker_atropos.request_timeouts import Decoding, Policy, Workload, fit, workload

POLICY = Policy(margin=2.0, prefill_s=10.0, ceiling_s=1800.0)


def test_until_the_server_has_timed_a_step_the_environments_own_timeout_holds() -> None:
    got = fit(POLICY, 120.0, Workload(reply_tokens=2048, rows=32, turns=3), None)
    assert (got.timeout_s, got.cut_to, got.step_s) == (120.0, None, None)
    assert got.group_timeout_s == 3 * 120 + 10
    assert "the environment's own 120 s" in got.basis


def test_the_timeout_follows_the_reply_tokens_and_the_rows_the_run_schedules() -> None:
    # 2048 tokens at 40 ms a step measured at 8 rows, the run schedules 32: 160 ms a token
    got = fit(POLICY, 120.0, Workload(reply_tokens=2048, rows=32, turns=3), Decoding(0.040, 8.0))
    assert got.step_s == pytest.approx(0.160)
    assert got.timeout_s == pytest.approx(2 * 2048 * 0.160 + 10)
    assert got.group_timeout_s == pytest.approx(3 * got.timeout_s + 10)
    assert got.cut_to is None
    assert "2 x 2048 tokens x 160.0 ms a decode step at the 32 rows the run schedules" in got.basis
    assert "(measured at 8.0 rows, scaled to 32 rows)" in got.basis
    # a fast server: never below the environment's own timeout
    assert fit(POLICY, 120.0, Workload(64, 8, 1), Decoding(0.001, 8.0)).timeout_s == 120.0


def test_a_step_at_the_scheduled_rows_is_read_off_the_steps_measured_at_several() -> None:
    # SmolLM2-like: 59 ms a step alone, 4 ms more a row: 8 rows take 87 ms, not 8 x 59
    measured = Decoding(0.060, 1.5, by_rows={1: 0.059, 2: 0.063, 3: 0.067})
    step, how = measured.step_at(8)
    assert step == pytest.approx(0.087) and how == "read at 8 rows off the steps measured at 1-3 rows"
    assert measured.step_at(2) == (0.063, "measured at 2 rows")
    # a slower step at fewer rows (the trainer took the CPU meanwhile) is the least it takes
    assert Decoding(0.1, 2.0, by_rows={1: 0.2, 4: 0.1}).step_at(6)[0] == 0.2


def test_the_servers_cap_sizes_the_reply_and_past_the_ceiling_the_request_asks_less() -> None:
    cap = ReplyCap(context=8192, max_reply_tokens=1024)
    capped = fit(POLICY, 60.0, Workload(16000, 8, 1), Decoding(0.050, 8.0, cap))
    assert capped.timeout_s == pytest.approx(2 * 1024 * 0.050 + 10) and capped.cut_to is None
    assert "the 16000 tokens asked are capped at 1024 by the server" in capped.basis
    slow = fit(POLICY, 120.0, Workload(4000, 8, 1), Decoding(0.5, 8.0))  # 4000 s of decoding
    assert slow.timeout_s == 1800.0 and slow.cut_to == int((1800 - 10) / (2 * 0.5))
    assert f"each request generates at most {slow.cut_to}" in slow.basis


def test_the_workload_is_read_from_the_environments_config() -> None:
    config = SimpleNamespace(
        group_size=4, batch_size=8, max_batches_offpolicy=3, max_num_workers=16, max_token_length=2048
    )
    assert workload(config, None) == Workload(reply_tokens=2048, rows=24, turns=1)
    assert workload(SimpleNamespace(**vars(config), max_agent_turns=3), 512) == Workload(512, 24, 3)
    assert workload(SimpleNamespace(**{**vars(config), "max_num_workers": 2}), None).rows == 8


def test_the_policy_is_the_run_configs_section(tmp_path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("env: {}\nrequest_timeouts: {margin: 3, prefill_s: 5, ceiling_s: 600}\n")
    assert policy_of(["serve", "--config", str(config)]) == Policy(3.0, 5.0, 600.0)
    config.write_text("env: {}\n")
    assert policy_of(["serve", "--config", str(config)]) is None
    assert policy_of(["serve"]) is None


def facts(requests: Requests, *, steps: int = 0, tinker: dict | None = None) -> RunFacts:
    metrics = [{"step": s, "time": 1000.0 + s} for s in range(1, steps + 1)]
    return RunFacts(
        "r1",
        metrics,
        [],
        env={"group_size": 8, "max_token_length": 2048},
        trainer=tinker or {"base_model": "Qwen/Qwen3-8B"},  # a hub model: no context known, no cap
        active=True,
        now=2000.0,
        running_since=900.0,
        requests=requests,
    )


def test_requests_that_time_out_are_the_finding_with_the_tokens_that_fit() -> None:
    slow = Requests(
        sent=12,
        answered=0,
        timeouts=12,
        client_retries=24,
        client_timeout_s=120.0,
        max_asked=2048,
        seconds_per_token=0.1,
        last_timeout_at=1990.0,
    )
    found = requests_time_out(facts(slow))
    assert found is not None and found.severity == "error"  # no step yet
    # (120 - 10) / (2 x 0.1) = 550 tokens fit: 512, a multiple of 64
    assert found.next_step.arguments == {"field": "max_token_length", "value": 512}
    assert "12 timed out; the timeout now 120 s" in found.evidence[0].summary
    assert "stalled" not in {f.code for f in diagnose(facts(slow))}  # the cause, not the symptom


def test_without_a_measured_speed_the_group_halves_and_once_it_fits_nothing_is_asked() -> None:
    unmeasured = Requests(sent=4, timeouts=4, client_timeout_s=1.0, max_asked=2048, last_timeout_at=1990.0)
    found = requests_time_out(facts(unmeasured))
    assert found is not None and found.next_step.arguments == {"field": "group_size", "value": 4}
    fitted = Requests(
        sent=9,
        answered=5,
        timeouts=4,
        client_timeout_s=420.0,
        max_asked=2048,
        seconds_per_token=0.1,
        last_timeout_at=1200.0,
    )
    found = requests_time_out(facts(fitted, steps=3))
    assert found is not None and found.severity == "info" and found.next_step.tool == "rl_check_status"
    assert requests_time_out(facts(Requests(sent=3, answered=3))) is None


def test_the_servers_clock_times_steps_by_rows_without_prefills(monkeypatch: pytest.MonkeyPatch) -> None:
    from tinker_atropos.backends.local import decode_clock

    now = [0.0]
    monkeypatch.setattr(decode_clock.time, "monotonic", lambda: now[0])
    clock = decode_clock.DecodeClock()
    for rows, gap in [(1, 0.05)] * 9 + [(2, 0.06)] * 3:
        now[0] += gap
        clock.stepped(rows)
    now[0] += 3.0  # a prompt prefilled between two steps: paid once, not a token's time
    clock.exclude(2.94)
    clock.stepped(1)
    assert clock.by_rows == {1: pytest.approx((8 * 0.05 + 0.06) / 9)}  # 2 rows: too few steps timed yet
    clock.idle()
    now[0] += 100.0  # idle: not a step
    clock.stepped(1)
    assert clock.step_s == pytest.approx((8 * 0.05 + 3 * 0.06 + 0.06) / 12)


def test_retries_after_a_dropped_connection_are_no_timeout_finding() -> None:
    """A server that refused or dropped a connection is not slow: no shorter reply would have helped."""
    dropped = Requests(sent=3, answered=3, client_retries=2, client_retry_causes={"connection ConnectError": 2})
    assert requests_time_out(facts(dropped)) is None
    timed = Requests(
        sent=3, answered=3, client_retries=2, client_retry_causes={"connection ConnectError": 1, "timeout": 1}
    )
    found = requests_time_out(facts(timed))
    assert found is not None and "0 model request tries outlived their timeout and 1 were sent again" in found.title
