"""The resource-manager configuration: YAML modules (policy, dump, logger)."""

from .schema import Config, ConfigError, DumpConfig, LoggerConfig, PolicyConfig, parse_document, parse_modules

__all__ = ["Config", "ConfigError", "DumpConfig", "LoggerConfig", "PolicyConfig",
           "parse_document", "parse_modules"]
