"""The kmon config file: where it is, what it may say, and how CLUSTER resolves."""

from __future__ import annotations

from pathlib import Path

import pytest

from kmon.cli.config import ENV_CONFIG, ConfigError, load_config
from kmon.engine.monitor import NEAR_REAP_FRACTION
from kmon.errors import UserError
from kmon.units import property_arg

FULL = """
[thresholds]
idle_warning = 0.9
close_wait_alert = "2s"
[dashboard]
interval = "500ms"
theme = "textual-light"
[clusters.prod]
bootstrap = "b1:9092,b2:9092"
[clusters.prod.properties]
"security.protocol" = "SASL_SSL"
"sasl.username" = "kmon"
"sasl.password" = "s3cret"
"socket.timeout.ms" = 10000
"""


@pytest.fixture(autouse=True)
def own_config_home(tmp_path, monkeypatch):
    """Every test reads config from its own directory, never the user's."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    monkeypatch.delenv(ENV_CONFIG, raising=False)


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "config.toml"
    path.write_text(text)
    return path


def load_error(path: Path) -> str:
    with pytest.raises(ConfigError) as err:
        load_config(path)
    message = str(err.value)
    assert "\n" not in message and str(path) in message
    return message


def test_no_file_means_defaults(tmp_path):
    config = load_config()
    assert config.path == tmp_path / "xdg" / "kmon" / "config.toml"
    assert config.thresholds.idle_warning == NEAR_REAP_FRACTION == 0.8
    assert config.thresholds.close_wait_alert_ms == 5000
    assert (config.dashboard.interval_s, config.dashboard.theme) == (None, None)
    assert config.clusters == {}


def test_full_file(tmp_path):
    config = load_config(write(tmp_path, FULL))
    assert config.thresholds.idle_warning == 0.9
    assert config.thresholds.close_wait_alert_ms == 2000
    assert config.dashboard.interval_s == 0.5 and config.dashboard.theme == "textual-light"
    prod = config.clusters["prod"]
    assert (prod.name, prod.bootstrap) == ("prod", "b1:9092,b2:9092")
    assert prod.properties["sasl.password"] == "s3cret"
    assert prod.properties["socket.timeout.ms"] == "10000"


def test_default_location_and_environment(tmp_path, monkeypatch):
    default = tmp_path / "xdg" / "kmon" / "config.toml"
    default.parent.mkdir(parents=True)
    default.write_text("[thresholds]\nclose_wait_alert = 1500\n")
    assert load_config().thresholds.close_wait_alert_ms == 1500

    other = tmp_path / "other.toml"
    other.write_text("[dashboard]\ntheme = 'nord'\n")
    monkeypatch.setenv(ENV_CONFIG, str(other))
    assert load_config().dashboard.theme == "nord"
    assert load_config(default).dashboard.theme is None  # --config wins over the environment


def test_named_file_that_is_missing(tmp_path, monkeypatch):
    missing = tmp_path / "nope.toml"
    assert "does not exist" in load_error(missing)
    monkeypatch.setenv(ENV_CONFIG, str(missing))
    with pytest.raises(UserError, match="does not exist"):
        load_config()


def test_bad_toml(tmp_path):
    assert "not valid TOML" in load_error(write(tmp_path, "[thresholds\nidle_warning = 1"))


@pytest.mark.parametrize(("text", "words"), [
    ("[thresholds]\nidle_warning = 'high'", ["thresholds.idle_warning", "(0, 1]"]),
    ("[thresholds]\nclose_wait_alert = 5.5", ["thresholds.close_wait_alert", "duration"]),
    ("[thresholds]\nclose_wait_alert = 'soon'", ["thresholds.close_wait_alert", "soon"]),
    ("[dashboard]\ninterval = true", ["dashboard.interval"]),
    ("[dashboard]\ntheme = 3", ["dashboard.theme", "string"]),
    ("thresholds = 1", ["thresholds", "table"]),
    ("[clusters.prod]\nbootstrap = 9092", ["clusters.prod.bootstrap"]),
    ("[clusters.prod]\nbootstrap = 'b1'", ["clusters.prod.bootstrap", "host:port"]),
    ("[clusters.prod]\nbootstrap = 'b1:9092'\nproperties = {'a' = [1]}",
     ["clusters.prod.properties.a"]),
])
def test_wrong_type(tmp_path, text, words):
    message = load_error(write(tmp_path, text))
    assert all(word in message for word in words), message


@pytest.mark.parametrize(("text", "words"), [
    ("[churn]\nreap_cycles = nan", ["churn.reap_cycles", "nan"]),
    ("[churn]\nfd_growth = inf", ["churn.fd_growth", "inf"]),
    ("[churn]\nopened_per_minute = nan", ["churn.opened_per_minute"]),
    (f"[churn]\nreap_cycles = {'9' * 5000}", ["not valid TOML"]),
    (f"[thresholds]\nclose_wait_alert = '{'9' * 400}s'", ["thresholds.close_wait_alert",
                                                          "at most a year"]),
    (f"[dashboard]\ninterval = '{'9' * 400}s'", ["dashboard.interval", "at most a year"]),
    (f"[dashboard]\ninterval = {10 ** 30}", ["dashboard.interval", "at most"]),
])
def test_a_number_no_setting_can_take_is_one_clear_line(tmp_path, text, words):
    """NaN, infinity, 5,000 digits or a duration past a year raised where nobody caught it
    (ValueError, OverflowError): ``kmon serve``'s reload on SIGHUP, which keeps the running
    session for a bad file, would have ended instead."""
    message = load_error(write(tmp_path, text))
    assert all(word in message for word in words), message


@pytest.mark.parametrize(("text", "key"), [
    ("colour = 'red'", "colour"),
    ("[thresholds]\nidle_warnign = 0.5", "thresholds.idle_warnign"),
    ("[clusters.prod]\nbootstrap = 'b1:9092'\nbootstarp = 'x'", "clusters.prod.bootstarp"),
])
def test_unknown_key(tmp_path, text, key):
    message = load_error(write(tmp_path, text))
    assert key in message and "not a known key" in message


@pytest.mark.parametrize("value", ["0", "-0.5", "1.01"])
def test_idle_warning_out_of_range(tmp_path, value):
    message = load_error(write(tmp_path, f"[thresholds]\nidle_warning = {value}"))
    assert "thresholds.idle_warning" in message and value in message


def test_idle_warning_of_one_is_allowed(tmp_path):
    assert load_config(write(tmp_path, "[thresholds]\nidle_warning = 1")).thresholds \
        .idle_warning == 1.0


def test_named_cluster_with_x_override(tmp_path):
    config = load_config(write(tmp_path, FULL))
    prod = config.resolve_cluster("prod", {"security.protocol": "SSL", "client.rack": "r1"})
    assert (prod.name, prod.bootstrap) == ("prod", "b1:9092,b2:9092")
    assert prod.properties["security.protocol"] == "SSL"
    assert prod.properties["client.rack"] == "r1"
    assert prod.properties["sasl.password"] == "s3cret"
    assert config.clusters["prod"].properties["security.protocol"] == "SASL_SSL"


@pytest.mark.parametrize("bootstrap", ["127.0.0.1:9092", "b1:9092, b2.example.com:9093",
                                       "[::1]:9092", "SASL_SSL://kafka-0:9094"])
def test_bootstrap_string_passes_through(tmp_path, bootstrap):
    cluster = load_config(write(tmp_path, FULL)).resolve_cluster(bootstrap, {"a.b": "c"})
    assert (cluster.name, cluster.bootstrap) == (bootstrap, bootstrap.strip())
    assert cluster.properties == {"a.b": "c"}


def test_unknown_cluster_name_lists_the_configured_ones(tmp_path):
    config = load_config(write(tmp_path, FULL + "[clusters.staging]\nbootstrap = 's1:9092'\n"))
    with pytest.raises(ConfigError) as err:
        config.resolve_cluster("qa", {})
    message = str(err.value)
    assert "'qa'" in message and "prod, staging" in message and str(config.path) in message
    with pytest.raises(ConfigError, match="none"):
        load_config().resolve_cluster("qa", {})


def test_secrets_are_masked_when_shown(tmp_path):
    prod = load_config(write(tmp_path, FULL)).resolve_cluster("prod", {"ssl.key.password": "k"})
    shown = prod.shown_properties()
    assert shown["sasl.password"] == shown["ssl.key.password"] == "***"
    assert shown["sasl.username"] == "kmon" and shown["security.protocol"] == "SASL_SSL"
    assert "s3cret" not in repr(prod) and "s3cret" not in str(shown)


def test_a_property_value_is_read_from_a_file(tmp_path):
    value = tmp_path / "password"
    value.write_text("s3cret\n")
    assert property_arg(f"sasl.password=@{value}") == ("sasl.password", "s3cret")
    assert property_arg("acks=all") == ("acks", "all")
