"""Durations as users type them, and every command's duration options read the same way."""

from __future__ import annotations

import pytest

from kmon.cli import build_parser, main, with_command
from kmon.cli.options import CLUSTER_TIMEOUT_S
from kmon.units import DURATION_FORMS, parse_duration


@pytest.mark.parametrize(("text", "seconds"), [
    ("500ms", 0.5), ("5s", 5.0), ("1.5s", 1.5), (".25s", 0.25), ("10m", 600.0),
    ("1m30s", 90.0), ("2h", 7200.0), ("1h1m1s", 3661.0), ("7d", 604800.0), (" 3s ", 3.0),
    ("1d12h", 129600.0), ("250ms", 0.25),
])
def test_a_duration_is_numbers_with_units_summed(text, seconds):
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize(("text", "why"), [
    ("5", "has no unit"), ("1.5", "has no unit"), ("1m30", "is not a duration"),
    ("0s", "more than zero"), ("0ms", "more than zero"), ("-5s", "is not a duration"),
    ("5 s", "is not a duration"), ("", "is not a duration"), ("5sec", "is not a duration"),
    ("\u0665s", "is not a duration"),
])
def test_anything_else_is_an_error_that_shows_the_accepted_forms(text, why):
    with pytest.raises(ValueError, match=why) as err:
        parse_duration(text)
    assert DURATION_FORMS in str(err.value) or "zero" in why


def parsed(*argv: str):
    parser = build_parser()
    return parser.parse_args(with_command(parser, list(argv)))


@pytest.mark.parametrize(("argv", "name", "value"), [
    (["attach", "1", "--broker-idle", "10m"], "broker_idle_ms", 600_000),
    (["attach", "1", "--broker-idle", "1m30s"], "broker_idle_ms", 90_000),
    (["attach", "1", "--broker-idle-ms", "4000"], "broker_idle_ms", 4000),  # the old form
    (["record", "--pid", "1", "--out", "x", "--broker-idle", "500ms"], "broker_idle_ms", 500),
    (["watch", "--broker-idle", "7d"], "broker_idle_ms", 604_800_000),
    (["simulate-fleet", "--out", "x", "--duration", "90m"], "duration_s", 5400.0),
    (["simulate-fleet", "--out", "x", "--hours", "2"], "duration_s", 7200.0),  # the old form
    (["simulate-fleet", "--out", "x"], "duration_s", 3600.0),
    (["--interval", "2s"], "interval", 2.0),  # no command: the host view takes it
    (["attach", "1", "--interval", "500ms"], "interval", 0.5),
    (["record", "--pid", "1", "--out", "x", "--interval", "1m"], "interval", 60.0),
    (["replay", "f", "--interval", "250ms"], "interval", 0.25),
    (["demo", "--duration", "1m30s"], "duration", 90.0),
])
def test_every_duration_option_takes_a_duration(argv, name, value):
    assert getattr(parsed(*argv), name) == pytest.approx(value)


def test_no_command_is_the_host_view():
    assert parsed().command == "watch"
    assert parsed("--interval", "2s").command == "watch"


def test_one_cluster_timeout_default_across_commands():
    for argv in (["attach", "1"], ["watch"], ["record", "--pid", "1", "--out", "x"]):
        assert parsed(*argv).cluster_timeout == CLUSTER_TIMEOUT_S


@pytest.mark.parametrize("argv", [
    ["attach", "1", "--interval", "2"], ["--interval", "2"], ["attach", "1", "--broker-idle", "5"],
    ["simulate-fleet", "--out", "x", "--duration", "1"], ["record", "--pid", "1", "--out", "x",
                                                          "--cluster-timeout", "3"],
])
def test_a_bare_number_is_a_usage_error_naming_the_forms(argv, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2
    error = capsys.readouterr().err.strip()
    assert error.count("\n") == 0 and "has no unit" in error and DURATION_FORMS in error, error


def test_options_before_a_command_are_explained(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["--config", "my.toml", "attach", "123"])
    assert exit_.value.code == 2
    assert "options go after the command: kmon attach --config my.toml 123" in (
        capsys.readouterr().err)
