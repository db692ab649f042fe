"""Configuration: the command-line settings (`settings`) and their option file
(`options`); the resource-manager configuration's schema (`schema`: YAML
modules policy, dump, logger) and where it comes from (`sources`); and the
Config gRPC service the node agent pushes it to (`service`, imported on its
own so that reading configuration does not load gRPC)."""

from .schema import (
                     DEFAULT_RESERVED_NAMESPACES,
                     Config,
                     ConfigError,
                     DumpConfig,
                     LoggerConfig,
                     PolicyConfig,
                     parse_document,
                     parse_modules,
)
from .settings import EngineSettings, Settings

__all__ = ["DEFAULT_RESERVED_NAMESPACES", "Config", "ConfigError", "DumpConfig", "EngineSettings", "LoggerConfig",
           "PolicyConfig", "Settings", "parse_document", "parse_modules"]
