"""The kmon config file: alert thresholds, dashboard defaults and named clusters.

Read from ``--config PATH``, else ``$KMON_CONFIG``, else
``$XDG_CONFIG_HOME/kmon/config.toml`` (``~/.config/kmon/config.toml``); only
that last, default file may be missing. Every problem is a ConfigError naming
the file and the key.

The path comes from the environment, which may be another user's (``sudo -E``,
``su`` without ``-``), so a file is read only when root or the user kmon runs as
owns it and no one else may write it; a client property that loads a library or
runs a command (``DANGEROUS_PROPERTIES``) is refused from a file and taken only
from kmon's command line (``-X``); and a bootstrap string is always itself, never
a configured cluster of the same name.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kmon.errors import UserError
from kmon.files import UnsafeFile, read_bounded
from kmon.model import ChurnThresholds, Thresholds
from kmon.redact import MASK, is_secret_name
from kmon.units import MAX_DURATION_S, MAX_INT_ARG, parse_duration

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

ENV_CONFIG = "KMON_CONFIG"
# [churn] key -> (ChurnThresholds field, kind)
CHURN_KEYS_TO_FIELDS = {
    "opened_per_minute": ("opened_per_minute", "rate"),
    "clients_per_minute": ("clients_per_minute", "rate"),
    "short_lived": ("short_lived_ms", "duration"),
    "reap_cycles": ("reap_cycles", "count"),
    "storm_processes": ("storm_processes", "count"),
    "storm_window": ("storm_window_ms", "duration"),
    "fd_growth": ("fd_growth", "count"),
    "window": ("window_ms", "duration"),
}
CHURN_KEYS = tuple(CHURN_KEYS_TO_FIELDS)
MAX_CONFIG_BYTES = 1024 * 1024
_ADDRESS = r"(?:[A-Za-z][A-Za-z0-9_]*://)?(?:\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9_.-]+):[0-9]{1,5}"
_BOOTSTRAP = re.compile(rf"^\s*{_ADDRESS}\s*(?:,\s*{_ADDRESS}\s*)*$")
# librdkafka properties that load a library or run a command (see its CONFIGURATION.md)
DANGEROUS_PROPERTIES = frozenset({
    "plugin.library.paths",  # dlopen()s each library
    "sasl.kerberos.kinit.cmd",  # run by /bin/sh
    "ssl.engine.location", "ssl.engine.id",  # an OpenSSL engine library, loaded
    "ssl.providers",  # OpenSSL 3 provider modules, loaded
    "interceptors", "ssl_engine_callback_data", "opaque", "logger",
    "on_delivery", "on_commit",
})


class ConfigError(UserError):
    """The config file, or a cluster named on the command line, is not usable."""


@dataclass(frozen=True)
class DashboardConfig:
    """Dashboard defaults; None leaves the choice to the command line and the dashboard."""

    interval_s: float | None = None
    theme: str | None = None


@dataclass(frozen=True)
class ClusterConfig:
    """A cluster to watch: a configured name, or a bootstrap string named as itself."""

    name: str
    bootstrap: str
    properties: dict[str, str] = field(default_factory=dict, repr=False)  # may hold secrets
    broker_idle_ms: int | None = None  # the brokers' connections.max.idle.ms, if configured

    def shown_properties(self) -> dict[str, str]:
        """The client properties, fit to show: secret values masked."""
        return {k: MASK if is_secret_name(k) else v for k, v in self.properties.items()}


@dataclass(frozen=True)
class Config:
    """Everything the config file sets, with defaults for what it does not."""

    path: Path  # the file read, or looked for
    thresholds: Thresholds = field(default_factory=Thresholds)
    churn: ChurnThresholds = field(default_factory=ChurnThresholds)
    dashboard: DashboardConfig = field(default_factory=DashboardConfig)
    clusters: dict[str, ClusterConfig] = field(default_factory=dict)

    def resolve_cluster(self, arg: str, extra_properties: Mapping[str, str]) -> ClusterConfig:
        """The cluster ``arg`` names: a configured name, else a bootstrap string.

        ``extra_properties`` (``-X``) override the file's properties.
        """
        configured = None if looks_like_bootstrap(arg) else self.clusters.get(arg)
        if configured is not None:
            return ClusterConfig(configured.name, configured.bootstrap,
                                 {**configured.properties, **extra_properties},
                                 configured.broker_idle_ms)
        if looks_like_bootstrap(arg):
            return ClusterConfig(arg, arg.strip(), dict(extra_properties))
        names = ", ".join(sorted(self.clusters)) or "none"
        raise ConfigError(f"{arg!r} is neither a cluster named in {self.path} (configured: "
                          f"{names}) nor a bootstrap string host:port[,host:port...]")


def looks_like_bootstrap(text: str) -> bool:
    """True for ``host:port[,host:port...]``."""
    return bool(_BOOTSTRAP.match(text))


def is_dangerous_property(name: str) -> bool:
    """True for a client property that loads code or runs a command: those listed, and
    every callback (``*_cb``, ``*callback*``), which only code may set."""
    name = name.strip().lower()
    return name in DANGEROUS_PROPERTIES or name.endswith("_cb") or "callback" in name


def default_path(env: Mapping[str, str] = os.environ) -> Path:
    """``$XDG_CONFIG_HOME/kmon/config.toml``, or ``~/.config/kmon/config.toml``."""
    base = env.get("XDG_CONFIG_HOME", "")
    root = Path(base) if os.path.isabs(base) else Path.home() / ".config"
    return root / "kmon" / "config.toml"


def load_config(path: Path | None = None) -> Config:
    """The configuration from ``path``, ``$KMON_CONFIG`` or the default file."""
    named = path or (Path(os.environ[ENV_CONFIG]) if os.environ.get(ENV_CONFIG) else None)
    path = named or default_path()
    if not path.exists():
        if named is None:
            return Config(path=path)
        raise ConfigError(f"config file {path} does not exist")
    try:
        raw = tomllib.loads(read_bounded(path, MAX_CONFIG_BYTES, "config file",
                                              trusted_only=True).decode("utf-8"))
    except UnsafeFile as err:
        raise ConfigError(str(err)) from err
    except UnicodeDecodeError as err:
        raise ConfigError(f"config file {path} is not UTF-8 text") from err
    except (tomllib.TOMLDecodeError, RecursionError, ValueError) as err:  # (an integer of
        # more digits than Python converts is a ValueError of tomllib's own)
        raise ConfigError(f"config file {path} is not valid TOML: {err}") from err
    return _ConfigReader(path).config(raw)


class _ConfigReader:
    """Checks the parsed TOML of one file; errors name the file and the dotted key."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def error(self, key: str, problem: str) -> ConfigError:
        return ConfigError(f"config file {self.path}: {key} {problem}")

    def table(self, raw: object, key: str, allowed: tuple[str, ...] | None = None) -> dict:
        if not isinstance(raw, dict):
            raise self.error(key, "must be a table")
        for name in raw:
            if allowed is not None and name not in allowed:
                raise self.error(f"{key}.{name}" if key else name,
                                 f"is not a known key (known: {', '.join(allowed)})")
        return raw

    def config(self, raw: dict) -> Config:
        top = self.table(raw, "", ("thresholds", "churn", "dashboard", "clusters"))
        thresholds = self.table(top.get("thresholds", {}), "thresholds",
                                ("idle_warning", "close_wait_alert", "middlebox_idle"))
        middlebox = thresholds.get("middlebox_idle")
        dashboard = self.table(top.get("dashboard", {}), "dashboard", ("interval", "theme"))
        clusters = self.table(top.get("clusters", {}), "clusters")
        theme = dashboard.get("theme")
        if theme is not None and not isinstance(theme, str):
            raise self.error("dashboard.theme", "must be a string")
        interval = dashboard.get("interval")
        return Config(
            path=self.path,
            thresholds=Thresholds(
                idle_warning=self.fraction(thresholds.get("idle_warning",
                                                          Thresholds.idle_warning),
                                           "thresholds.idle_warning"),
                close_wait_alert_ms=round(1000 * self.seconds(
                    thresholds.get("close_wait_alert", Thresholds.close_wait_alert_ms),
                    "thresholds.close_wait_alert")),
                middlebox_idle_ms=None if middlebox is None else round(1000 * self.seconds(
                    middlebox, "thresholds.middlebox_idle"))),
            churn=self.churn(self.table(top.get("churn", {}), "churn", CHURN_KEYS)),
            dashboard=DashboardConfig(
                interval_s=None if interval is None else self.seconds(interval,
                                                                      "dashboard.interval"),
                theme=theme),
            clusters={name: self.cluster(name, entry) for name, entry in clusters.items()},
        )

    def churn(self, raw: dict) -> ChurnThresholds:
        """The [churn] table: counts and durations, each optional."""
        values: dict[str, Any] = {}  # ChurnThresholds fields: a rate a float, the rest ints
        for key, (field_name, kind) in CHURN_KEYS_TO_FIELDS.items():
            if key not in raw:
                continue
            value = raw[key]
            if kind == "duration":
                values[field_name] = round(1000 * self.seconds(value, f"churn.{key}"))
            elif (isinstance(value, bool) or not isinstance(value, (int, float))
                  or not 0 < value <= MAX_INT_ARG):  # (nan and inf too)
                raise self.error(f"churn.{key}", f"must be a number above zero and at most "
                                                 f"{MAX_INT_ARG}, not {value!r}")
            else:
                values[field_name] = value if kind == "rate" else int(value)
        return ChurnThresholds(**values)

    def fraction(self, value: object, key: str) -> float:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 1:
            raise self.error(key, f"must be a number in (0, 1], not {value!r}")
        return float(value)

    def seconds(self, value: object, key: str) -> float:
        """A duration string (``5s``, ``500ms``) or a whole number of milliseconds, at most
        MAX_DURATION_S."""
        if isinstance(value, int) and not isinstance(value, bool):
            if not 0 < value <= MAX_DURATION_S * 1000:
                raise self.error(key, f"must be more than zero and at most "
                                      f"{MAX_DURATION_S * 1000:.0f} ms, not {value}")
            return value / 1000
        if isinstance(value, str):
            try:
                seconds = parse_duration(value)
            except ValueError as err:
                raise ConfigError(f"config file {self.path}: {key}: {err}") from err
            if not seconds <= MAX_DURATION_S:  # (inf too: 400 digits)
                raise self.error(key, f"must be at most a year, not {value[:40]!r}")
            return seconds
        raise self.error(key, f"must be a duration string (e.g. \"5s\") or milliseconds, "
                              f"not {value!r}")

    def cluster(self, name: str, raw: object) -> ClusterConfig:
        key = f"clusters.{name}"
        if looks_like_bootstrap(name):
            raise self.error(key, "is a cluster name that looks like a bootstrap string "
                             "(host:port); a name cannot be one")
        entry = self.table(raw, key, ("bootstrap", "properties", "broker_idle"))
        bootstrap = entry.get("bootstrap")
        if not isinstance(bootstrap, str) or not looks_like_bootstrap(bootstrap):
            raise self.error(f"{key}.bootstrap", "must be a bootstrap string "
                             "host:port[,host:port...]")
        properties = self.table(entry.get("properties", {}), f"{key}.properties")
        for prop in properties:
            if is_dangerous_property(prop):
                raise self.error(f"{key}.properties.{prop}", "loads a library or runs a command: "
                                 "kmon takes it only on its command line (-X)")
        idle = entry.get("broker_idle")
        return ClusterConfig(name, bootstrap.strip(), {
            prop: self.property_value(value, f"{key}.properties.{prop}")
            for prop, value in properties.items()},
            None if idle is None else round(1000 * self.seconds(idle, f"{key}.broker_idle")))

    def property_value(self, value: object, key: str) -> str:
        if isinstance(value, bool):
            return "true" if value else "false"
        if isinstance(value, (str, int, float)):
            return str(value)
        raise self.error(key, "must be a string, number or boolean")
